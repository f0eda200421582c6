"""The online softmax over one query block's tiles: the inner loops of the blockwise kernel.

Shape legend (the chapter's letters):
    Bq   query rows of the block      M    key rows
    d_k  query and key width          d_v  value width

``solve`` runs ``_fast`` (every base left at 0: two matmuls, an exp2 and a row sum per tile)
and falls back to ``_exact`` (the textbook online softmax, with integer bases so every
rescaling is an exact power of two) when the fast pass leaves the float range. The design,
with the measurements behind it, is in ``kernels/blockwise.py``'s docstring; ``blockwise.run``
schedules the blocks and normalises what ``solve`` returns.
"""

from __future__ import annotations

import numpy as np

from attnlab.core.masks import tile_at as _pick
from attnlab.kernels._precision import matmul

__all__ = ["solve"]


def _fast(q_rows, kT, v, steps, idx, c, cap=None, natural=False, fused=None):
    """One query block of one lead element, every base left at 0: two matmuls, an exp2 and a
    row sum per step, nothing else. Returns (acc (Bq, d_v), l (Bq,)), to be checked by _solve.

    ``cap``: with a softcap, softcap · log2 e (c is then scale / softcap): each score becomes
    cap · tanh(score), two more passes over the tile, only then.
    ``natural``: scores in natural units and np.exp instead of np.exp2, where numpy vectorises
    exp and not exp2 (``_tiles.natural_exp``); c and cap are then scale and softcap without
    log2 e, and masks add their natural biases. The sums are the same quantities either way.
    ``fused``: the compiled exp (``_fused.tile_exp``) to run in place of np.exp, natural units.
    ``steps`` holds a ``Step`` per tile (see ``_tiles.Step``), unpacked by position: the loop
    runs once per tile and attribute look-ups would cost a GIL-holding call each.
    Few numpy calls per step matter with threads: each call takes the GIL, and a thread that
    finds it held sleeps until woken (at N = 2048, causal: ~150 such waits in a 33 ms call
    with separate adds for Σ p v and Σ p, ~110 with one).
    """
    qs = q_rows * c  # (Bq, d_k): scale · log2 e, folded into q once
    dv = v.shape[-1]
    acc = np.zeros((qs.shape[0], dv + 1), qs.dtype)  # (Bq, d_v + 1): Σ exp2(score) v | Σ exp2
    keys = kT[:-1]  # (d_k, M): the ones row is for the exact steps only
    exp = np.exp if natural else np.exp2
    if fused is not None:

        def exp(s, out):  # numpy's signature (out is s): the kernel works in place
            fused(s, 1.0)

    for sl, c0, c1, s, r, ls, rl, ones, tm in steps:
        matmul(qs[sl], keys[:, c0:c1], out=s)  # (rows, cols): score, in log2 or natural units
        if cap is not None:
            np.tanh(s, out=s)
            s *= cap
        if tm is None:
            exp(s, out=s)
        else:
            if tm.bias is not None:
                s += _pick(tm.ebias if natural else tm.bias, idx)
                if tm.floor is not None:  # far below: exp2's slow path (see _tiles.TileMask)
                    np.maximum(s, tm.efloor if natural else tm.floor, out=s)
            exp(s, out=s)
            s *= _pick(tm.keep, idx)  # blocked pairs weigh exactly 0
        # Row sums by a matrix-vector product: 16 us for a 512 x 512 tile, where np.sum takes
        # 60 and a column of ones in v slows the p v matmul by 35 (its width 65 is awkward).
        np.matmul(s, ones, out=ls)  # (rows,): Σ p, the last column of rl
        np.matmul(s, v[c0:c1], out=r)  # (rows, d_v): Σ p v, the rest of rl
        acc[sl] += rl  # one add for both: each numpy call is a chance to wait for the GIL
    return acc[:, :dv], acc[:, dv], 0.0


class _Block:
    """The exact pass's state for one query block: q with a -base column, and running sums."""

    def __init__(self, q_rows: np.ndarray, c: np.floating, dv: int):
        rows, dk = q_rows.shape
        dtype = q_rows.dtype
        self.qa = np.empty((rows, dk + 1), dtype)  # (Bq, d_k + 1)
        np.multiply(q_rows, c, out=self.qa[:, :dk])  # scale · log2 e, folded into q once
        self.qa[:, dk] = 0.0  # -base, meeting kᵀ's row of ones: the matmul gives score - base
        self.base = np.zeros(rows, dtype)  # (Bq,) integers
        # (Bq, d_v + 1): Σ exp2(score - base) v, and in the last column l = Σ exp2(score - base)
        self.acc = np.zeros((rows, dv + 1), dtype)
        self.l = self.acc[:, dv]  # (Bq,), a view

    def rescale(self, rows: slice, e: np.ndarray) -> None:
        """Move the base of ``rows`` up by the whole numbers e: acc and l shrink by 2^-e, exactly.

        e is a float: a huge additive bias (-1e300 fits float64) moves a base far beyond int64.
        Past 2^30 the shrink is to exactly 0 anyway (and e < -1100 cannot happen while l > 0:
        the base stays at or above log2 l), so the exponent handed to ldexp is clipped there.
        """
        shrink = np.clip(e, -(2**30), 2**30).astype(np.int64)
        self.acc[rows] = np.ldexp(self.acc[rows], -shrink[:, None])
        base = self.base[rows] + e
        self.base[rows] = base
        self.qa[rows, -1] = -base


def _exact(q_rows, kT, v, steps, idx, c, floor, cap=None):
    """The textbook online softmax: at every step, move each row's base to its maximum so far
    and rescale what was summed. Safe for any scores; the fallback when _fast is not."""
    blk = _Block(q_rows, c, v.shape[-1])
    for sl, c0, c1, s, r, ls, rl, ones, tm in steps:
        if cap is None:
            matmul(blk.qa[sl], kT[:, c0:c1], out=s)  # (rows, cols): score - base, log2
        else:  # the cap is not linear: cap the score, then subtract the base
            matmul(blk.qa[sl, :-1], kT[:-1, c0:c1], out=s)  # (rows, cols)
            np.tanh(s, out=s)
            s *= cap
            s -= blk.base[sl, None]
        if tm is not None and tm.bias is not None:
            s += _pick(tm.bias, idx)
        if tm is None:
            top = s.max(axis=1)  # (rows,)
        else:  # the maximum over allowed pairs only; -inf where the step allows nothing
            where = np.broadcast_to(_pick(tm.allowed, idx), s.shape)
            top = np.max(s, axis=1, where=where, initial=-np.inf)  # (rows,)
        # The new base must also keep the sum so far in range (it may be far from the old one).
        l = blk.l[sl]
        top = np.fmax(top, np.log2(l, where=l > 0, out=np.full_like(l, -np.inf)))
        # An integer shift, so rescaling by 2^-shift is exact; 0 for a row with nothing allowed
        # yet. NaN or +inf (only with check_finite=False) stays NaN, as in the dense path.
        shift = np.where(np.isfinite(top), np.ceil(top), np.where(np.isneginf(top), 0.0, np.nan))
        s -= shift[:, None].astype(s.dtype)
        # Allowed scores are <= 0 now. Far below, exp2 would underflow on numpy's slow path
        # (20-150x): clamp at 2^floor, adding at most M · 2^floor to a sum >= 1/2.
        np.clip(s, floor, 0.0, out=s)
        np.exp2(s, out=s)  # (rows, cols) weights before normalising, each <= 1
        if tm is not None:
            s *= _pick(tm.keep, idx)  # blocked pairs weigh exactly 0
        np.matmul(s, v[c0:c1], out=r)  # (rows, d_v)
        np.matmul(s, ones, out=ls)  # (rows,)
        blk.rescale(sl, np.nan_to_num(shift))
        blk.acc[sl] += rl
    return blk.acc[:, :-1], blk.l, blk.base


def solve(q_rows, kT, v, steps, idx, c, floor, tiny, cap, fast=None):
    """(acc, l, base) of one query block: the fast pass, or the exact one where it fails.
    ``fast``: (c, cap, natural, fused) for the fast pass (see _fast), when they differ from the
    exact pass's log2 constants c and cap."""
    acc, l, base = _fast(q_rows, kT, v, steps, idx, *(fast or (c, cap)))
    # Against a base of 0, exp2 overflows once a scaled score passes maxexp (f32: 128 in log2
    # units, 89 in natural ones) and underflows far below: inf, NaN (inf · 0 at a blocked pair)
    # or a sum too small to trust (< 2^-(maxexp/2)) sends the block to the exact pass. Rows
    # that allow no key at all also come here, and leave with l = 0.
    # (A NaN or inf anywhere makes the sum non-finite; a min of NaN fails the comparison.)
    if not (l.min() >= tiny and np.isfinite(acc.sum())):
        acc, l, base = _exact(q_rows, kT, v, steps, idx, c, floor, cap)
    return acc, l, base
