"""The small-problem fast path on every core: its batch cut into pieces, one per core.

Shape legend (the chapter's letters):
    ...  leading batch axes (for example (B, h)); P their product
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

numpy's matmul over a batch of small matrices calls OpenBLAS once per matrix, and OpenBLAS
threads any product past about 2^18 multiply-adds: at (B, h, N, d) = (8, 8, 128, 64) it woke
its threads 64 times a matmul. On the shared two-core machine (load average ~13) the batched
q kᵀ took 187 ms so, and 14 ms with OpenBLAS on one thread. So the fast path
(``core/_small.py``) runs its matmuls with OpenBLAS pinned to one thread, and when the batch is
large enough to pay for the pool, on every core, each thread taking a share of the batch:
what torch does for attention on the CPU. A piece runs the same operations on fewer matrices,
so the numbers are those of the whole batch at once (tests/test_small.py checks it bitwise).
"""

from __future__ import annotations

import itertools
import math
import os
import threading

import numpy as np

from attnlab.core._small_exp import KEEP_FROM
from attnlab.core._threads import one_blas_thread, pool_map

__all__ = ["join", "on_cores"]

#: Multiply-adds, P·N·M·(d_k + d_v), from which the batch is shared out over the cores: about
#: 0.1 ms of arithmetic on one core, several times the pool's hand-over.
SPLIT_WORK = 2**20
#: OpenBLAS threads a product of more multiply-adds than this (its GEMM_MULTITHREAD_THRESHOLD
#: 4 times 65536): below it there is nothing to pin.
BLAS_THREADED = 2**18
CORES = os.cpu_count() or 1
POOL_PREFIX = "attnlab_"  # the names of the shared pool's threads (``_threads._shared_pool``)


def on_cores(fn, x, g, *args, shapes=None, joined: bool = False) -> list | None:
    """[fn(piece, g's piece, *args) for each piece of the batch], or None if any piece is None.

    ``x`` is ``_small_plan.prepare``'s tuple (q, k, v, scale, lead, table lead, blocked, biases,
    sure, peaks); ``g`` dO (..., N, d_v), a tuple of such per-row arrays (dO and the saved
    lse (..., N, 1)), or None. The batch is cut only when q, k, v (and g) carry the whole
    leading shape; a broadcast input keeps the call in one piece.

    ``shapes``: the (rows, cols) of each array ``fn`` returns. Given them, and q, k, v with the
    whole leading shape, the results are allocated here (``_outputs``) and ``fn`` gets them,
    or its piece's share, as ``out=`` to write into; the list then holds one tuple, the whole
    results (..., rows, cols), and nothing is joined afterwards. ``joined``: the results share
    one block of memory (see ``_outputs``), for results that live and die together."""
    q, k, v, _, lead = x[:5]
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    count = math.prod(lead)
    whole = q.shape[:-2] == k.shape[:-2] == v.shape[:-2] == lead
    outs = None if shapes is None or not whole else _outputs(shapes, count, q.dtype, joined)
    if (
        CORES > 1
        and count > 1
        and whole
        and count * n * m * (d_k + d_v) >= SPLIT_WORK
        # Never from one of the shared pool's own workers: its pieces could wait forever
        # behind the very items that wait for them.
        and not threading.current_thread().name.startswith(POOL_PREFIX)
    ):
        pieces = _cut(x, g, min(CORES, count))
        with pool_map(len(pieces), len(pieces)) as each:  # OpenBLAS pinned while it runs
            if outs is None:
                out = each(lambda piece: fn(*piece, *args), pieces)
            else:
                out = each(
                    lambda i: _into(fn, *pieces[i], args, outs, i, pieces), range(len(pieces))
                )
    elif n * m * max(d_k, d_v) > BLAS_THREADED:
        with one_blas_thread():
            out = [_into(fn, x, g, args, outs)]
    else:
        out = [_into(fn, x, g, args, outs)]
    if any(o is None for o in out):
        return None
    return out if outs is None else [tuple(a.reshape(lead + a.shape[1:]) for a in outs)]


def _outputs(shapes, count: int, dtype, joined: bool) -> tuple[np.ndarray, ...] | None:
    """Uninitialised (P, rows, cols) arrays for results of ``shapes`` (``joined``: views into
    one block), or None below ``KEEP_FROM`` bytes (a call of microseconds keeps numpy's own
    results).

    One block, not one array each, for the backward's gradients: glibc hands a freed block back to the system once more than
    twice its largest recent one lies free at the heap's top, and three freed 0.5 MiB
    gradients (1.5 MiB against a 1 MiB threshold) were handed back after every call, so the
    next call paid a page fault per 4 KiB to get them again. At (64, 4, 32, 16), one thread:
    three held products took 2.0 ms against 0.34 for one (measured on the 2-core AMD EPYC)."""
    sizes = [count * r * c for r, c in shapes]
    if sum(sizes) * np.dtype(dtype).itemsize < KEEP_FROM:
        return None
    if not joined:
        return tuple(np.empty((count, r, c), dtype) for r, c in shapes)
    block = np.empty(sum(sizes), dtype)
    starts = itertools.accumulate(sizes, initial=0)
    return tuple(
        block[a : a + size].reshape(count, r, c)
        for a, size, (r, c) in zip(starts, sizes, shapes, strict=False)
    )


def _into(fn, x, g, args: tuple, outs, i: int = 0, pieces=None):
    """fn(x, g, *args), with ``out=`` the results' arrays (piece ``i``'s share of ``outs``
    when the batch is cut into ``pieces``) where ``outs`` is given; a result ``fn`` made
    itself is copied in. None where ``fn`` gives None."""
    if outs is None:
        return fn(x, g, *args)
    if pieces is None:
        lead = x[4]
        share = tuple(a.reshape(lead + a.shape[1:]) for a in outs)
    else:
        first = sum(p[0][4][0] for p in pieces[:i])
        share = tuple(a[first : first + x[4][0]] for a in outs)
    got = fn(x, g, *args, out=share)
    if got is None:
        return None
    for mine, result in zip(share, got, strict=True):
        if result is not mine:
            np.copyto(mine, result)
    return share


def join(pieces: list[np.ndarray], lead: tuple[int, ...]) -> np.ndarray:
    """The pieces' results (P_i, rows, cols) back as one array (..., rows, cols)."""
    if len(pieces) == 1:
        return pieces[0]
    whole = np.concatenate(pieces, axis=0)  # (P, rows, cols)
    return whole.reshape(lead + whole.shape[-2:])  # (..., rows, cols)


def _cut(x, g, count: int) -> list:
    """``count`` pieces (x's tuple, g) along the flattened batch axis P."""
    q, k, v, sc, lead, _, blocked, biases, *rest = x
    total = math.prod(lead)

    def flat(a):  # (..., rows, cols) -> (P, rows, cols)
        return a.reshape((total,) + a.shape[-2:])

    def table(t):  # a mask table: kept whole where it is the same for every batch element
        if t is None or all(s == 1 for s in t.shape[:-2]):
            return None if t is None else t.reshape(t.shape[-2:])  # (rows, cols)
        return flat(np.broadcast_to(t, lead + t.shape[-2:]))  # (P, rows, cols)

    def share(t, a, b):
        return t if t is None or t.ndim < 3 else t[a:b]

    q, k, v = flat(q), flat(k), flat(v)
    g = None if g is None else tuple(map(flat, g)) if type(g) is tuple else flat(g)
    blocked, biases = table(blocked), tuple(table(t) for t in biases)
    bounds = [total * i // count for i in range(count + 1)]
    return [
        (
            (
                q[a:b],
                k[a:b],
                v[a:b],
                sc,
                (b - a,),
                (b - a,),
                share(blocked, a, b),
                tuple(share(t, a, b) for t in biases),
                *rest,
            ),
            None if g is None else tuple(t[a:b] for t in g) if type(g) is tuple else g[a:b],
        )
        for a, b in itertools.pairwise(bounds)
    ]
