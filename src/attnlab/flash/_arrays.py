"""The arrays FlashAttention's callers hand over, as numpy arrays of one checked dtype.

Shape legend: any; each caller names the layout it wants (e.g. "(batch_size, seqlen, nheads,
headdim)") and the axis count it requires.

Callers pass numpy arrays, ``ml_dtypes.bfloat16`` arrays, or torch tensors (FlashAttention's
own tests pass those). attnlab never imports torch: a tensor is known by its ``detach`` method.
A tensor that requires grad is read detached (nothing here is differentiated by autograd); one
on another device is copied to the CPU; a bfloat16 or float8 tensor, which numpy cannot take,
is read through its bits, so its memory stays shared (the KV cache writes into it).

Precision, as FlashAttention has it: q, k, v (and dout) share one dtype; float16 and bfloat16
are computed in float64 and rounded once at the end into that dtype (their log-sum-exp comes
back in float32, as FlashAttention's); float32 and float64 stay themselves; integers compute
and return in float64; float8 (FlashAttention 3's FP8, read with its descales) computes in
float64 and returns bfloat16.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from attnlab.errors import AttnlabError, NonFiniteResultError, ShapeError

__all__ = [
    "BFLOAT16",
    "Precision",
    "array_of_shape",
    "as_numpy",
    "backward_arrays",
    "one_dtype",
    "real_array",
    "scalar_int",
    "unstack",
    "whole_numbers",
]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_HALF = (np.dtype(np.float16), BFLOAT16)
# FlashAttention 3's FP8 inputs (see _fp8.py): taken only where a call reads their descales.
_FP8 = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))


def as_numpy(name: str, x, *, shared: bool = False):
    """``x`` as something ``np.asarray`` takes without error; a torch tensor as a CPU array.

    ``shared``: the result must be ``x``'s own memory (a cache written in place), so a tensor
    that requires grad or lives on another device is refused instead of copied.
    """
    if isinstance(x, np.ndarray) or not hasattr(x, "detach"):
        return x
    device = getattr(getattr(x, "device", None), "type", "cpu")
    if shared and (getattr(x, "requires_grad", False) or device != "cpu"):
        raise AttnlabError(
            f"expected {name} to be a CPU tensor that does not require grad (its new rows are "
            f"written into it in place, outside autograd), but got one on {device} with "
            f"requires_grad={getattr(x, 'requires_grad', False)}; pass {name}.detach().cpu() "
            "and copy it back"
        )
    t = x.detach()
    if device != "cpu":
        t = t.cpu()
    kind = _TORCH_BITS.get(str(getattr(t, "dtype", "")))
    if kind is not None:  # a dtype numpy cannot take: read through its bits
        return _bits_of(t, kind)
    try:
        return np.asarray(t)  # a CPU tensor: numpy shares its memory
    except (RuntimeError, TypeError, ValueError) as err:
        raise AttnlabError(f"expected {name} to convert to a numpy array, but: {err}") from None


# torch dtypes numpy has no name for, read as ml_dtypes arrays over the same bytes.
_TORCH_BITS = {
    "torch.bfloat16": BFLOAT16,
    "torch.float8_e4m3fn": _FP8[0],
    "torch.float8_e5m2": _FP8[1],
}


def _bits_of(t, dtype: np.dtype) -> np.ndarray:
    """A CPU tensor's memory as an ml_dtypes array of ``dtype`` (shared, not copied)."""
    shape = tuple(int(s) for s in t.shape)
    if 0 in shape:
        return np.zeros(shape, dtype)
    size = dtype.itemsize
    # numpy's array interface over the tensor's words; the array's base keeps t alive.
    bits = SimpleNamespace(
        tensor=t,
        __array_interface__={
            "version": 3,
            "shape": shape,
            "typestr": f"=u{size}",
            "data": (t.data_ptr(), False),
            "strides": tuple(size * int(s) for s in t.stride()),
        },
    )
    return np.asarray(bits).view(dtype)


def real_array(
    name: str, x, ndims: tuple[int, ...], layout: str, *, shared=False, fp8=False
) -> np.ndarray:
    """``x`` as an array of real numbers with one of ``ndims`` axes, or a ShapeError.
    ``fp8``: float8 arrays are welcome (the call reads their descales)."""
    x = as_numpy(name, x, shared=shared)  # its own AttnlabError (a ValueError) goes on
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError):
        raise ShapeError(f"expected {name} to be a rectangular array of numbers") from None
    if arr.dtype in _FP8 and not fp8:
        raise AttnlabError(
            f"expected {name} in a dtype of 16 bits or more, but got {arr.dtype} instead: "
            "float8 inputs need their descales, which flash_attn_func takes (q_descale, "
            "k_descale, v_descale)"
        )
    if arr.dtype.kind not in "iuf" and arr.dtype not in (BFLOAT16, *_FP8):
        raise AttnlabError(f"expected {name} to hold real numbers, but got dtype {arr.dtype}")
    if arr.ndim not in ndims:
        raise ShapeError(
            f"expected {name} of shape {layout}, but got {name}.shape={arr.shape} instead"
        )
    return arr


def one_dtype(*named: tuple[str, np.ndarray | None]) -> np.dtype:
    """The dtype every given array shares (None entries skipped), or an error naming the one
    that differs from the first: FlashAttention takes q, k, v in one dtype."""
    first_name, first = named[0]
    for name, arr in named[1:]:
        if arr is not None and arr.dtype != first.dtype:
            raise AttnlabError(
                f"expected {name} of {first_name}'s dtype {first.dtype} (FlashAttention takes "
                f"one dtype for all its arrays), but got {name}.dtype={arr.dtype} instead"
            )
    return first.dtype


@dataclass(frozen=True)
class Precision:
    """What a call computes in and what it returns in, from its inputs' one dtype."""

    compute: np.dtype  # float32 or float64
    out: np.dtype  # the output's (and gradients') dtype: q's, or float64 for integers
    lse: np.dtype  # the log-sum-exp's: float32 for half types, else the output's

    @classmethod
    def of(cls, dtype: np.dtype) -> Precision:
        f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
        if dtype in _HALF:
            return cls(compute=f64, out=dtype, lse=f32)
        if dtype in _FP8:  # FlashAttention 3 returns an FP8 call's output in bfloat16
            return cls(compute=f64, out=BFLOAT16, lse=f32)
        if dtype in (f32, f64):
            return cls(compute=dtype, out=dtype, lse=dtype)
        return cls(compute=f64, out=f64, lse=f64)  # integers, longdouble

    def rounded(self, name: str, x: np.ndarray, dtype: np.dtype | None = None) -> np.ndarray:
        """``x`` (computed exactly) rounded once into the returned dtype; a value past that
        dtype's range raises NonFiniteResultError naming ``name`` instead of becoming inf."""
        dtype = self.out if dtype is None else dtype
        with np.errstate(over="ignore"):
            got = x.astype(dtype, copy=False)
        nan = np.isnan(x)
        if nan.any():  # never returned silently (q·kᵀ past the range before a tiny scale)
            where = tuple(int(i) for i in np.argwhere(nan)[0])
            raise NonFiniteResultError(
                f"expected a finite {name}, but the computation gave NaN at index {where} "
                "from finite inputs (q·kᵀ may pass the dtype's range before softmax_scale "
                "shrinks it); rescale q or k",
                stage="forward" if name in ("out", "softmax_lse", "probs") else "backward",
                array=name,
            )
        bad = ~np.isfinite(got) & np.isfinite(x)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise NonFiniteResultError(
                f"expected {name} to fit {dtype}, but its entry {float(x[where]):.6g} at index "
                f"{where} is past the largest finite {dtype} ({_largest(dtype):.6g}); "
                "pass the inputs in a wider dtype",
                stage="forward" if name in ("out", "softmax_lse", "probs") else "backward",
                array=name,
            )
        return got


def _largest(dtype: np.dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max if dtype == BFLOAT16 else np.finfo(dtype).max)


def array_of_shape(name: str, x, want: tuple[int, ...], what: str = "shape") -> np.ndarray:
    """``x`` as a real array of exactly the shape ``want`` (dout, softmax_lse), or a ShapeError."""
    arr = real_array(name, x, (len(want),), f"{want}")
    if arr.shape != want:
        raise ShapeError(
            f"expected {name} of {what} {want}, but got {name}.shape={arr.shape} instead"
        )
    return arr


def backward_arrays(dout, softmax_lse, out_shape: tuple, lse_shape: tuple):
    """A backward call's ``dout`` (of out's shape) and ``softmax_lse`` (None: recomputed), checked."""
    dout = array_of_shape("dout", dout, out_shape, "out's shape")
    if softmax_lse is None:
        return dout, None
    return dout, array_of_shape("softmax_lse", softmax_lse, lse_shape)


def unstack(name: str, x, count: int, layout: str, legend: str) -> tuple[np.ndarray, ...]:
    """The ``count`` arrays a packed qkv or kv stacks on its axis -3, as views.

    FlashAttention stacks q, k, v just before the heads axis in every layout, (..., 3, h, d),
    so the fixed-length (5 axes) and variable-length (4 axes) forms unpack the same way.
    ``legend`` is the short shape, e.g. "(B, N, 3, h, d)"; its axis count is the one required.
    """
    arr = real_array(name, x, (legend.count(",") + 1,), layout)
    if arr.shape[-3] != count:
        raise ShapeError(f"expected {name} of shape {legend}, but got {name}.shape={arr.shape}")
    return tuple(arr[..., i, :, :] for i in range(count))  # each (..., h, d)


def whole_numbers(name: str, x, layout: str) -> np.ndarray:
    """A 1-D array of integers (cu_seqlens, cache_seqlens, indices), as int64."""
    x = as_numpy(name, x)
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError):
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise AttnlabError(
            f"expected {name} to be a 1-D integer array of shape {layout}, but got "
            f"dtype {arr.dtype} and shape {arr.shape} instead"
        )
    return arr.astype(np.int64)


def scalar_int(x) -> int | None:
    """``x`` as a Python int when it is one integer: int, numpy integer, or a 0-d integer
    array or tensor (not a bool); otherwise None."""
    if isinstance(x, bool | np.bool_) or "bool" in str(getattr(x, "dtype", "")):
        return None
    if getattr(x, "ndim", 0) != 0:
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None
