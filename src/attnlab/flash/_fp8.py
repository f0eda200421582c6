"""FP8 inputs with descales, as FlashAttention 3 takes them: what the kernel's numbers mean.

Shape legend (FlashAttention's layout):
    q (B, N, h, d)   k (B, M, h_k, d)   v (B, M, h_k, d_v)   descale () or (B, h_k)

An FP8 kernel stores each tensor in 8 bits (``float8_e4m3fn``: 3 mantissa bits, range ±448;
``float8_e5m2``: 2 mantissa bits, range ±57,344) after dividing it by a scale, and undoes the
scale inside the kernel by multiplying by the descale. FlashAttention 3 takes one descale per
(sequence, key/value head), shape (batch_size, nheads_k); a query head uses the descale of the
key/value head its group reads (query heads g·h/h_k .. (g+1)·h/h_k - 1 share head g).

The tensor the kernel means is x.astype(float64) · descale, which float64 holds exactly (a
float8 value has at most 4 significant bits, a float32 descale 24). attnlab computes the
attention of those exact values; the output comes back in bfloat16, as FlashAttention 3
returns it for FP8 inputs, and the log-sum-exp in float32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from attnlab.errors import AttnlabError, ShapeError

__all__ = ["DESCALES", "FP8", "dequantised", "is_fp8", "read_descale"]

FP8 = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))
DESCALES = ("q_descale", "k_descale", "v_descale")


def is_fp8(dtype) -> bool:
    return np.dtype(dtype) in FP8


def read_descale(name: str, x, batch: int, kv_heads: int) -> np.ndarray:
    """A descale (None: 1) as float64 (B, h_k), or one error naming it."""
    if x is None:
        return np.ones((batch, kv_heads))
    if hasattr(x, "detach"):  # a torch tensor: read through numpy, torch is never imported
        x = x.detach().cpu().float().numpy()
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "iuf" and arr.dtype.name != "bfloat16":
        raise AttnlabError(
            f"expected {name} to be a number or an array of numbers, but got dtype "
            f"{arr.dtype} instead"
        )
    if arr.shape not in ((), (1,), (batch, kv_heads)):
        raise ShapeError(
            f"expected {name} to be a scalar or of shape (batch_size, nheads_k) = "
            f"({batch}, {kv_heads}), but got {name}.shape={arr.shape} instead"
        )
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        raise AttnlabError(
            f"expected {name} finite and >= 0 (it multiplies the stored values), but got "
            f"{float(np.atleast_1d(arr)[np.atleast_1d(bad)][0])!r} instead"
        )
    return np.broadcast_to(arr.reshape(arr.shape if arr.ndim == 2 else ()), (batch, kv_heads))


def dequantised(x: np.ndarray, descale: np.ndarray) -> np.ndarray:
    """x (B, rows, heads, d) in float64 times its descale (B, h_k): each of the ``heads``
    (h_k, or h for q) scaled by the descale of its key/value head."""
    group = x.shape[2] // descale.shape[1]
    per_head = np.repeat(descale, group, axis=1)  # (B, heads)
    return x.astype(np.float64) * per_head[:, None, :, None]  # (B, rows, heads, d)
