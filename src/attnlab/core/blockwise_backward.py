"""The blockwise backward pass: exact gradients by tiles, memory O(N) (FlashAttention-2's).

Shape legend (the chapter's letters):
    ...  leading batch axes (for example (B, h)), broadcast between q, k and v
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width
    Bq   query rows per tile   Bk   keys per tile
    dO   the upstream gradient (..., N, d_v);  lse each row's log Σ exp(scaled score + mask)

The N x M tables of the dense backward (``core/dense_backward.py``: P, dP, dS) are never
stored. The forward pass runs again by tiles (``blockwise.run``) and keeps, beside the output
O, one number per row: its logsumexp. From it any tile of the weights is recomputed exactly,
P = exp(S − lse), with no running maximum and no rescaling. Then, per tile (rows i, keys j):

    1. dV_j += P_ijᵀ dO_i                    (Bk, d_v)
    2. dP_ij = dO_i V_jᵀ                     (Bq, Bk)
    3. D_i   = rowsum(dO_i ∘ O_i), once per row before any tile (dense_backward, step 3)
    4. dS_ij = P_ij ∘ (dP_ij − D_i)          (Bq, Bk): 0 at blocked pairs, where P = 0
    5. dQ_i += dS_ij K_j · scale             (Bq, d_k)
    6. dK_j += dS_ijᵀ Q_i · scale            (Bk, d_k)

The scale is applied once, to dQ and dK at the end. As in the forward kernel, exponentials are
base 2 with scale · log2(e) folded into q once, tiles a mask blocks are skipped (the same
``_tiles.plan``), tiles it allows whole need no mask arithmetic, and the weights of a partial
tile are clipped to [2^floor, 1] before exp2 and multiplied by 0 where blocked (never exp2 of
-inf, numpy's slow path; never inf · 0).

Parallel work: each work item is one key block for a group of lead elements, so dK_j and dV_j
are summed privately in the item and written once. dQ_i gathers from every key block: each
tile's dS K_j is computed into the thread's own buffer and added to dQ under one lock, held only
for that (Bq, d_k) add. Measured here (2 shared cores, float32, h = 8, N = 2048, d = 64, 512 x
512 tiles): threads waited for the lock 14 ms in a 2.8 s call without a mask (0.26% of the two
threads' time, 128 adds) and 4.5 ms in 1.8 s causal (0.13%). The alternatives cost more: a
second pass over query blocks for dQ recomputes S, P and dP (7 matmuls and 2 exp2 per tile
instead of 5 and 1), and a private dQ per thread costs threads x (..., N, d_k) more memory and
a reduction, to save at most that 0.26%.

Where the time goes (same machine, CPU time per 512 x 512 tile, float32): a matmul of width 64
~1.1 ms, numpy's exp2 ~1.0 ms (this AVX2 CPU has no SIMD exp2 in numpy; torch's exp is 2.5x
faster), a subtraction or product pass 0.06-0.12 ms. A tile of the backward costs 5 matmuls,
one exp2 and four passes; the forward pass it runs first, 2 matmuls and one exp2.
"""

from __future__ import annotations

import threading

import numpy as np

from attnlab.core import blockwise
from attnlab.core._grad import sum_to
from attnlab.core._threads import pool_map
from attnlab.core._tiles import LOG2E, TileMask, plan
from attnlab.core._validate import Inputs
from attnlab.core.masks import tile_at

__all__ = ["run"]

# At least this many work items per thread, so uneven key blocks (causal: early keys are seen
# by more queries) even out between threads.
_ITEMS_PER_THREAD = 4


def run(
    x: Inputs, grad_output: np.ndarray, bq: int, bk: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of attention on validated inputs, each of its input's shape.

    >>> from attnlab.core._validate import validate
    >>> from attnlab.core.masks import Causal
    >>> x = validate([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], Causal())
    >>> dq, dk, dv = run(x, np.ones((2, 2)), 1, 1)
    >>> dv.round(3)   # dV = Pᵀ dO: column sums of the weights [[1, 0], [0.196, 0.804]]
    array([[1.196, 1.196],
           [0.804, 0.804]])
    """
    q, k, v, n, m, lead = x.q, x.k, x.v, x.n, x.m, x.lead
    dtype = q.dtype
    g = grad_output  # (..., N, d_v)
    # 0) the forward pass again, by tiles, keeping each row's logsumexp; it also raises for
    #    a fully masked row and for scores that overflow, exactly as attention does
    lse = np.empty(lead + (n,), dtype)  # (..., N)
    out = blockwise.run(x, bq, bk, threads, lse=lse)  # (..., N, d_v)
    # 3) D = rowsum(dO ∘ O), once per row
    d_row = np.einsum("...nd,...nd->...n", g, out)  # (..., N)
    del out
    lse *= dtype.type(LOG2E)  # (..., N), in log2 units, like the scores below
    c = dtype.type(x.scale * LOG2E)
    qs = q * c  # (..., N, d_k): scale · log2 e, folded into q once
    floor = dtype.type(np.finfo(dtype).minexp + 6)  # see blockwise.run: exp2's fast path

    dq = np.zeros(lead + (n, q.shape[-1]), dtype)  # (..., N, d_k), summed over key blocks
    dk = np.empty(lead + (m, k.shape[-1]), dtype)  # (..., M, d_k)
    dv = np.empty(lead + (m, v.shape[-1]), dtype)  # (..., M, d_v)

    # The plan of the forward pass, by query block, regrouped by key block.
    by_keys: dict[int, list] = {}
    for r0 in range(0, n, bq):
        for a, b, (c0, c1), masked in plan(x.mask, (r0, min(n, r0 + bq)), n, m, bk, len(lead)):
            by_keys.setdefault(c0 // bk, []).append((r0 + a, r0 + b, c0, c1, masked))
    for j in range(-(-m // bk)):
        by_keys.setdefault(j, [])  # keys no query sees: zero gradient

    lead_idx = list(np.ndindex(lead)) if lead else [()]
    per_item = max(
        1, min(len(lead_idx), len(by_keys) * len(lead_idx) // (_ITEMS_PER_THREAD * threads))
    )
    items = [
        (j, lead_idx[i : i + per_item]) for j in by_keys for i in range(0, len(lead_idx), per_item)
    ]
    cost = {j: sum((r1 - r0) * (c1 - c0) for r0, r1, c0, c1, _ in s) for j, s in by_keys.items()}
    items.sort(key=lambda it: -cost[it[0]] * len(it[1]))  # longest first: better balance
    lock = threading.Lock()
    scale = dtype.type(x.scale)

    def work(item) -> None:
        j, group = item
        k0, k1 = j * bk, min(m, (j + 1) * bk)
        steps = by_keys[j]
        masks = {
            s[:4]: TileMask(x.mask, s[:2], s[2:4], n, m, len(lead), dtype) for s in steps if s[4]
        }
        bufs = _buffers(dtype)
        for idx in group:
            k_j = tile_at(k, idx)[k0:k1]  # (Bk, d_k)
            v_j = tile_at(v, idx)[k0:k1]  # (Bk, d_v)
            q_i, qs_i, g_i = tile_at(q, idx), tile_at(qs, idx), g[idx]  # (N, d_k), (N, d_v)
            lse_i, d_i, dq_i = lse[idx], d_row[idx], dq[idx]  # (N,), (N,), (N, d_k)
            dk_j = dk[idx][k0:k1]  # (Bk, d_k), summed in place
            dv_j = dv[idx][k0:k1]  # (Bk, d_v)
            dk_j[...] = 0.0
            dv_j[...] = 0.0
            for r0, r1, c0, c1, masked in steps:
                s, ds, tq, tk, tv = bufs(r1 - r0, c1 - c0, q.shape[-1], v.shape[-1])
                cols = slice(c0 - k0, c1 - k0)
                # P = exp2(S − lse), in log2 units: every allowed entry is <= 1
                np.matmul(qs_i[r0:r1], k_j[cols].T, out=s)  # (rows, cols)
                s -= lse_i[r0:r1, None]
                if masked:
                    tm = masks[r0, r1, c0, c1]
                    if tm.bias is not None:
                        s += tile_at(tm.bias, idx)
                    np.clip(s, floor, 0.0, out=s)  # blocked pairs may be huge: no inf · 0
                    np.exp2(s, out=s)
                    s *= tile_at(tm.keep, idx)  # blocked pairs weigh exactly 0
                else:
                    np.exp2(s, out=s)  # (rows, cols) = P
                # 1) dV_j += Pᵀ dO_i
                np.matmul(s.T, g_i[r0:r1], out=tv)  # (cols, d_v)
                dv_j[cols] += tv
                # 2) dP = dO_i V_jᵀ;  4) dS = P ∘ (dP − D_i)
                np.matmul(g_i[r0:r1], v_j[cols].T, out=ds)  # (rows, cols)
                ds -= d_i[r0:r1, None]
                ds *= s
                # 6) dK_j += dSᵀ Q_i (scaled at the end)
                np.matmul(ds.T, q_i[r0:r1], out=tk)  # (cols, d_k)
                dk_j[cols] += tk
                # 5) dQ_i += dS K_j (scaled at the end): rows shared with other key blocks
                np.matmul(ds, k_j[cols], out=tq)  # (rows, d_k)
                with lock:
                    dq_i[r0:r1] += tq
            dk_j *= scale

    with pool_map(threads, len(items)) as each:
        each(work, items)
    dq *= scale
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


_local = threading.local()


def _buffers(dtype):
    """This thread's tile buffers, kept between items and calls (a fresh 1 MiB array faults
    its pages in on first touch: see _tiles.buffers)."""
    cache = getattr(_local, "cache", None)
    if cache is None or cache[0] != dtype:
        cache = _local.cache = (dtype, {})
    table = cache[1]

    def get(rows: int, cols: int, dk: int, dv: int):
        key = (rows, cols, dk, dv)
        if key not in table:
            if len(table) >= 16:  # ragged edges of many different calls: start afresh
                table.clear()
            table[key] = (
                np.empty((rows, cols), dtype),  # P
                np.empty((rows, cols), dtype),  # dP, then dS
                np.empty((rows, dk), dtype),  # dS K_j
                np.empty((cols, dk), dtype),  # dSᵀ Q_i
                np.empty((cols, dv), dtype),  # Pᵀ dO_i
            )
        return table[key]

    return get
