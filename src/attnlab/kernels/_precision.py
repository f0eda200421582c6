"""float32 attention whose scores reach far from 0: computed again in float64, then rounded.

Shape legend (the chapter's letters): ... batch axes, N query rows, M key rows.

A float32 score s carries an absolute rounding error of about |s| · 2^-24, and every weight
exp(s - max) inherits it as a relative error: with scores near ±50 (q and k scaled up, as in
FlashAttention's ``test_flash_attn_bwd_overflow``) the outputs of every float32 implementation
err by several ulps, by luck of the summation order, and a few keys leave nothing to average
it out (measured: 3.3e-6 where torch's float32 reference erred 1.0e-6). attnlab is the
reference, so it does better than luck: when a call's row maxima pass ±WIDE, it computes again
in float64 and rounds the result once. The kernels read the row maxima they already hold (the
dense shift, the blockwise base and row sum), so inputs with ordinary scores pay nothing.

The second source of float32 error is the length of a product's sums. OpenBLAS adds a dot
product of K terms in one running sum, whose error grows with K; MKL (torch's CPU library)
cuts K into even pieces of at most 192 and adds the pieces' products. On FlashAttention's
grid that made the dense paths err over twice torch's float32 error at d = 224 and 256 (q kᵀ)
and past 192 keys (P V): measured 1.05e-6 against torch's 3.9e-7 at 113 x 211, d = 224.
``matmul`` cuts a float32 product's sums the same way where K passes ``CHAIN``; shorter ones,
and every float64 product, are numpy's single call. A third source is the layout of a narrow
right factor (``NARROW``): with few keys, q kᵀ and dO vᵀ take OpenBLAS's narrow kernel for a
transposed operand, which errs 2-4 times torch; ``matmul`` copies such a factor contiguous. The dense and small paths take it for every
product; the blockwise tiles for their products over d only (q kᵀ, dO vᵀ), since a tile's
products over keys or rows already end at the tile's edge and are summed tile by tile.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attnlab.core._validate import Inputs

__all__ = ["CHAIN", "NARROW", "WIDE", "matmul", "narrow", "too_wide", "widen"]

#: The largest |row maximum| (natural units) a float32 call keeps: past it, the rounding of
#: the scores themselves, ~|s| · 6e-8, is the largest error of the weights.
WIDE = 16.0
#: The longest sum a float32 product adds in one chain (MKL's piece of K, measured above).
CHAIN = 192
#: The widest float32 result whose right factor is made contiguous first: OpenBLAS multiplies
#: a (R, K) by a transposed (K, C) of 2-8 columns (q kᵀ or dO vᵀ with 2-8 keys) with one long
#: chain per entry, 2-4 times torch's float32 error (measured at R = 799, K = 32-128: 1.1e-5
#: against torch's 3.5e-6 at K = 64, C = 3); a contiguous factor takes the kernel that errs
#: 3.1e-6. From 9 columns on both layouts give the same bits.
NARROW = 8
_F32 = np.dtype(np.float32)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b (..., R, K) x (..., K, C) -> (..., R, C), into ``out`` if given; in float32 with
    K > CHAIN, the sum over K cut into even pieces of at most CHAIN terms, their products added.

    >>> a = np.ones((2, 400), np.float32)
    >>> matmul(a, a.T).tolist()
    [[400.0, 400.0], [400.0, 400.0]]
    """
    if a.dtype == _F32 and b.shape[-1] <= NARROW and not b.flags.c_contiguous:
        b = np.ascontiguousarray(b)  # (..., K, C): a copy of K x C numbers, see NARROW
    size = a.shape[-1]
    if size <= CHAIN or a.dtype != _F32:
        return np.matmul(a, b, out=out)
    step = -(-size // -(-size // CHAIN))  # even pieces: 224 -> 112 + 112, 400 -> 3 of 134
    out = np.matmul(a[..., :step], b[..., :step, :], out=out)
    for at in range(step, size, step):
        out += np.matmul(a[..., at : at + step], b[..., at : at + step, :])
    return out


def too_wide(x: Inputs, row_max: np.ndarray) -> bool:
    """Whether a float32 call's row maxima (finite entries of ``row_max``) pass ±WIDE."""
    if x.q.dtype != np.float32 or not x.check_finite:
        return False
    top = np.abs(row_max[np.isfinite(row_max)])
    return bool(top.size and top.max() > WIDE)


def widen(x: Inputs) -> Inputs:
    """``x`` in float64: the arrays, the sinks and a float mask's table."""
    f64 = np.dtype(np.float64)
    return replace(
        x,
        q=x.q.astype(f64),
        k=x.k.astype(f64),
        v=x.v.astype(f64),
        mask=None if x.mask is None else x.mask.for_dtype(f64),
        sinks=None if x.sinks is None else x.sinks.astype(f64),
    )


def narrow(result):
    """A float64 result (an array or a tuple of them) rounded once to float32."""
    if isinstance(result, tuple):
        return tuple(a.astype(np.float32) for a in result)
    return result.astype(np.float32)
