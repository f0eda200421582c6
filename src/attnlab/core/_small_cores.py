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


def on_cores(fn, x, g, *args) -> list | None:
    """[fn(piece, g's piece, *args) for each piece of the batch], or None if any piece is None.

    ``x`` is ``_small._prepare``'s tuple (q, k, v, scale, lead, table lead, blocked, biases,
    sure, peaks); ``g`` dO (..., N, d_v), a tuple of such per-row arrays (dO and the saved
    lse (..., N, 1)), or None. The batch is cut only when q, k, v (and g) carry the whole
    leading shape; a broadcast input keeps the call in one piece."""
    q, k, v, _, lead = x[:5]
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
        pieces = _cut(x, g, min(CORES, count))
        with pool_map(len(pieces), len(pieces)) as each:  # OpenBLAS pinned while it runs
            out = each(lambda piece: fn(*piece, *args), pieces)
    elif n * m * max(d_k, d_v) > BLAS_THREADED:
        with one_blas_thread():
            out = [fn(x, g, *args)]
    else:
        out = [fn(x, g, *args)]
    return None if any(o is None for o in out) else out


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
