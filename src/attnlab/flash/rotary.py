"""Rotary position embedding as FlashAttention applies it inside ``flash_attn_with_kvcache``.

Shape legend:
    x (B, S, H, d)   positions (B, S)   cos, sin (S_ro, r / 2): row p is position p's angles

The first r of the d features turn in pairs by position p's angles; the rest pass through.
Interleaved (GPT-J) pairs features (0, 1), (2, 3), ...; not interleaved (GPT-NeoX) pairs
(0, r/2), (1, r/2 + 1), .... A pair (a, b) at angle θ becomes (a cosθ - b sinθ, b cosθ + a sinθ).
"""

from __future__ import annotations

import numpy as np

__all__ = ["apply_rotary"]


def apply_rotary(x, cos, sin, positions, interleaved: bool) -> np.ndarray:
    """x (B, S, H, d) with features 0 .. r - 1 turned by the angles at ``positions`` (B, S)."""
    r = 2 * cos.shape[-1]
    dtype = np.result_type(x, cos, sin, np.float32)
    c = cos[positions][:, :, None, :].astype(dtype)  # (B, S, 1, r/2)
    s = sin[positions][:, :, None, :].astype(dtype)  # (B, S, 1, r/2)
    out = x.astype(dtype, copy=True)  # (B, S, H, d)
    if interleaved:
        a, b = x[..., 0:r:2], x[..., 1:r:2]  # (B, S, H, r/2) each
        out[..., 0:r:2], out[..., 1:r:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., : r // 2], x[..., r // 2 : r]  # (B, S, H, r/2) each
        out[..., : r // 2], out[..., r // 2 : r] = a * c - b * s, b * c + a * s
    return out
