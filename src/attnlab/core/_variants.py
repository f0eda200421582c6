"""Validation of the modern variants' options: softcap, sinks, fully_masked, a saved lse, wrt.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v, ending in the head axis h
    N    query rows            M    key rows

The dispatchers (``api/attention.py``, ``api/backward.py``) call these once, after
``_validate.validate``, and put softcap and sinks on the validated ``Inputs``; the kernels read
them from there. Errors are worded "expected ..., but got ... instead" and name the argument.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from attnlab.core._validate import Inputs
from attnlab.core.masks import Dense
from attnlab.errors import AttnlabError, ShapeError

__all__ = [
    "FULLY_MASKED",
    "GRADIENTS",
    "check_fully_masked",
    "check_lse",
    "check_wrt",
    "with_variants",
]

#: What a row that allows no key gets: an error naming it, or output 0 (and lse -inf).
FULLY_MASKED = ("raise", "zero")
#: The gradients ``attention_backward`` can return, in any order.
GRADIENTS = ("q", "k", "v", "bias", "sinks")


def with_variants(x: Inputs, softcap=None, sinks=None) -> Inputs:
    """``x`` with a checked softcap and sinks (in the compute dtype) on it."""
    if softcap is None and sinks is None:
        return x
    return replace(x, softcap=_check_softcap(softcap), sinks=_check_sinks(sinks, x))


def _check_softcap(softcap) -> float | None:
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, int | float | np.integer | np.floating):
        raise AttnlabError(f"expected softcap to be a number > 0, but got {softcap!r} instead")
    if not (math.isfinite(softcap) and softcap > 0):
        raise AttnlabError(
            f"expected softcap to be a finite number > 0, but got {softcap!r} instead"
        )
    return float(softcap)


def _check_sinks(sinks, x: Inputs) -> np.ndarray | None:
    if sinks is None:
        return None
    try:
        arr = np.asarray(sinks)
    except ValueError as exc:
        raise ShapeError(f"expected sinks to be a rectangular array, but got {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise AttnlabError(f"expected sinks to hold real numbers, but got dtype {arr.dtype}")
    try:
        fits = np.broadcast_shapes(x.lead, arr.shape) == x.lead
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            "expected sinks of shape (h,) or (B, h), one logit per head on q's head axis (-3), "
            f"broadcastable to the leading axes {x.lead}, but got sinks.shape={arr.shape} instead"
        )
    arr = arr.astype(x.q.dtype)
    if not np.isfinite(arr).all():
        raise AttnlabError(f"expected finite sinks, but got {arr.tolist()!r} instead")
    return arr


def check_fully_masked(fully_masked) -> str:
    if not isinstance(fully_masked, str) or fully_masked not in FULLY_MASKED:
        raise AttnlabError(
            f"expected fully_masked to be one of {FULLY_MASKED}, but got {fully_masked!r} instead"
        )
    return fully_masked


def check_lse(lse, x: Inputs) -> np.ndarray | None:
    """A saved log-sum-exp, (..., N) as ``attention(return_lse=True)`` returns it."""
    if lse is None:
        return None
    arr = np.asarray(lse)
    want = x.lead + (x.n,)
    if arr.dtype.kind not in "biuf" or arr.shape != want:
        raise ShapeError(
            f"expected lse of the shape (..., N) = {want} that attention(return_lse=True) "
            f"returns, but got lse.shape={arr.shape} (dtype {arr.dtype}) instead"
        )
    arr = arr.astype(x.q.dtype, copy=False)
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise AttnlabError("expected lse to hold finite numbers or -inf, but it holds NaN or +inf")
    return arr


def check_wrt(wrt, x: Inputs) -> tuple[str, ...]:
    """The gradients asked for, checked: names of GRADIENTS, and what each one needs."""
    names = (wrt,) if isinstance(wrt, str) else wrt
    try:
        names = tuple(names)
    except TypeError:
        names = None
    if not names or any(not isinstance(w, str) or w not in GRADIENTS for w in names):
        raise AttnlabError(
            f"expected wrt to be a non-empty sequence of {GRADIENTS}, but got {wrt!r} instead"
        )
    if "sinks" in names and x.sinks is None:
        raise AttnlabError("expected sinks= with wrt containing 'sinks', but got sinks=None")
    if "bias" in names and float_bias(x) is None:
        raise AttnlabError(
            "expected a float mask (an additive array or Dense float table) with wrt containing "
            f"'bias', but got mask={x.mask!r}"
        )
    return names


def float_bias(x: Inputs):
    """The shape of the float mask whose gradient wrt='bias' means, or None: the one additive
    table (a float ``Dense``) among the mask's parts."""
    if x.mask is None:
        return None
    tables = [p for p in x.mask.parts() if isinstance(p, Dense) and not p.boolean]
    return tables[0].array.shape if len(tables) == 1 else None
