"""The blockwise backward pass: exact gradients by tiles, memory O(N) (FlashAttention-2's).

Shape legend (the chapter's letters):
    ...  leading batch axes (for example (B, h)), broadcast between q, k and v
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width
    Bq   query rows per tile   Bk   keys per tile
    dO   the upstream gradient (..., N, d_v);  l each row's Σ exp2(score), its softmax divisor

The N x M tables of the dense backward (``kernels/dense_backward.py``: P, dP, dS) are never
stored whole. Work goes by query block (Bq rows, one lead element at a time), in three sweeps
over the block's tiles (rows i, keys j):

    A. p_ij = exp2(S_ij),  l_i += rowsum(p_ij)             the softmax again, without P·V
    B1. P_ij = p_ij / l_i,  dP_ij = dO_i V_jᵀ,  dV_j += P_ijᵀ dO_i
        D_i += rowsum(P_ij ∘ dP_ij)                        (dense, step 3)
    B2. dS_ij = P_ij ∘ (dP_ij − D_i)
        dQ_i += dS_ij K_j,  dK_j += dS_ijᵀ Q_i             (scaled once, at the end)

Blocks where a row may allow one key divide their tiles by l (why: ``_backward_tiles.
may_have_one_key``); others carry 1/l on dO and D. Kept between sweeps, a tile costs 5 matmuls
and one exp2 (a FlashAttention-2 backward behind a forward pass: 7 and two); kept tiles take at
most the bytes of q, k, v and dO together and 32 MiB (_KEEP_BYTES), shared between threads.
Query blocks are halved (down to 128 rows) until one block's tiles fit; tiles beyond are
recomputed in sweep B2 (their P·V enters D as rowsum(dO ∘ Σ P V)), at 7 matmuls.

As in the forward kernel (``blockwise.py``), exponentials are base 2 with scale · log2(e)
folded into q, tiles a mask blocks are skipped (the same ``_tiles.plan``), tiles it allows
whole need no mask arithmetic, and a blocked pair's weight is multiplied by 0. Sweep A first
runs against a base of 0; if a row sum leaves [2^-16, 2^64] (float32; float64 [2^-128, 2^512]),
where 1/l is safe, or is NaN (inf · 0 at a blocked pair), or a nonzero dO / l would not be a
normal number with room to spare (a tiny dO over a large l, a huge one over a small l), the
block runs again against each row's maximum rounded up to an integer (one more sweep, for the
maxima), its weights clipped to [2^floor, 1] before exp2, so that every row sum is in [1/2, M].

Parallel work: each work item is one query block for a group of lead elements, so dQ_i is
summed privately; dK_j and dV_j gather from every query block, each tile's product added in
block order (``_ordered.Turns``), so no bit depends on the threads' timing. Time per tile and
per call: docs/fast-kernels.md.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.core._validate import Inputs, check_scores_in_bands, may_overflow
from attnlab.core._variants import float_bias
from attnlab.core.masks import tile_at
from attnlab.kernels import blockwise
from attnlab.kernels._backward_tiles import keep_tiles as _keep
from attnlab.kernels._backward_tiles import may_have_one_key, tile_steps
from attnlab.kernels._backward_tiles import scratch as _buffers
from attnlab.kernels._fused import tile_kernels
from attnlab.kernels._ordered import Turns, in_block_order
from attnlab.kernels._precision import matmul, narrow, too_wide, widen
from attnlab.kernels._threads import pool_map
from attnlab.kernels._tiles import (
    LN2,
    LOG2E,
    exp2_floor,
    lead_at,
    natural_exp,
    plan,
    work_items,
)

__all__ = ["run"]

# A query block is halved while its kept tiles overflow the budget, down to this many rows.
_MIN_ROWS = 128
# The kept tiles of all threads: the L3 cache of the machine measured (2-core AMD EPYC, 32 MiB).
# At N = 8192, h = 8, float32, 512-row blocks kept 32 MiB a thread and ran at 81 GFLOP/s,
# 256-row blocks kept 16 MiB at 186 (at N = 4096, 512 rows and 16 MiB: 204).
_KEEP_BYTES = 32 * 2**20


def run(
    x: Inputs, grad_output: np.ndarray, bq: int, bk: int, threads: int = 1, *, lse=None,
    empty_rows: str = "raise", wrt: tuple[str, ...] = ("q", "k", "v"), anchored: bool = False,
) -> tuple[np.ndarray, ...]:  # fmt: skip
    """The gradients named by ``wrt`` (of "q", "k", "v", "bias", "sinks") of attention on
    validated inputs, each of its input's shape. ``lse`` (..., N): the forward pass's saved
    log-sum-exp, so the row sums are not summed again; ``empty_rows="zero"``: a row that
    allows no key gets gradient 0 instead of FullyMaskedRowError.

    >>> from attnlab.core._validate import validate
    >>> from attnlab.core.masks import Causal
    >>> x = validate([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], Causal())
    >>> dq, dk, dv = run(x, np.ones((2, 2)), 1, 1)
    >>> dv.round(3)   # dV = Pᵀ dO: column sums of the weights [[1, 0], [0.196, 0.804]]
    array([[1.196, 1.196],
           [0.804, 0.804]])
    """
    if may_overflow(x):  # rare: huge q or k. Refused as the forward pass refuses them.
        check_scores_in_bands(x)
    q, k, v, n, m, lead = x.q, x.k, x.v, x.n, x.m, x.lead
    dtype = q.dtype
    g = grad_output  # (..., N, d_v)
    kernel = _Kernel(x, g, lse, empty_rows, wrt, anchored)
    # Kept tiles (p and dP', two per tile), per thread: at most the elements of q, k, v and
    # dO together, and no more than the cache holds.
    budget = min(sum(a.size for a in (q, k, v, g)), _KEEP_BYTES // dtype.itemsize) // threads
    while bq > _MIN_ROWS and 2 * bq * m > budget:
        bq //= 2  # shorter blocks keep all their tiles; shorter still, matmuls slow down
    blocks = [(r0, min(n, r0 + bq)) for r0 in range(0, n, bq)]
    plans = {rows: plan(x.mask, rows, n, m, bk, len(lead)) for rows in blocks}
    kernel.turns = Turns(plans, bk, ("v", "k") + (("sink",) if kernel.dsinks is not None else ()))

    def work(item) -> None:
        (r0, r1), group = item
        steps = tile_steps(x, (r0, r1), plans[r0, r1])
        kept = _keep(steps, budget, dtype)
        lone = may_have_one_key(steps, r1 - r0)
        with np.errstate(all="ignore"):  # overflow is detected and redone; per thread
            for idx in group:
                try:
                    kernel.block(idx, r0, r1, steps, kept, lone)
                finally:
                    kernel.turns.finish(idx, (r0, r1))

    items = in_block_order(work_items(blocks, plans, lead, threads))
    with pool_map(threads, len(items)) as each:
        each(work, items)
    if kernel.empty:  # a row that allows no key: the forward pass raises its error, naming it
        blockwise.run(x, bq, bk, threads)
    if kernel.wide:  # float32 scores far from 0: see kernels/_precision.py
        saved = None if lse is None else lse.astype(np.float64)
        g64 = g.astype(np.float64)
        options = {"lse": saved, "empty_rows": empty_rows, "wrt": wrt, "anchored": True}
        return narrow(run(widen(x), g64, bq, bk, threads, **options))
    return kernel.gradients(wrt)


class _Kernel:
    """One call's inputs and gradients, and the sweeps of one query block (``block``)."""

    def __init__(self, x: Inputs, g: np.ndarray, lse, empty_rows: str, wrt, anchored=False):
        self.x, self.g, self.empty_rows = x, g, empty_rows
        q, k, v, dtype = x.q, x.k, x.v, x.q.dtype
        self.dq = np.zeros(x.lead + (x.n, q.shape[-1]), dtype)  # (..., N, d_k)
        self.dk = np.zeros(x.lead + (x.m, k.shape[-1]), dtype)  # (..., M, d_k), all blocks
        self.dv = np.zeros(x.lead + (x.m, v.shape[-1]), dtype)  # (..., M, d_v), all blocks
        if x.softcap is None:
            self.c, self.cap = dtype.type(x.scale * LOG2E), None  # scale · log2 e, in q
        else:  # q · scale / softcap, tanh, then · softcap · log2 e (as blockwise._fast)
            self.c, self.cap = dtype.type(x.scale / x.softcap), dtype.type(x.softcap * LOG2E)
        self.sinks = None if x.sinks is None else x.sinks * dtype.type(LOG2E)  # log2 units
        self.dsinks = np.zeros(x.lead, dtype) if "sinks" in wrt else None  # (...)
        shape = float_bias(x) if "bias" in wrt else None
        self.dbias = None if shape is None else np.zeros(shape, dtype)  # the mask's shape
        # (..., N) in log2 units, in float64: a float32 product would round the saved lse again
        self.lse2 = None if lse is None else lse.astype(np.float64) * LOG2E
        finfo = np.finfo(dtype)
        # Row sums the base of 0 may leave (f32: [2^-16, 2^64]): 1 / l stays a normal number.
        # Outside, the exact sweep.
        self.safe = (
            dtype.type(2.0 ** -(finfo.maxexp // 8)),
            dtype.type(2.0 ** (finfo.maxexp // 2)),
        )
        # ... and dO / l itself must stay a finite, full-precision number: a tiny dO over a
        # large l would go subnormal (f32: |dO| 1e-32, l 2^43 lost half its value), a huge one
        # over a small l overflow. Such a row takes the exact sweep too (there l is in [1/2, M]).
        self.g_range = (finfo.tiny * 2.0 ** (finfo.nmant + 1), finfo.max / 2.0**8)
        self.floor = exp2_floor(dtype)  # exp2's fast path
        # Where numpy vectorises exp and not exp2 (``_tiles.natural_exp``), or the compiled exp
        # runs (kernels/_fused.py), a tile's weights are exp(s · ln 2): half a scalar exp2's time.
        self.fused = tile_kernels(dtype, math.prod(x.lead) * x.n * x.m)
        self.ln2 = dtype.type(LN2) if natural_exp(dtype) or self.fused is not None else None
        self.lock = threading.Lock()
        self.empty = self.wide = False
        self.watch = dtype == np.float32 and x.check_finite  # for scores far from 0
        # Every row against its maximum (the exact sweep) from the start: the float64 redo of a
        # float32 call does this, so a row's top weight is exactly 1 and dP − δ cancels exactly
        # there; a weight of 1 − 2⁻⁵³ leaves |dO||V|·2⁻⁵³, which rounds to inf in float32 when
        # dO and V are huge (1e26 · 1e27). Weights below 2^floor are then exactly 0, not 2^floor:
        # the gradients of a rescaled dO (api/_overflow.py) multiply them by a huge dP and k.
        self.anchored = anchored

    def gradients(self, wrt) -> tuple[np.ndarray, ...]:
        x, scale = self.x, self.x.q.dtype.type(self.x.scale)
        self.dq *= scale
        self.dk *= scale
        out = {"q": (self.dq, x.q.shape), "k": (self.dk, x.k.shape), "v": (self.dv, x.v.shape)}
        if self.dsinks is not None:
            out["sinks"] = (self.dsinks, x.sinks.shape)
        if self.dbias is not None:
            out["bias"] = (self.dbias, self.dbias.shape)
        return tuple(sum_to(*out[w]) for w in wrt)

    def _sink(self, idx, base):
        """exp2(sink - base) of this lead element's sink, (Bq,), or None without sinks."""
        if self.sinks is None:
            return None
        return np.exp2(lead_at(self.sinks, idx) - (0.0 if base is None else base))

    def _divisors(self, idx, r0, r1, qs, k_i, v_i, steps, kept, bufs):
        """Sweep A: (base, l, Σ p V of the tiles not kept, rows with no key), filling the kept
        tiles' p; l includes the sink. From a saved lse, the base and l come from it."""
        if self.lse2 is not None and not self.anchored:
            lse2 = self.lse2[idx][r0:r1]  # (Bq,)
            hollow = np.isneginf(lse2)
            base = np.where(hollow, 0.0, np.ceil(lse2)).astype(qs.dtype)  # (Bq,) integers
            _, acc = self._sweep_a(qs, k_i, v_i, steps, kept, idx, base, bufs)
            return base, np.exp2(lse2 - base).astype(qs.dtype), acc, hollow
        base = None
        l = acc = None  # anchored: straight to the sweep against the row maxima
        if not self.anchored:
            l, acc = self._sweep_a(qs, k_i, v_i, steps, kept, idx, base, bufs)
        sink = None if l is None else self._sink(idx, base)
        total = l if sink is None else l + sink
        lo, hi = self.safe  # a NaN (inf · 0 at a blocked pair) fails both comparisons
        g_i = self.g[idx][r0:r1]  # (Bq, d_v)
        if l is None or not (
            l.min() >= lo
            and total.max() <= hi
            and np.isfinite(acc).all()
            and self._g_fits(g_i, total)
        ):
            base = self._row_max(qs, k_i, steps, idx, bufs)  # (Bq,)
            if self.sinks is not None:  # the sink is one more score of the row
                base = np.maximum(base, np.ceil(lead_at(self.sinks, idx)))
            l, acc = self._sweep_a(qs, k_i, v_i, steps, kept, idx, base, bufs)
            sink = self._sink(idx, base)
            total = l if sink is None else l + sink
        return base, total, acc, l == 0

    def block(self, idx, r0: int, r1: int, steps, kept, lone: bool = True) -> None:
        x, dtype = self.x, self.x.q.dtype
        q_i = tile_at(x.q, idx)[r0:r1]  # (Bq, d_k)
        k_i, v_i = tile_at(x.k, idx), tile_at(x.v, idx)  # (M, d_k), (M, d_v)
        qs = q_i * self.c  # (Bq, d_k)
        bufs = _buffers(dtype)
        # A) the row sums l against a base of 0; again against the row maxima if unsafe
        base, l, acc, hollow = self._divisors(idx, r0, r1, qs, k_i, v_i, steps, kept, bufs)
        if self.watch and not self.wide:
            with np.errstate(divide="ignore"):
                lse = (np.log2(l) + (0.0 if base is None else base)) / LOG2E  # (Bq,)
            lse[hollow] = -np.inf
            self.wide = too_wide(x, lse - np.log(x.m)) or too_wide(x, np.minimum(lse, 0))
        if hollow.any():  # a row that allows no key: an error, or gradient 0 there
            if self.empty_rows == "raise":
                self.empty = True
                return
            l = np.where(hollow, 1.0, l).astype(dtype)  # its p are all 0: 0, not 0/0
        g_i = self.g[idx][r0:r1]  # (Bq, d_v)
        inv = np.reciprocal(l)  # (Bq,)
        norm = lone and not self.anchored  # P = p / l, or 1 / l on dO and D (anchored: top p 1)
        gl = g_i if norm else g_i * inv[:, None]  # (Bq, d_v): dO, or dO / l
        d_row = np.vecdot(gl, acc) * (inv if norm else 1)  # (Bq,): D from the tiles not kept
        dv_i, dk_i, dq_i = self.dv[idx], self.dk[idx], self.dq[idx][r0:r1]
        # B1) P = p / l, dP and dV of the kept tiles, and D from them
        turn = functools.partial(self.turns.adding, idx, (r0, r1))
        for i, ((rows, cols, _), tiles) in enumerate(zip(steps, kept, strict=True)):
            if tiles is not None:
                if norm:
                    np.divide(tiles[0], l[rows, None], out=tiles[0])  # (rows, cols) P
                with turn(i, "v"):
                    d_row[rows] += self._dp_dv(tiles, gl[rows], v_i[cols], dv_i[cols], bufs)
        if self.dsinks is not None:  # dσ = −Σ_i P_iσ D_i, P_iσ = exp2(σ − base) / l
            share = self._sink(idx, base) * inv  # (Bq,)
            with turn(None, "sink"):
                self.dsinks[idx] -= np.vecdot(share, d_row)
        d_row = d_row if norm else d_row * inv  # D, or D / l against dP / l
        # B2) dS, dQ and dK; a tile not kept is computed again
        for i, ((rows, cols, tm), tiles) in enumerate(zip(steps, kept, strict=True)):
            p, dp, tq, tk = bufs(rows.stop - rows.start, cols.stop - cols.start, q_i.shape[-1])
            if tiles is None:
                self._weights(p, qs[rows], k_i[cols], tm, idx, base if base is None else base[rows])
                if norm:
                    np.divide(p, l[rows, None], out=p)  # (rows, cols) P
                with turn(i, "v"):
                    self._dp_dv((p, dp), gl[rows], v_i[cols], dv_i[cols], bufs)
            else:
                p, dp = tiles
            if self.fused is None:
                dp -= d_row[rows, None]
                dp *= p  # (rows, cols) dS, the gradient of the capped and masked scores
            else:
                self.fused.softmax_grad(dp, p, d_row[rows])  # the same, in one pass
            if self.dbias is not None:
                self._add_bias(dp, idx, r0 + rows.start, cols)
            if self.cap is not None:  # through the cap: 1 − tanh², the tile's tanh again
                matmul(qs[rows], k_i[cols].T, out=p)  # p is spent: reuse it
                np.tanh(p, out=p)
                p *= p
                np.subtract(1.0, p, out=p)
                dp *= p  # (rows, cols) dS of the scaled scores
            np.matmul(dp.T, q_i[rows], out=tk)  # (cols, d_k)
            np.matmul(dp, k_i[cols], out=tq)  # (rows, d_k)
            dq_i[rows] += tq  # this item's own rows
            with turn(i, "k"):
                dk_i[cols] += tk

    def _add_bias(self, ds, idx, row0: int, cols: slice) -> None:
        """Add a tile's dS (rows, cols) to the float mask's gradient, summed where the mask
        broadcasts (its size-1 axes)."""
        b = tile_at(self.dbias, idx)  # (N | 1, M | 1)
        if b.shape[-2] == 1:
            ds = ds.sum(axis=0, keepdims=True)  # (1, cols)
        else:
            b = b[row0 : row0 + ds.shape[0]]
        if b.shape[-1] == 1:
            ds = ds.sum(axis=1, keepdims=True)  # (rows | 1, 1)
        else:
            b = b[:, cols]
        with self.lock:
            b += ds

    def _g_fits(self, g, l) -> bool:
        """Whether every nonzero dO / l of these rows is a normal number with room to spare."""
        a = np.abs(g)  # (Bq, d_v)
        top = a.max(axis=1)  # (Bq,)
        least = np.min(a, axis=1, where=a > 0, initial=np.inf)  # (Bq,): inf for a zero row
        small, big = self.g_range
        return bool((top <= big * l).all() and (least >= small * l).all())

    def _sweep_a(self, qs, k_i, v_i, steps, kept, idx, base, bufs):
        """(l (Bq,), Σ p V (Bq, d_v) over the tiles not kept), filling the kept tiles' p."""
        l = np.zeros(qs.shape[0], qs.dtype)  # (Bq,)
        acc = np.zeros((qs.shape[0], v_i.shape[-1]), qs.dtype)  # (Bq, d_v)
        for (rows, cols, tm), tiles in zip(steps, kept, strict=True):
            h, w = rows.stop - rows.start, cols.stop - cols.start
            p = bufs(h, w, qs.shape[-1])[0] if tiles is None else tiles[0]
            self._weights(p, qs[rows], k_i[cols], tm, idx, base if base is None else base[rows])
            l[rows] += p @ bufs.ones_for(w)
            if tiles is None:
                acc[rows] += p @ v_i[cols]
        return l, acc

    def _weights(self, p, qs_rows, k_cols, tm, idx, base) -> None:
        """p = exp2(score - base) of one tile, in place; 0 at blocked pairs. ``base``: None
        (0), or the tile rows' integer bases, when the weights are clipped to [2^floor, 1]."""
        matmul(qs_rows, k_cols.T, out=p)  # (rows, cols): score, in log2 units
        if self.cap is not None:
            np.tanh(p, out=p)
            p *= self.cap
        if tm is not None and tm.bias is not None:
            p += tile_at(tm.bias, idx)
        low = None
        if base is not None:
            p -= base[:, None]
            if self.anchored:  # exactly 0 below the floor: 2^floor · a huge dP · k is not 0
                low = p < self.floor
            np.clip(p, self.floor, 0.0, out=p)  # blocked pairs may be huge: no inf · 0
        elif tm is not None and tm.floor is not None:  # far below: exp2's slow path
            np.maximum(p, tm.floor, out=p)
        if self.ln2 is None:
            np.exp2(p, out=p)
        elif self.fused is not None:
            self.fused.exp(p, self.ln2)  # exp(p · ln 2) in one pass
        else:
            p *= self.ln2
            np.exp(p, out=p)
        if low is not None:
            p[low] = 0.0
        if tm is not None:
            p *= tile_at(tm.keep, idx)  # blocked pairs weigh exactly 0

    def _dp_dv(self, tiles, g_rows, v_cols, dv_cols, bufs) -> np.ndarray:
        """dP = dO Vᵀ into tiles[1], dV += Pᵀ dO; returns rowsum(P ∘ dP). (Anchored: p, dO / l
        and dP / l in place of P, dO and dP.)"""
        p, dp = tiles
        matmul(g_rows, v_cols.T, out=dp)  # (rows, cols)
        tv = bufs.tv(p.shape[1], g_rows.shape[-1])
        np.matmul(p.T, g_rows, out=tv)  # (cols, d_v)
        dv_cols += tv  # in the block's turn (see block)
        return np.vecdot(p, dp)  # (rows,)

    def _row_max(self, qs, k_i, steps, idx, bufs) -> np.ndarray:
        """Each row's maximum allowed score (log2 units), rounded up (unless anchored): the
        safe base."""
        top = np.full(qs.shape[0], -np.inf, qs.dtype)  # (Bq,)
        for rows, cols, tm in steps:
            s = bufs(rows.stop - rows.start, cols.stop - cols.start, qs.shape[-1])[0]
            matmul(qs[rows], k_i[cols].T, out=s)
            if self.cap is not None:
                np.tanh(s, out=s)
                s *= self.cap
            if tm is None:
                t = s.max(axis=1)
            else:
                if tm.bias is not None:
                    s += tile_at(tm.bias, idx)
                where = np.broadcast_to(tile_at(tm.allowed, idx), s.shape)
                t = np.max(s, axis=1, where=where, initial=-np.inf)
            np.fmax(top[rows], t, out=top[rows])
        # 0 for a row that allows nothing; NaN or +inf (only with check_finite=False) stays NaN.
        # Anchored, the maximum itself (not rounded up), so the top weight is exp2(0) = 1.
        up = top if self.anchored else np.ceil(top)
        base = np.where(np.isfinite(top), up, np.where(np.isneginf(top), 0.0, np.nan))
        return base.astype(qs.dtype)
