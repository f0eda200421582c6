"""Rotary position embedding as FlashAttention applies it inside ``flash_attn_with_kvcache``.

Shape legend:
    x (B, S, H, d)   positions (B, S)   cos, sin (S_ro, r / 2): row p is position p's angles

The first r of the d features turn in pairs by position p's angles; the rest pass through.
Interleaved (GPT-J) pairs features (0, 1), (2, 3), ...; not interleaved (GPT-NeoX) pairs
(0, r/2), (1, r/2 + 1), .... A pair (a, b) at angle θ becomes (a cosθ - b sinθ, b cosθ + a sinθ).
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash._arrays import BFLOAT16, real_array

__all__ = ["apply_rotary"]


def apply_rotary(x, cos, sin, positions, interleaved: bool) -> np.ndarray:
    """x (B, S, H, d) with features 0 .. r - 1 turned by the angles at ``positions`` (B, S).

    Raises ShapeError for a wrong rank or shape, and AttnlabError for a position outside
    0 .. S_ro - 1 (the rows of the tables), naming the argument.
    """
    x, cos, sin, positions = _checked(x, cos, sin, positions, interleaved)
    r = 2 * cos.shape[-1]
    dtype = np.result_type(np.float32, *(a.dtype for a in (x, cos, sin) if a.dtype != BFLOAT16))
    c = cos[positions][:, :, None, :].astype(dtype)  # (B, S, 1, r/2)
    s = sin[positions][:, :, None, :].astype(dtype)  # (B, S, 1, r/2)
    out = x.astype(dtype, copy=True)  # (B, S, H, d)
    if interleaved:
        a, b = out[..., 0:r:2].copy(), out[..., 1:r:2].copy()  # (B, S, H, r/2) each
        out[..., 0:r:2], out[..., 1:r:2] = a * c - b * s, b * c + a * s
    else:
        a, b = out[..., : r // 2].copy(), out[..., r // 2 : r].copy()  # (B, S, H, r/2) each
        out[..., : r // 2], out[..., r // 2 : r] = a * c - b * s, b * c + a * s
    return out


def _checked(x, cos, sin, positions, interleaved):
    """The arguments as arrays, every shape and position checked before any work."""
    x = real_array("x", x, (4,), "(batch_size, seqlen, nheads, headdim)")
    cos = real_array("cos", cos, (2,), "(seqlen_ro, rotary_dim / 2)")
    sin = real_array("sin", sin, (2,), "(seqlen_ro, rotary_dim / 2)")
    if cos.shape != sin.shape or not 0 < 2 * cos.shape[1] <= x.shape[-1]:
        raise ShapeError(
            f"expected cos and sin of one shape (S_ro, r/2) with 0 < r <= headdim {x.shape[-1]}, "
            f"but got cos.shape={cos.shape} and sin.shape={sin.shape} instead"
        )
    if not isinstance(interleaved, bool | np.bool_):
        raise AttnlabError(f"expected interleaved to be True or False, but got {interleaved!r}")
    pos = real_array("positions", positions, (2,), f"(batch_size, seqlen) = {x.shape[:2]}")
    if pos.dtype.kind not in "iu" or pos.shape != x.shape[:2]:
        raise ShapeError(
            f"expected positions to be integers of shape {x.shape[:2]} (x's batch and seqlen), "
            f"but got dtype {pos.dtype} and positions.shape={pos.shape} instead"
        )
    if pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
        bad = pos.min() if pos.min() < 0 else pos.max()
        raise AttnlabError(
            f"expected positions from 0 to {cos.shape[0] - 1} (the rows of cos and sin), but got "
            f"position {int(bad)} instead"
        )
    return x, cos, sin, pos
