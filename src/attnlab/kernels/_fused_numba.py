"""The compiled tile exponential (numba): imported only by ``_fused._load``, never at
``import attnlab``. See ``kernels/_fused.py`` for why and when it runs.

Shape legend: rows x cols a tile (query rows x keys).

exp(x) = 2^n · exp(r), n = round(x / ln 2), r = x − n · ln 2 in [−ln 2 / 2, ln 2 / 2]:
ln 2 is subtracted in two parts (a head with few bits, so n · head is exact, and the rest),
exp(r) is its Taylor polynomial to degree 7 (the next term, r^8 / 8!, is below 2^-27 there),
and 2^n is built from exponent bits in two halves, so results down in the subnormal range and
up to the overflow to inf come out as numpy's. Inputs are clamped to [−104, 89] first (below,
exp is 0 in float32; above, inf), which also keeps n inside the bit trick's range. NaN passes
through the comparisons and the arithmetic as NaN. No branch in the loop: LLVM vectorises it
(8 lanes with AVX2) with no fast-math flag but contraction into fused multiply-adds
(``_CONTRACT``): NaN, inf and signed zeros keep their IEEE meaning.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["exp_scaled", "row_sum", "softmax_grad", "softmax_grad_rows", "softmax_rows"]


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 ``bits`` (a reinterpretation, no conversion)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return sig, codegen


#: The one fast-math flag the exp loops take: a · b + c may become one fused multiply-add. It
#: changes no rounding numpy's passes make (the scale, mask and shift are lone operations);
#: inside exp it rounds once where two roundings were, so the polynomial is, if anything,
#: closer: still within 3 ulps of numpy's exp and 1 of float64's rounded (tests/kernels/test_fused.py),
#: and 0.55 ns an element against 0.83 (measured on the 2-core AMD EPYC, 2^20 float32).
_CONTRACT = {"contract"}


@njit(cache=True, fastmath=False, inline="always")
def _exp(x):  # pragma: no cover - compiled
    """exp(x) for one float32 (see the module docstring); inlined into each loop below."""
    log2e = np.float32(1.4426950408889634)
    ln2_hi = np.float32(0.693359375)  # 8 significant bits: n · ln2_hi is exact for |n| < 2^16
    ln2_lo = np.float32(-2.12194440e-4)  # ln 2 − ln2_hi
    shift = np.float32(12582912.0)  # 1.5 · 2^23: adding it rounds to an integer
    x = np.float32(89.0) if x > np.float32(89.0) else x
    x = np.float32(-104.0) if x < np.float32(-104.0) else x
    nf = (x * log2e + shift) - shift  # round(x / ln 2), as a float
    r = (x - nf * ln2_hi) - nf * ln2_lo
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    n = np.int32(nf)
    half = n >> 1  # 2^n in two factors, each a normal float32 for n in [-150, 129]
    rest = n - half
    return (
        p
        * _float32_from_bits((half + np.int32(127)) << np.int32(23))
        * _float32_from_bits((rest + np.int32(127)) << np.int32(23))
    )


@njit(cache=True, fastmath=_CONTRACT, nogil=True)
def exp_scaled(s, c):  # pragma: no cover - compiled; its Python body never runs
    """s ← exp(s · c) in place, s a C-contiguous (rows, cols) float32 tile (every tile buffer
    of the kernels is); s · c rounds to float32 first, as numpy's ``s *= c`` would."""
    c = np.float32(c)
    flat = s.reshape(-1)  # a view of the contiguous tile: one loop (0.29 ms against 0.38 by rows)
    for j in range(flat.size):
        flat[j] = _exp(flat[j] * c)


@njit(cache=True, fastmath=_CONTRACT, nogil=True)
def softmax_rows(s, a, b, scale, blocked, reach, top, total, given):  # pragma: no cover
    """Rows [a, b) of s (P, R, C), a C-contiguous float32 table of scores q kᵀ, in place:
    each score scaled (``s * scale``, rounded as numpy rounds it), set to -inf where
    ``blocked`` (R, C) is True, shifted by its row's max and exponentiated. Row i's max goes
    to top[p, i − a] (``top`` is (P, b − a)), -inf for a row with no allowed key (shifted by
    0: all its weights are 0). With ``given``, the shift is read from ``top`` instead (a saved
    log-sum-exp: the weights themselves come out). Each row's sum of weights goes to
    total[p, i − a]. ``reach`` (R,): keys from reach[i] on are blocked for row i and written
    as exactly 0 without a look. A (0, 0) ``blocked`` or a (0,) ``reach`` means none.

    The scale, the mask and the shift round as numpy's ``*=``, ``copyto`` and ``-=`` do, the
    max is exact and the sum is numpy's pairwise sum over the whole row (``_row_sum``), so
    only exp differs from numpy's passes (``_fused.ULPS``). Each row is read three times
    while it sits in L1, where numpy makes six passes over the table (1.6 ms against 4.5 for
    the scores of a causal (8, 8, 128, 64) batch on the 2-core AMD EPYC, before the sum
    joined)."""
    scale = np.float32(scale)
    lowest = np.float32(-np.inf)
    masked = blocked.shape[0] > 0
    cols = s.shape[2]
    stack = np.empty((64, 3), np.int64)  # ``_row_sum``'s levels, for rows past 128 keys
    left = np.empty(64, np.float32)
    for p in range(s.shape[0]):
        for i in range(a, b):
            row = s[p, i]
            end = reach[i] if reach.shape[0] > 0 else cols
            if masked:
                shut = blocked[i]
                for j in range(end):
                    row[j] = lowest if shut[j] else row[j] * scale
            else:
                for j in range(end):
                    row[j] = row[j] * scale
            if given:
                shift = top[p, i - a]
            else:
                shift = _row_max(row, end)
                top[p, i - a] = shift
                shift = shift if shift > lowest else np.float32(0.0)
            for j in range(end):
                row[j] = _exp(row[j] - shift)
            for j in range(end, cols):
                row[j] = np.float32(0.0)
            # rows of up to 128 keys straight to the block sum: a call of ``_row_sum``, which
            # takes three arrays, cost more than the sum of a 32-key row
            if cols <= 128:
                total[p, i - a] = _block_sum(row, 0, cols)
            else:
                total[p, i - a] = _row_sum(row, 0, cols, stack, left)


@njit(cache=True, fastmath=False, nogil=True)
def _row_sum(row, start, n, stack, left):  # pragma: no cover - compiled
    """row[start : start + n].sum() in float32, as numpy adds a contiguous row: up to 128
    terms in ``_block_sum``; a longer run is cut in two at a multiple of 8 near its middle and
    the halves' sums added, down to runs of 128 or fewer. The same bits as ``np.add.reduce``
    (tests/kernels/test_fused_softmax.py). numpy recurses; this walks the same tree with ``stack``
    (int64 (64, 3): start, length, state per level) and ``left`` (float32 (64,): each open
    level's left-half sum), as numba's on-disk cache breaks a caller of a recursive function
    (seen: a segfault on the second process's first call)."""
    if n <= 128:
        return _block_sum(row, start, n)
    top = 0
    stack[0, 0], stack[0, 1], stack[0, 2] = start, n, 0
    val = np.float32(0.0)
    have = False  # val holds a finished sum for the level at ``top``
    while True:
        if have:
            if top < 0:
                return val
            if stack[top, 2] == 1:  # its left half is done: keep it, open the right half
                left[top] = val
                stack[top, 2] = 2
                have = False
                half = _half(stack[top, 1])
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = (
                    stack[top - 1, 0] + half,
                    stack[top - 1, 1] - half,
                    0,
                )
            else:  # both halves done
                val = left[top] + val
                top -= 1
            continue
        first, length = stack[top, 0], stack[top, 1]
        if length <= 128:
            val = _block_sum(row, first, length)
            top -= 1
            have = True
            continue
        stack[top, 2] = 1
        top += 1
        stack[top, 0], stack[top, 1], stack[top, 2] = first, _half(length), 0


@njit(cache=True, fastmath=False, nogil=True)
def _half(n):  # pragma: no cover - compiled
    half = n // 2
    return half - half % 8


@njit(cache=True, fastmath=False, nogil=True, inline="always")
def _block_sum(row, start, n):  # pragma: no cover - compiled
    """Up to 128 terms as numpy adds them: straight below 8, else eight running sums combined
    pairwise, then the last n % 8 terms one by one."""
    if n < 8:
        res = np.float32(0.0)
        for j in range(start, start + n):
            res += row[j]
        return res
    r0, r1, r2, r3 = row[start], row[start + 1], row[start + 2], row[start + 3]
    r4, r5, r6, r7 = row[start + 4], row[start + 5], row[start + 6], row[start + 7]
    whole = start + n - n % 8
    j = start + 8
    while j < whole:
        r0 += row[j]
        r1 += row[j + 1]
        r2 += row[j + 2]
        r3 += row[j + 3]
        r4 += row[j + 4]
        r5 += row[j + 5]
        r6 += row[j + 6]
        r7 += row[j + 7]
        j += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for j in range(whole, start + n):
        res += row[j]
    return res


@njit(cache=True, fastmath=False, nogil=True, inline="always")
def _row_max(row, end):  # pragma: no cover - compiled
    """max(row[:end]), -inf when empty: eight running maxima, so LLVM can keep them in one
    vector register (max is exact in any order; the scores here hold no NaN)."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    j = 0
    while j + 8 <= end:
        m0 = max(m0, row[j])
        m1 = max(m1, row[j + 1])
        m2 = max(m2, row[j + 2])
        m3 = max(m3, row[j + 3])
        m4 = max(m4, row[j + 4])
        m5 = max(m5, row[j + 5])
        m6 = max(m6, row[j + 6])
        m7 = max(m7, row[j + 7])
        j += 8
    while j < end:
        m0 = max(m0, row[j])
        j += 1
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@njit(cache=True, fastmath=False, nogil=True)
def softmax_grad(dp, p, d):  # pragma: no cover - compiled
    """dp ← p ∘ (dp − d) in place, row by row: the backward's dS from dP', the weights
    (rows, cols) and each row's D (rows,), in one pass where numpy takes two (a subtraction,
    then a product: 0.18 ms for a 512 x 512 float32 tile, against 0.06). The same two roundings
    in the same order, so the result is numpy's bit for bit."""
    rows, cols = dp.shape
    for i in range(rows):
        di = d[i]
        for j in range(cols):
            dp[i, j] = p[i, j] * (dp[i, j] - di)


@njit(cache=True, fastmath=False, nogil=True)
def softmax_grad_rows(ds, p):  # pragma: no cover - compiled
    """ds ← p ∘ (ds − D) in place, row by row, with each row's D = rowsum(p ∘ ds) worked out
    on the spot: the backward's steps 3 and 4 from dP (rows, cols) and the weights P (rows,
    cols), both C-contiguous float32. numpy makes four passes for this (``ds * p``, its row
    sums, ``ds -= D``, ``ds *= p``); here each row is read once while in L1. Every product
    rounds alone (no contraction) and D is numpy's pairwise row sum (``_row_sum``), so the
    result is numpy's bit for bit."""
    rows, cols = ds.shape
    prod = np.empty(cols, np.float32)
    stack = np.empty((64, 3), np.int64)
    left = np.empty(64, np.float32)
    for i in range(rows):
        for j in range(cols):
            prod[j] = p[i, j] * ds[i, j]
        di = _block_sum(prod, 0, cols) if cols <= 128 else _row_sum(prod, 0, cols, stack, left)
        for j in range(cols):
            ds[i, j] = p[i, j] * (ds[i, j] - di)


@njit(cache=True, fastmath=False, nogil=True)
def row_sum(row, start, n):  # pragma: no cover - compiled
    """``_row_sum`` with its own stack: for the tests, which hold it to numpy's bits."""
    return _row_sum(row, start, n, np.empty((64, 3), np.int64), np.empty(64, np.float32))
