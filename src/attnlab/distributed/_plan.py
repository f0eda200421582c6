"""The plan of a distributed call: where to cut q and k/v, which chunk pairs to run, and whether
one task fits a worker's memory, all decided before anything is scheduled.

Shape legend: ... leading batch axes, N query rows, M keys, d_k and d_v widths; a task pairs a
chunk of n query rows with a chunk of m keys.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from attnlab.core._validate import Inputs
from attnlab.core.masks import Dense, TileState
from attnlab.distributed._partial import BLOCK
from attnlab.errors import AttnlabError

Span = tuple[int, int]


@dataclass(frozen=True)
class Plan:
    """q's row chunks, k/v's key chunks, and for each q chunk the key chunks it runs against."""

    q_spans: list[Span]
    kv_spans: list[Span]
    pairs: list[list[int]]  # pairs[i]: the kv chunks scheduled against q chunk i
    task_bytes: int  # the estimate for the largest task

    @property
    def tasks(self) -> int:
        return sum(len(p) for p in self.pairs)


def spans(total: int, count: int) -> list[Span]:
    """``count`` contiguous spans covering range(total), their sizes differing by at most one."""
    edges = np.linspace(0, total, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def check_count(name: str, value, high: int, what: str) -> int | None:
    """None, or a chunk count from 1 to ``high`` (one row or key per chunk at most)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= high:
        raise AttnlabError(
            f"expected {name} to be None or an integer from 1 to {high} (the {what}), "
            f"but got {value!r} instead"
        )
    return int(value)


def task_bytes(x: Inputs, n: int, m: int) -> int:
    """Bytes one task holds at its peak: its chunks of q, k (and kᵀ) and v, the partial it
    returns and a merge's two inputs, the tiles of scores, and its slice of a Dense mask."""
    item = x.q.dtype.itemsize
    lead = math.prod(x.lead)
    dk, dv = x.q.shape[-1], x.v.shape[-1]
    inputs = (
        math.prod(x.q.shape[:-2]) * n * dk
        + 2 * math.prod(x.k.shape[:-2]) * m * dk
        + math.prod(x.v.shape[:-2]) * m * dv
    )
    partials = 3 * lead * n * (dv + 1)  # a merge holds two and writes one
    rows = min(n, BLOCK)
    scratch = 2 * rows * min(m, BLOCK) + 2 * rows * m  # tiles, and the exact pass's scores
    total = (inputs + partials + scratch) * item
    if x.mask is not None:  # the mask's rendered rows, and a Dense part's slice
        total += rows * m * (item + 1)
        for part in x.mask.parts():
            if isinstance(part, Dense):
                a = part.array
                total += (
                    math.prod(a.shape[:-2])
                    * (n if a.shape[-2] > 1 else 1)
                    * (m if a.shape[-1] > 1 else 1)
                    * a.dtype.itemsize
                )
    return int(total)


def worker_budget(client) -> tuple[float, str] | None:
    """(bytes one task may use, how that was found) from the workers' memory limits, or None.

    A running task cannot be spilled to disk, so it must fit below the point where Dask pauses
    a worker (``distributed.worker.memory.pause``, 80% of ``memory_limit`` by default), shared
    between the worker's threads. The smallest worker decides.
    """
    if client is None:
        return None
    import dask

    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    pause = dask.config.get("distributed.worker.memory.pause", 0.8) or 1.0
    best = None
    for info in workers.values():
        limit, threads = info.get("memory_limit") or 0, max(1, info.get("nthreads") or 1)
        if limit:
            share = limit * pause / threads
            if best is None or share < best[0]:
                best = (
                    share,
                    f"memory_limit {_mib(limit)} x pause fraction {pause:g} / {threads} thread(s)",
                )
    return best


def make_plan(x: Inputs, q_chunks, kv_chunks, threads: int, budget) -> Plan:
    """Choose the chunks (or check the caller's), refuse a task that cannot fit, and list the
    chunk pairs the mask does not block whole (for every batch element)."""
    asked_q = check_count("q_chunks", q_chunks, x.n, f"number of query rows N={x.n}")
    asked_kv = check_count("kv_chunks", kv_chunks, x.m, f"number of keys M={x.m}")
    kv = asked_kv or min(x.m, max(1, threads))
    # At least two tasks per thread, so uneven ones (a causal mask's) even out.
    q = asked_q or min(x.n, max(1, math.ceil(2 * threads / kv)))
    q, kv = _floor(x, q, kv)
    need = task_bytes(x, _largest(x.n, q), _largest(x.m, kv))
    if budget is not None:
        limit, how = budget
        while need > limit and ((asked_q is None and q < x.n) or (asked_kv is None and kv < x.m)):
            if asked_q is None and q < x.n:  # smaller query chunks first: k and v move less
                q = min(x.n, 2 * q)
            else:
                kv = min(x.m, 2 * kv)
            need = task_bytes(x, _largest(x.n, q), _largest(x.m, kv))
        if need > limit:
            raise AttnlabError(
                f"expected each task to fit a worker's memory, but a chunk of "
                f"{_largest(x.n, q)} query rows x {_largest(x.m, kv)} keys (q_chunks={q}, "
                f"kv_chunks={kv}, batch {x.lead}) needs about {_mib(need)} per task, over the "
                f"{_mib(limit)} a task may use ({how}); pass larger q_chunks or kv_chunks"
            )
    q_spans, kv_spans = spans(x.n, q), spans(x.m, kv)
    pairs = [
        [
            j
            for j, cols in enumerate(kv_spans)
            if x.mask is None
            or x.mask.tile_state(rows, cols, x.n, x.m, len(x.lead)) is not TileState.BLOCKED
        ]
        for rows in q_spans
    ]
    return Plan(q_spans, kv_spans, pairs, need)


#: Below this many scores a task costs more to schedule (a few ms) than to compute (tens of µs).
MIN_TASK_SCORES = 2**16
#: A plan may keep up to this many tasks however small: their scheduling stays a few tens of ms.
FEW_TASKS = 16


def _floor(x: Inputs, q: int, kv: int) -> tuple[int, int]:
    """Fewer, larger chunks while there are more than FEW_TASKS tasks of under MIN_TASK_SCORES
    scores each: q_chunks=64, kv_chunks=64 on a (2, 64, 8) input made 4,096 tasks of two
    scores, which took 25 s through a scheduler instead of a millisecond."""
    lead = math.prod(x.table_lead())
    while q * kv > FEW_TASKS and lead * _largest(x.n, q) * _largest(x.m, kv) < MIN_TASK_SCORES:
        if q >= kv:
            q = -(-q // 2)
        else:
            kv = -(-kv // 2)
    return q, kv


def _largest(total: int, count: int) -> int:
    return -(-total // count)


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"
