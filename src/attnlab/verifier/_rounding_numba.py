"""The baseline's rounding passes compiled (numba): imported only by ``_rounding._compiled``,
never at ``import attnlab``. Each is numpy's pass of ``_rounding.py`` bit for bit, in one read
and one write of each entry instead of a dozen numpy passes.

Shape legend: R rows (the leading axes flattened into them), C entries a row; flat: any
C-contiguous float32 table seen as one row.

Every entry is rounded on its float32 bits as ``_rounding.py`` explains (``_round`` below):
add the bias and the lowest kept bit, clear the dropped bits; float16's subnormals by
(|x| + 0.5) - 0.5 in float32, its overflow to ±inf; NaN kept. No fast-math flag: ``+``,
``-``, ``*`` and ``/`` are IEEE float32 operations, each rounded once as numpy's are (no
fused multiply-add), so the fused passes give numpy's numbers exactly. The loop has no branch
that LLVM cannot turn into a select, so it vectorises.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from attnlab.kernels._fused_numba import _float32_from_bits

__all__ = ["divide_round", "grad_round", "round_flat"]

_ABS = 0x7FFFFFFF
_SIGN = 0x80000000
_INF = 0x7F800000
_HALF_TINY = 0x38800000  # 2^-14: float16's smallest normal
_HALF_MAX = 0x477FE000  # 65504: float16's largest finite value


@intrinsic
def _bits(typingctx, x):
    """The int32 whose bits are float32 ``x``'s (a reinterpretation, no conversion)."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))

    return sig, codegen


@njit(cache=True, fastmath=False, inline="always")
def _round(x, half):  # pragma: no cover - compiled
    """float32 ``x`` rounded to float16 (``half``) or bfloat16, as a float32. The bits are
    worked on as int64 (numba's integer arithmetic), the low 32 of them the float's."""
    x = np.float32(x)
    b = np.int64(_bits(x)) & 0xFFFFFFFF
    drop = 13 if half else 16
    bias = 0xFFF if half else 0x7FFF
    a = b & _ABS
    r = (b + bias + ((b >> drop) & 1)) >> drop << drop  # nearest, ties to even
    if half:
        f = (abs(x) + np.float32(0.5)) - np.float32(0.5)  # float16's subnormal spacing 2^-24
        sub = (np.int64(_bits(f)) & 0xFFFFFFFF) | (b & _SIGN)
        r = sub if a < _HALF_TINY else r
        r = ((b & _SIGN) | _INF) if (r & _ABS) > _HALF_MAX else r  # past 65504: +-inf
    r = b if a > _INF else r  # NaN stays NaN
    return _float32_from_bits(np.int32(np.uint32(r)))


@njit(cache=True, fastmath=False, nogil=True)
def round_flat(flat, half):  # pragma: no cover - compiled
    """flat ← flat rounded to float16 (``half``) or bfloat16, in place."""
    for i in range(flat.size):
        flat[i] = _round(flat[i], half)


@njit(cache=True, fastmath=False, nogil=True)
def divide_round(e, total, half):  # pragma: no cover - compiled
    """e ← round(e / total), e (R, C), total (R,): softmax's normalisation and rounding."""
    for r in range(e.shape[0]):
        t = total[r]
        row = e[r]
        for j in range(row.size):
            row[j] = _round(np.float32(row[j] / t), half)


@njit(cache=True, fastmath=False, nogil=True)
def grad_round(dp, w, d, half):  # pragma: no cover - compiled
    """dp ← round((dp - d) · w), dp and w (R, C), d (R,): softmax's backward and its
    rounding."""
    for r in range(dp.shape[0]):
        dr = d[r]
        row, wr = dp[r], w[r]
        for j in range(row.size):
            row[j] = _round(np.float32(np.float32(row[j] - dr) * wr[j]), half)
