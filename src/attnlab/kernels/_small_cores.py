"""The small-problem fast path on every core: its batch cut into pieces, one per core.

Shape legend (the chapter's letters):
    ...  leading batch axes (for example (B, h)); P their product
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

numpy's matmul over a batch of small matrices calls OpenBLAS once per matrix, and OpenBLAS
threads any product past about 2^18 multiply-adds: at (B, h, N, d) = (8, 8, 128, 64) it woke
its threads 64 times a matmul. On the shared two-core machine (load average ~13) the batched
q kᵀ took 187 ms so, and 14 ms with OpenBLAS on one thread. So the fast path
(``kernels/_small.py``) runs its matmuls with OpenBLAS pinned to one thread, and when the batch is
large enough to pay for the pool, on every core, each thread taking a share of the batch:
what torch does for attention on the CPU. A piece runs the same operations on fewer matrices,
so the numbers are those of the whole batch at once (tests/kernels/test_small.py checks it bitwise).
"""

from __future__ import annotations

import itertools
import math
import os
import threading

import numpy as np

from attnlab.kernels._small_exp import KEEP_FROM
from attnlab.kernels._threads import one_blas_thread, pool_map

__all__ = ["on_cores"]

#: Multiply-adds, P·N·M·(d_k + d_v), from which the batch is shared out over the cores: about
#: 0.1 ms of arithmetic on one core, several times the pool's hand-over.
SPLIT_WORK = 2**20
#: OpenBLAS threads a product of more multiply-adds than this (its GEMM_MULTITHREAD_THRESHOLD
#: 4 times 65536): below it there is nothing to pin.
BLAS_THREADED = 2**18
CORES = os.cpu_count() or 1
POOL_PREFIX = "attnlab_"  # the names of the shared pool's threads (``_threads._shared_pool``)


def on_cores(fn, x, g, *args, shapes, joined: bool = False):
    """The results of fn(x, g, *args, out=...): a tuple of arrays (..., rows, cols), one per
    entry of ``shapes`` (their (rows, cols)), or None where fn gave None.

    ``x`` is ``_small_plan.prepare``'s ``Prepared`` (q, k, v, scale, lead, table lead,
    blocked, biases, sure, peaks, ...); ``g`` dO (..., N, d_v), a tuple of such per-row arrays
    (dO and the saved lse (..., N, 1)), or None. A batch with enough work is cut into one piece per
    core when q, k, v (and g) carry the whole leading shape (a broadcast input keeps the call
    in one piece), and each piece runs on the pool. The results are allocated here, whole,
    and fn gets them, or its piece's share, as ``out=`` to write into (a result fn makes
    itself is copied in), so no piece's results are joined afterwards. ``joined``: the
    results share one block of memory (see ``_outputs``), for results that live and die
    together."""
    q, k, v, lead = x.q, x.k, x.v, x.lead
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    count = math.prod(lead)
    whole = q.shape[:-2] == k.shape[:-2] == v.shape[:-2] == lead
    if (
        CORES > 1
        and count > 1
        and whole
        and count * n * m * (d_k + d_v) >= SPLIT_WORK
        # Never from one of the shared pool's own workers: its pieces could wait forever
        # behind the very items that wait for them.
        and not threading.current_thread().name.startswith(POOL_PREFIX)
    ):
        outs = _outputs(shapes, count, q.dtype, joined, 0)  # (P, rows, cols) each
        pieces = _cut(x, g, min(CORES, count))
        with pool_map(len(pieces), len(pieces)) as each:  # OpenBLAS pinned while it runs
            done = each(
                lambda piece: _into(fn, piece[0], piece[1], args, tuple(map(piece[2], outs))),
                pieces,
            )
        if any(d is None for d in done):
            return None
        return tuple(a.reshape(lead + a.shape[1:]) for a in outs)
    outs = _outputs(shapes, count, q.dtype, joined) if whole else None
    share = None if outs is None else tuple(a.reshape(lead + a.shape[1:]) for a in outs)
    if n * m * max(d_k, d_v) > BLAS_THREADED:
        with one_blas_thread():
            return _into(fn, x, g, args, share)
    return _into(fn, x, g, args, share)


def _outputs(shapes, count: int, dtype, joined: bool, floor: int = KEEP_FROM):
    """Uninitialised (P, rows, cols) arrays for results of ``shapes`` (``joined``: views into
    one block), or None below ``floor`` bytes (a call of microseconds keeps numpy's own
    results).

    One block, not one array each, for the backward's gradients: glibc hands a freed block
    back to the system once more than twice its largest recent one lies free at the heap's
    top, and three freed 0.5 MiB gradients (1.5 MiB against a 1 MiB threshold) were handed
    back after every call, so the next call paid a page fault per 4 KiB to get them again. At
    (64, 4, 32, 16), one thread: three held products took 2.0 ms against 0.34 for one
    (measured on the 2-core AMD EPYC)."""
    sizes = [count * r * c for r, c in shapes]
    if sum(sizes) * np.dtype(dtype).itemsize < floor:
        return None
    if not joined:
        return tuple(np.empty((count, r, c), dtype) for r, c in shapes)
    block = np.empty(sum(sizes), dtype)
    starts = itertools.accumulate(sizes, initial=0)
    return tuple(
        block[a : a + size].reshape(count, r, c)
        for a, size, (r, c) in zip(starts, sizes, shapes, strict=False)
    )


def _into(fn, x, g, args: tuple, share):
    """fn(x, g, *args), with ``out=share`` (the results' arrays) where ``share`` is given; a
    result ``fn`` made itself is copied in. None where ``fn`` gives None."""
    if share is None:
        return fn(x, g, *args)
    got = fn(x, g, *args, out=share)
    if got is None:
        return None
    for mine, result in zip(share, got, strict=True):
        if result is not mine:
            np.copyto(mine, result)
    return share


def _cut(x, g, count: int) -> list:
    """``count`` pieces [(the piece's ``Prepared``, g, take)] of the batch, ``take`` giving a
    piece's share of a (P, rows, cols) result. Cut along the first leading axis longer than 1
    where it has ``count`` entries or more and those before it are 1: views, whatever the
    inputs' strides (the tiny transformer's q, k, v, dO are transposed views (B, h, N, e) of
    (B, N, h·e), and flattening them copied each call: 1.3 ms of a 3.3 ms backward at
    (32, 4, 32, 16)).
    Otherwise along the flattened batch axis P."""
    lead = x.lead
    ax = next((i for i, size in enumerate(lead) if size > 1), 0)
    if lead[ax] >= count and all(size == 1 for size in lead[:ax]):
        return _cut_axis(x, g, count, ax)
    return _cut_flat(x, g, count)


def _cut_axis(x, g, count: int, ax: int) -> list:
    """``_cut`` along leading axis ``ax``: every array sliced there, a view."""
    q, k, v, lead = x.q, x.k, x.v, x.lead
    size = lead[ax]

    def table(t, at):  # a mask table: whole where it is the same for every batch element
        if t is None or all(s == 1 for s in t.shape[:-2]):
            return t
        return np.broadcast_to(t, lead + t.shape[-2:])[at]

    pieces = []
    for a, b in itertools.pairwise([size * i // count for i in range(count + 1)]):
        at = (slice(None),) * ax + (slice(a, b),)  # into (..., rows, cols)
        part = lead[:ax] + (b - a,) + lead[ax + 1 :]
        mine = x._replace(
            q=q[at],
            k=k[at],
            v=v[at],
            lead=part,
            table_lead=part,
            blocked=table(x.blocked, at),
            biases=tuple(table(t, at) for t in x.biases),
        )
        gs = None if g is None else tuple(t[at] for t in g) if type(g) is tuple else g[at]
        pieces.append((mine, gs, _taker(lead, at)))
    return pieces


def _taker(lead: tuple[int, ...], at: tuple):
    """A piece's share of a (P, rows, cols) result: its (..., rows, cols) view at ``at``."""
    return lambda a: a.reshape(lead + a.shape[1:])[at]


def _cut_flat(x, g, count: int) -> list:
    """``_cut`` along the flattened batch axis P (a copy of each input that cannot be viewed
    so)."""
    lead = x.lead
    total = math.prod(lead)

    def flat(a):  # (..., rows, cols) -> (P, rows, cols)
        return a.reshape((total,) + a.shape[-2:])

    def table(t):  # a mask table: kept whole where it is the same for every batch element
        if t is None or all(s == 1 for s in t.shape[:-2]):
            return None if t is None else t.reshape(t.shape[-2:])  # (rows, cols)
        return flat(np.broadcast_to(t, lead + t.shape[-2:]))  # (P, rows, cols)

    def share(t, a, b):
        return t if t is None or t.ndim < 3 else t[a:b]

    q, k, v = flat(x.q), flat(x.k), flat(x.v)
    g = None if g is None else tuple(map(flat, g)) if type(g) is tuple else flat(g)
    blocked, biases = table(x.blocked), tuple(table(t) for t in x.biases)
    pieces = []
    for a, b in itertools.pairwise([total * i // count for i in range(count + 1)]):
        mine = x._replace(
            q=q[a:b],
            k=k[a:b],
            v=v[a:b],
            lead=(b - a,),
            table_lead=(b - a,),
            blocked=share(blocked, a, b),
            biases=tuple(share(t, a, b) for t in biases),
        )
        gs = None if g is None else tuple(t[a:b] for t in g) if type(g) is tuple else g[a:b]
        pieces.append((mine, gs, lambda arr, a=a, b=b: arr[a:b]))
    return pieces
