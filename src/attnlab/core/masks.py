"""Masks as composable specs: which query i may attend to which key j (§6.4).

Shape legend (the chapter's letters):
    N   query rows          M   key rows
    ... leading batch axes of q (for example (B,) or (B, h))

A mask is a rule, not a table: ``Causal()`` knows nothing of N until it is rendered, so one spec
serves any length, and a single tile of the N x M table can be rendered on its own (the blockwise
path never builds the whole table). Masks combine by adding, as additive masks do in §6.4:
``Causal() + Padding([3, 5])`` allows a pair only if both parts allow it. Every kind is a frozen
dataclass, so equal specs compare equal: ``SlidingWindow(2) == SlidingWindow(2)``.

Rendering:
    mask.allowed(n, m)   -> bool table, True where query i may attend to key j
    mask.additive(n, m)  -> float table, 0 where allowed and -inf where blocked
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from attnlab.core._mask_base import (
    Combined,
    Mask,
    Span,
    TileState,
    check_align,
    raise_fully_masked,
    tile_at,
)
from attnlab.core.alibi import ALiBi
from attnlab.errors import AttnlabError, ShapeError

__all__ = [
    "ALiBi",
    "Causal",
    "Combined",
    "Dense",
    "Mask",
    "Padding",
    "SlidingWindow",
    "TileState",
    "as_mask",
    "raise_fully_masked",
    "tile_at",
]


def _cols(cols: Span) -> np.ndarray:
    return np.arange(cols[0], cols[1])[None, :]  # (1, cols)


class _Banded(Mask):
    """Query i may see keys i + offset - left .. i + offset + right (``_reach``: (left, right),
    inf for a side without a limit); offset is 0 (top_left) or M - N (bottom_right)."""

    align: str = "top_left"

    def _offset(self, n: int, m: int) -> int:
        # top_left: query i sees keys 0..i (PyTorch's is_causal). bottom_right: the last query
        # sees the last key, which is what a decoder with a KV cache of M - N old keys needs.
        return 0 if self.align == "top_left" else m - n

    def _reach(self) -> tuple[float, float]:
        return math.inf, 0  # Causal: every earlier key, no later one

    def block(self, rows, cols, n, m, lead_ndim):
        # Compare a row vector with a column vector: no (rows, cols) integer table is built
        # (for a 512 x 512 tile, 6x faster than subtracting first), only the bool result.
        left, right = self._reach()
        mid = np.arange(rows[0], rows[1], dtype=np.int64)[:, None] + self._offset(n, m)  # (rows, 1)
        j = np.arange(cols[0], cols[1], dtype=np.int64)[None, :]  # (1, cols)
        if right == math.inf:
            ok = np.ones((rows[1] - rows[0], cols[1] - cols[0]), bool)  # (rows, cols)
        else:
            ok = j <= mid + int(right)  # (rows, cols)
        if left != math.inf:
            ok &= j >= mid - int(left)  # (rows, cols)
        return ok

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        # Pair (i, j) is allowed iff j - i lies in [off - left, off + right]; over the tile,
        # j - i runs from cols[0] - (rows[1] - 1) to (cols[1] - 1) - rows[0].
        left, right = self._reach()
        off = self._offset(n, m)
        least, most = cols[0] - (rows[1] - 1), (cols[1] - 1) - rows[0]
        if most < off - left or least > off + right:
            return TileState.BLOCKED
        if least >= off - left and most <= off + right:
            return TileState.OPEN
        return TileState.PARTIAL


@dataclass(frozen=True, repr=False)
class Causal(_Banded):
    """Query i sees keys 0..i only (§6.4): what every text-writing model uses.

    Args:
        align: "top_left" (default, as PyTorch's ``is_causal``): query i sees keys 0..i.
            "bottom_right": the last query sees the last key, for N < M as with a KV cache.

    >>> Causal().additive(3)
    array([[  0., -inf, -inf],
           [  0.,   0., -inf],
           [  0.,   0.,   0.]])
    """

    align: str = "top_left"

    def __post_init__(self):
        check_align(self.align)

    def __repr__(self) -> str:
        return "Causal()" if self.align == "top_left" else f"Causal(align={self.align!r})"


#: The widest window accepted: a window of this many keys already covers any sequence that fits
#: in memory, and larger ones would overflow the kernels' 64-bit index arithmetic.
MAX_WINDOW = 2**62


def _window_side(name: str, value, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise AttnlabError(f"expected {name} to be an integer >= {low}, but got {value!r} instead")
    if value > MAX_WINDOW:
        raise AttnlabError(f"expected {name} to be at most 2**62 keys, but got {value!r} instead")
    return int(value)


@dataclass(frozen=True, repr=False)
class SlidingWindow(_Banded):
    """Query i sees keys i-left..i+right (both ends included); ``SlidingWindow(size)`` is the
    causal band of ``size`` keys, i-size+1..i (the chapter's fourth kind).

    Args:
        size: how many keys each query sees, itself included (1 to 2**62); the same as
            left=size-1, right=0. Give either size or left/right.
        left: how many earlier keys each query sees (>= 0); None: every earlier key.
        right: how many later keys each query sees (>= 0); None: every later key.
            FlashAttention's ``window_size=(left, right)`` with -1 for "no limit" is
            ``SlidingWindow(left=..., right=...)`` with None for -1.
        align: as for ``Causal``: with "bottom_right" the window is centred on key i + M - N.

    >>> SlidingWindow(2) == SlidingWindow(left=1, right=0)
    True
    >>> SlidingWindow(left=1, right=1).allowed(3).astype(int)
    array([[1, 1, 0],
           [1, 1, 1],
           [0, 1, 1]])
    """

    size: int | None = None
    align: str = "top_left"
    left: int | None = field(default=None, kw_only=True)
    right: int | None = field(default=None, kw_only=True)

    def __post_init__(self):
        size = _window_side("size", self.size, 1)
        left, right = _window_side("left", self.left, 0), _window_side("right", self.right, 0)
        if size is not None:
            if left is not None or right is not None:
                raise AttnlabError(
                    f"expected either size or left/right, but got size={size}, left={left}, "
                    f"right={right}"
                )
            left, right = size - 1, 0
        elif right == 0 and left is not None:
            size = left + 1  # the causal band: one spelling, so equal windows compare equal
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)
        check_align(self.align)

    def _reach(self) -> tuple[float, float]:
        return (
            math.inf if self.left is None else self.left,
            math.inf if self.right is None else self.right,
        )

    def __repr__(self) -> str:
        extra = "" if self.align == "top_left" else f", align={self.align!r}"
        if self.size is not None:
            return f"SlidingWindow(size={self.size}{extra})"
        return f"SlidingWindow(left={self.left}, right={self.right}{extra})"


#: The longest padded length accepted (as for SlidingWindow: beyond any real sequence).
MAX_LENGTH = 2**62


@dataclass(frozen=True, repr=False)
class Padding(Mask):
    """Key j is allowed for batch element b iff j < lengths[b] (§6.4's padding mask).

    ``lengths`` index the first leading axis of q, so one spec serves q of shape (B, N, d_k)
    and (B, h, N, d_k) alike.

    Args:
        lengths: one real length per batch element, each a whole number from 0 to 2**62.

    >>> Padding([3, 2]) == Padding((3, 2))
    True
    """

    lengths: tuple[int, ...]
    _array: np.ndarray = field(init=False, compare=False, repr=False)
    batched: ClassVar[bool] = True

    def __post_init__(self):
        try:
            arr = np.asarray(self.lengths)
        except ValueError:
            raise ShapeError(
                f"expected lengths to be a 1-D list of integers, but got {self.lengths!r}"
            ) from None
        if arr.ndim != 1 or arr.size == 0:
            raise ShapeError(
                f"expected lengths to be a 1-D list with one entry per batch element, "
                f"but got shape {arr.shape} instead"
            )
        whole = arr.dtype.kind in "iu" or (
            arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
        )
        if not whole:
            raise AttnlabError(f"expected integer lengths, but got {arr.tolist()!r} instead")
        if (arr < 0).any():
            raise AttnlabError(f"expected lengths >= 0, but got {arr.tolist()!r} instead")
        if (arr > MAX_LENGTH).any():
            raise AttnlabError(f"expected lengths of at most 2**62, but got {arr.tolist()!r}")
        arr = arr.astype(np.int64)
        object.__setattr__(self, "lengths", tuple(int(x) for x in arr))
        object.__setattr__(self, "_array", arr)

    def __repr__(self) -> str:
        return f"Padding(lengths={list(self.lengths)})"

    def block(self, rows, cols, n, m, lead_ndim):
        if lead_ndim < 1:
            raise ShapeError(
                f"expected q with a batch axis for {self!r}, whose lengths index the first "
                "leading (batch) axis of q, but got q with no leading axis; give q a batch axis "
                f"of size {len(self.lengths)}"
            )
        lengths = self._array.reshape((-1,) + (1,) * (lead_ndim - 1) + (1, 1))  # (B, ..., 1, 1)
        return _cols(cols) < lengths  # (B, ..., 1, cols)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        if cols[0] >= max(self.lengths):
            return TileState.BLOCKED
        if cols[1] <= min(self.lengths):
            return TileState.OPEN
        return TileState.PARTIAL

    def why(self, row, lead_ndim):
        b = row[0] if len(self.lengths) > 1 else 0
        return f"{self!r}: batch element {b} has length {self.lengths[b]}"


@dataclass(frozen=True, eq=False, repr=False)
class Dense(Mask):
    """An explicit table, broadcastable to (..., N, M).

    Args:
        array: bool (True = may attend, as PyTorch's bool ``attn_mask``) or float, added to the
            scaled scores (0 = allowed, -inf = blocked; other finite values act as a bias).

    A float mask is read in the dtype attention computes in. There, a value at or below the
    lowest finite number of the mask's own dtype or of the compute dtype blocks its pair exactly
    as -inf does: that is the ``finfo(dtype).min`` idiom of Hugging Face models, and a value
    such as -1e300 on float32 inputs, which float32 cannot hold, means the same. A positive value
    above a quarter of the compute dtype's largest number is refused: added to a score it could
    overflow, and no softmax weight needs it.
    """

    array: np.ndarray

    def __post_init__(self):
        try:
            arr = np.asarray(self.array)
        except ValueError as exc:  # numpy refuses ragged nested lists
            raise ShapeError(
                f"expected the mask to be a rectangular array, but got {exc}"
            ) from None
        if arr.ndim < 2:
            raise ShapeError(
                f"expected a mask of shape (..., N, M) with at least 2 axes, "
                f"but got shape {arr.shape} instead"
            )
        if arr.size == 0:
            raise ShapeError(f"expected a mask with no empty axis, but got shape {arr.shape}")
        if arr.dtype.kind == "f":
            if np.isnan(arr).any() or np.isposinf(arr).any():
                raise AttnlabError(
                    "expected an additive mask of finite values and -inf, but it holds NaN or +inf"
                )
        elif arr.dtype.kind != "b":
            # Integers are refused, as PyTorch refuses them: is 1 "may attend" or "add 1"?
            raise AttnlabError(
                f"expected a bool or float mask (bool: True = may attend; float: added to the "
                f"scores), but got dtype {arr.dtype} instead; use mask.astype(bool) for 0/1"
            )
        object.__setattr__(self, "array", arr)

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.array.dtype.kind == "b"

    def __eq__(self, other):
        return (
            type(other) is Dense
            and other.array.dtype == self.array.dtype
            and other.array.shape == self.array.shape
            and bool(np.array_equal(other.array, self.array))
        )

    __hash__ = None  # an array is not hashable

    def __repr__(self) -> str:
        kind = "bool" if self.boolean else "additive"
        return f"Dense({kind}, shape={self.array.shape})"

    def for_dtype(self, dtype) -> Dense:
        """The table as kernels computing in ``dtype`` read it (see the class docstring)."""
        a, dtype = self.array, np.dtype(dtype)
        if self.boolean:
            return self
        big = np.finfo(dtype).max / 4
        if a.max() > big:
            where = tuple(int(i) for i in np.argwhere(a > big)[0])
            raise AttnlabError(
                f"expected additive mask values of at most {big:.3g} (a quarter of the largest "
                f"{dtype} number), but got {a[where]!r} at index {where} of {self!r}; use 0 to "
                "allow a pair and -inf to block it"
            )
        floor = max(np.finfo(a.dtype).min, np.finfo(dtype).min)  # at or below: blocked
        if a.dtype == dtype and not (a.min() <= floor and np.any((a <= floor) & (a > -np.inf))):
            return self
        with np.errstate(over="ignore"):  # what overflows is at or below the floor: blocked
            out = a.astype(dtype)
        out[a <= floor] = -np.inf
        return Dense(out)

    def _check(self, n: int, m: int) -> None:
        rows, cols = self.array.shape[-2:]
        if rows not in (1, n) or cols not in (1, m):
            raise ShapeError(
                f"expected a mask broadcastable to the score table (N, M) = ({n}, {m}), "
                f"but got shape {self.array.shape} instead"
            )

    def _slice(self, rows: Span, cols: Span, n: int, m: int) -> np.ndarray:
        self._check(n, m)
        a = self.array
        r = slice(None) if a.shape[-2] == 1 else slice(*rows)
        c = slice(None) if a.shape[-1] == 1 else slice(*cols)
        return a[..., r, c]

    def block(self, rows, cols, n, m, lead_ndim):
        tile = self._slice(rows, cols, n, m)
        return tile if self.boolean else ~np.isneginf(tile)

    def bias(self, rows, cols, n, m, lead_ndim):
        tile = self._slice(rows, cols, n, m)
        if self.boolean:
            return np.where(tile, 0.0, -np.inf)
        return tile

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        allowed = self.block(rows, cols, n, m, lead_ndim)  # a view: no copy of the table
        if not allowed.any():
            return TileState.BLOCKED
        return TileState.OPEN if allowed.all() else TileState.PARTIAL


def as_mask(mask) -> Mask | None:
    """Accept None, a Mask, a bool array or an additive float array; return a Mask (or None)."""
    if mask is None or isinstance(mask, Mask):
        return mask
    return Dense(mask)
