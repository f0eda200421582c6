"""Numerically safe softmax and logsumexp.

Shape legend: any array ``x``; ``axis`` is the axis that sums to one (the key axis M for attention).
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, FullyMaskedRowError, NonFiniteInputError, ShapeError

__all__ = ["logsumexp", "softmax"]


def _as_float(x: np.ndarray | list, axis) -> np.ndarray:
    try:
        x = np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"expected x to be a rectangular array, but got {exc}") from None
    if x.dtype.kind not in "biuf":
        raise AttnlabError(f"expected x to hold real numbers, but got dtype {x.dtype} instead")
    if (
        isinstance(axis, bool)
        or not isinstance(axis, int | np.integer)
        or not -max(x.ndim, 1) <= axis < max(x.ndim, 1)
    ):
        raise AttnlabError(
            f"expected axis to be an integer from {-max(x.ndim, 1)} to {max(x.ndim, 1) - 1} "
            f"for x.shape={x.shape}, but got {axis!r} instead"
        )
    if x.dtype.kind in "biu":
        return x.astype(np.float64)
    # -inf is a masked-out entry and welcome; NaN and +inf have no weight to give (inf - inf is
    # NaN after the max shift), so refuse them rather than return NaN.
    bad = np.isnan(x) | np.isposinf(x)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteInputError(
            f"expected finite entries or -inf (masked out), but got {x[where]} at index {where} "
            f"({int(bad.sum())} such entries) instead"
        )
    return x


def empty_rows(row_max: np.ndarray) -> np.ndarray:
    """Indices of rows whose maximum is -inf, i.e. rows with no allowed entry."""
    return np.argwhere(np.isneginf(row_max))


def _raise_empty(rows: np.ndarray, what: str = "") -> None:
    listed = tuple(tuple(int(i) for i in r) for r in rows[:8])
    more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
    shown = ", ".join(str(r[0]) if len(r) == 1 else str(r) for r in listed)
    raise FullyMaskedRowError(
        f"every entry of row {shown}{more} is -inf{what}: softmax of such a row is 0/0 = NaN. "
        "Every row needs at least one allowed entry",
        rows=listed,
    )


def softmax(x: np.ndarray | list, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis``: ``exp(x - max) / sum(exp(x - max))``.

    Args:
        x: real array; entries may be -inf (masked out), never NaN or +inf.
        axis: the axis whose entries become weights that sum to one.

    Returns:
        An array of x's shape and float dtype (integers compute in float64).

    Raises:
        FullyMaskedRowError: a row whose every entry is -inf, which would be NaN.
        NonFiniteInputError: a NaN or +inf entry.

    >>> softmax([2.0, 0.0, 0.0]).round(4)
    array([0.787 , 0.1065, 0.1065])
    """
    x = _as_float(x, axis)
    if x.ndim == 0 or x.shape[axis] == 0:
        raise ShapeError(
            f"expected at least one entry along axis {axis}, but got shape {x.shape} instead"
        )
    # Subtracting the row max leaves the result unchanged (it cancels in the ratio) but keeps
    # every exponent <= 0, so exp never overflows, and the largest entry contributes exactly 1,
    # so the sum never underflows to 0 for a row with any finite entry.
    row_max = np.max(x, axis=axis, keepdims=True)
    if np.isneginf(row_max).any():
        _raise_empty(empty_rows(np.squeeze(row_max, axis=axis)))
    e = np.exp(x - row_max)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def logsumexp(x: np.ndarray | list, axis: int = -1) -> np.ndarray:
    """``log(sum(exp(x)))`` along ``axis``, computed without overflow (same max shift as softmax).

    A row of all -inf gives -inf, the log of an empty sum.
    """
    x = _as_float(x, axis)
    if x.ndim == 0 or x.shape[axis] == 0:
        raise ShapeError(
            f"expected at least one entry along axis {axis}, but got shape {x.shape} instead"
        )
    row_max = np.max(x, axis=axis, keepdims=True)
    shift = np.where(np.isneginf(row_max), 0.0, row_max)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True)) + shift
    return np.squeeze(out, axis=axis)
