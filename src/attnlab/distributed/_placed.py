"""The direct road for numpy inputs on a cluster: each chunk sent once, straight to the worker
whose tasks read it, and each chunk pair placed on a worker before anything runs.

Shape legend: ... leading batch axes, n query rows and m keys of a chunk, d_k and d_v widths.

The graph of ``_graph.build`` carries q, k and v inside it: the client sends every chunk to the
scheduler, the scheduler to the worker that holds it, and that worker to each other worker
whose tasks read it. Timed without any arithmetic (tasks that only touch their chunks, two
worker processes, h = 8, d = 64, float32, on the shared two-core machine; docs/bench.md), that
road took 8.6 s at N = 16,384 and this one 2.8 s, the arithmetic itself being about 10 s of
one core's time there. Here the client scatters each chunk directly to the workers that need
it (``direct=True``: no hop through the scheduler), and every partial runs where its chunks
already are:

- the chunk pairs are dealt out longest first to the least loaded worker (a pair the mask
  blocks in part counts half: ``_cost``), so a causal mask's uneven pairs even out;
- each worker receives the query and key chunks of its own pairs, once each;
- partials merge in the same balanced tree as ``_graph``'s, wherever the scheduler puts them.

Scattered chunks live only on their workers: if one dies, ``run`` returns None and the caller
computes on the graph of ``_graph.build`` instead, which the scheduler can always send again.
"""

from __future__ import annotations

import uuid
from concurrent.futures import CancelledError

from attnlab.core._validate import Inputs
from attnlab.core.masks import TileState
from attnlab.distributed import _partial
from attnlab.distributed._graph import wait_for_workers
from attnlab.distributed._plan import Plan

__all__ = ["run"]


def run(x: Inputs, plan: Plan, sources, client) -> list | None:
    """The root partial (lse, o) of each query chunk, computed on ``client`` from chunks
    scattered to the workers that read them; None when there is no worker to scatter to, or
    one holding chunks died (the caller then runs the embedded graph)."""
    from distributed import KilledWorker

    workers = sorted(client.scheduler_info(n_workers=-1).get("workers", {}))
    if not workers:
        return None  # the embedded graph waits for workers, and gives up after WORKERLESS_S
    where = deal(x, plan, workers)  # {(i, j): worker}
    token = uuid.uuid4().hex[:12]  # task names as _graph's, so a run can be read and counted
    futures = []
    try:
        chunks = _scatter(client, plan, sources, where)
        for i, rows in enumerate(plan.q_spans):
            level = [
                client.submit(
                    _partial.partial, chunks["q", i], chunks["k", j], chunks["v", j],
                    _partial.chunk_mask(x.mask, rows, plan.kv_spans[j], x.n, x.m), x.scale,
                    key=f"attnlab-partial-{token}-{i}-{j}", workers=[where[i, j]],
                    allow_other_workers=True,
                )
                for j in plan.pairs[i]
            ]  # fmt: skip
            depth = 0
            while len(level) > 1:  # a balanced tree, as _graph.build's
                merged = [
                    client.submit(
                        _partial.merge, level[a], level[a + 1],
                        key=f"attnlab-merge-{token}-{i}-{depth}-{a}",
                    )
                    for a in range(0, len(level) - 1, 2)
                ]  # fmt: skip
                level = merged + level[len(merged) * 2 :]
                depth += 1
            futures.append(level[0])
        wait_for_workers(client, futures)
        return client.gather(futures)
    except (CancelledError, KilledWorker, OSError):
        # A worker died holding chunks, or left before its chunks reached it (a closed
        # connection is an OSError): the graph that carries the chunks can always be resent.
        return None
    finally:
        client.cancel(futures)  # gathered, or lost: nothing is left held on the workers


def _cost(x: Inputs, rows, cols) -> float:
    """A pair's share of work: 1, or 1/2 where the mask blocks part of it (its tiles past the
    mask's edge are skipped, about half of a diagonal chunk's)."""
    if x.mask is None:
        return 1.0
    state = x.mask.tile_state(rows, cols, x.n, x.m, len(x.lead))
    return 0.5 if state is TileState.PARTIAL else 1.0


def deal(x: Inputs, plan: Plan, workers: list[str]) -> dict[tuple[int, int], str]:
    """{(query chunk, key chunk): worker}: pairs longest first, each to the least loaded worker
    (ties: the one that already holds the pair's key chunk, then the first)."""
    pairs = [
        (_cost(x, plan.q_spans[i], plan.kv_spans[j]), i, j)
        for i, row in enumerate(plan.pairs)
        for j in row
    ]
    pairs.sort(key=lambda p: (-p[0], p[2], p[1]))
    load = [0.0] * len(workers)
    holds: dict[int, int] = {}  # key chunk -> the worker that got it first
    where = {}
    for cost, i, j in pairs:
        w = holds.get(j)
        if w is None or load[w] != min(load):
            w = load.index(min(load))
        load[w] += cost
        holds.setdefault(j, w)
        where[i, j] = workers[w]
    return where


def _scatter(client, plan: Plan, sources, where) -> dict:
    """{("q", i) | ("k", j) | ("v", j): future}: each chunk sent once, straight to the workers
    of the pairs that read it, one scatter per set of workers (each call a round trip)."""
    q, k, v = sources
    readers: dict[tuple[str, int], set[str]] = {}
    for (i, j), w in where.items():
        for key in (("q", i), ("k", j), ("v", j)):
            readers.setdefault(key, set()).add(w)
    groups: dict[tuple[str, ...], list] = {}
    for key, ws in sorted(readers.items()):
        groups.setdefault(tuple(sorted(ws)), []).append(key)
    out = {}
    for ws, keys in groups.items():
        arrays = []
        for name, idx in keys:
            a, b = (plan.q_spans if name == "q" else plan.kv_spans)[idx]
            arrays.append({"q": q, "k": k, "v": v}[name][..., a:b, :])  # (..., rows, width)
        futures = client.scatter(
            arrays, workers=list(ws), broadcast=len(ws) > 1, direct=True, hash=False
        )
        out.update(zip(keys, futures, strict=True))
    return out
