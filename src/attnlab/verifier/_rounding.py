"""Rounding float32 to float16 or bfloat16 in place, bit for bit as numpy's and ml_dtypes' casts.

The baseline rounds every table it computes (scores, weights, dP, dS) to the kernel's dtype and
works on in float32, as a GPU's float16 arithmetic does. ``x.astype(float16).astype(float32)``
does that, but numpy converts float16 one element at a time, slowly for float16's subnormals:
48 ns an entry on softmax weights here, of which half are below 2^-14. Integer operations on
the float32 bits give the same numbers in a few passes, a block of entries at a time so they
stay in cache:

    normal range  add 0xFFF plus the lowest kept bit, clear the 13 dropped bits: round to
                  nearest, ties to even, on float16's 10 mantissa bits (bfloat16: 16 dropped
                  bits and 7 kept, the same exponent as float32, so nothing else to handle)
    |x| < 2^-14   float16's subnormals, spaced 2^-24: (|x| + 0.5) - 0.5 rounds |x| to that
                  spacing in float32's own round-to-nearest-even, since float32's spacing in
                  [0.5, 1) is 2^-24
    |x| > 65504   past float16's largest finite value (65520 and up round there): +-inf
    inf, NaN      kept (a default NaN's payload survives the clearing)

tests/verifier/test_verify_rounding.py checks every float32 bit pattern's neighbourhood that matters
(ties, subnormals, the overflow edge, specials) and random tables against the casts.
"""

from __future__ import annotations

import numpy as np

__all__ = ["round_in_place"]

_BLOCK = 1 << 16  # entries rounded at a time: 256 KiB of float32, in cache
_HALF_TINY = np.uint32(0x38800000)  # 2^-14: float16's smallest normal
_HALF_MAX = np.float32(65504.0)


def round_in_place(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` (float32, C-contiguous, writeable) rounded to ``dtype`` (float16 or bfloat16)
    and kept in float32; returns ``x``."""
    flat = x.reshape(-1)  # a view: x is contiguous
    bits = flat.view(np.uint32)
    half = dtype == np.float16
    drop = 13 if half else 16
    keep_mask = np.uint32((0xFFFFFFFF << drop) & 0xFFFFFFFF)
    bias = np.uint32((1 << (drop - 1)) - 1)
    scratch = np.empty(min(_BLOCK, flat.size), np.uint32)
    spare = np.empty(min(_BLOCK, flat.size), np.float32)
    small = np.empty(min(_BLOCK, flat.size), bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, _BLOCK):
            b = bits[start : start + _BLOCK]
            f = flat[start : start + _BLOCK]
            t, s, tiny = scratch[: b.size], spare[: b.size], small[: b.size]
            if half:
                np.bitwise_and(b, np.uint32(0x7FFFFFFF), out=t)
                np.less(t, _HALF_TINY, out=tiny)
                any_tiny = tiny.any()
                if any_tiny:
                    np.abs(f, out=s)
                    s += np.float32(0.5)
                    s -= np.float32(0.5)
                    np.copysign(s, f, out=s)
            np.right_shift(b, drop, out=t)
            t &= np.uint32(1)
            t += bias
            b += t
            b &= keep_mask
            if half:
                if any_tiny:
                    np.copyto(f, s, where=tiny)
                np.abs(f, out=s)
                np.greater(s, _HALF_MAX, out=tiny)  # NaN compares False: kept
                if tiny.any():
                    np.copyto(f, np.copysign(np.float32(np.inf), f), where=tiny)
    return x
