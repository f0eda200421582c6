"""Masks as composable specs: which query i may attend to which key j.

Shape legend (the chapter's letters):
    N   query rows          M   key rows
    ... leading batch axes of q (for example (B,) or (B, h))

A mask is a rule, not a table: ``Causal()`` knows nothing of N until it is rendered, so one spec
serves any length, and a single tile of the N x M table can be rendered on its own (the blockwise
path never builds the whole table). Masks combine by adding, as additive masks do in §6.4:
``Causal() + Padding([3, 5])`` allows a pair only if both parts allow it.

Rendering:
    mask.allowed(n, m)   -> bool table, True where query i may attend to key j
    mask.additive(n, m)  -> float table, 0 where allowed and -inf where blocked
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.errors import AttnlabError, FullyMaskedRowError, ShapeError

__all__ = [
    "Causal",
    "Combined",
    "Dense",
    "Mask",
    "Padding",
    "SlidingWindow",
    "TileState",
    "as_mask",
]

Span = tuple[int, int]  # a half-open index range [start, stop)


class TileState(enum.Enum):
    """What a mask does to a whole tile of the score table (for every batch element)."""

    BLOCKED = "blocked"  # no pair in the tile is allowed: skip the tile
    OPEN = "open"  # every pair is allowed: nothing to block (a float mask may still add a bias)
    PARTIAL = "partial"  # some pairs allowed, some not


class Mask:
    """Base class of mask specs. Subclasses implement ``_block`` (and may sharpen ``tile_state``)."""

    #: True when the mask is a plain allow/forbid rule; False when it carries float biases.
    boolean: bool = True

    # -- rendering ---------------------------------------------------------------------------
    def _block(self, rows: Span, cols: Span, n: int, m: int, lead_ndim: int) -> np.ndarray:
        """Bool array broadcastable to (..., rows, cols): True where the pair may attend."""
        raise NotImplementedError

    def _bias(self, rows: Span, cols: Span, n: int, m: int, lead_ndim: int) -> np.ndarray:
        """Float array broadcastable to (..., rows, cols), added to the scores (0 / -inf)."""
        allowed = self._block(rows, cols, n, m, lead_ndim)
        return np.where(allowed, 0.0, -np.inf)

    def parts(self) -> tuple[Mask, ...]:
        """The masks whose sum this mask is (itself, for a single mask)."""
        return (self,)

    def allowed(self, n: int, m: int | None = None, *, lead_ndim: int | None = None) -> np.ndarray:
        """The boolean table: True where query i may attend to key j.

        Args:
            n: query count N.  m: key count M (defaults to N).
            lead_ndim: how many leading axes q has; masks that vary by batch element
                (Padding) put their batch axis first among them. Defaults to 1 for them.

        Returns:
            bool array of shape (N, M), or (B, ..., N, M) for a batch-dependent mask.
        """
        n, m, lead = _sizes(n, m, lead_ndim, self)
        return np.broadcast_to(
            self._block((0, n), (0, m), n, m, lead), self._shape(n, m, lead)
        ).copy()

    def additive(
        self, n: int, m: int | None = None, *, lead_ndim: int | None = None, dtype=np.float64
    ) -> np.ndarray:
        """The additive table of §6.4: 0 where allowed, -inf where blocked (shape as ``allowed``)."""
        n, m, lead = _sizes(n, m, lead_ndim, self)
        total = np.zeros(self._shape(n, m, lead), dtype=dtype)
        for part in self.parts():
            total = total + part._bias((0, n), (0, m), n, m, lead).astype(dtype, copy=False)
        return total

    def _shape(self, n: int, m: int, lead_ndim: int) -> tuple[int, ...]:
        # Render one 1 x 1 tile per part, not the table: its leading axes are the mask's own
        # (a Dense mask still checks its row and column sizes against n and m as it slices).
        shapes = [np.shape(p._block((0, 1), (0, 1), n, m, lead_ndim))[:-2] for p in self.parts()]
        return np.broadcast_shapes((n, m), *(s + (1, 1) for s in shapes))

    # -- tiles (used by the blockwise path) -----------------------------------------------------
    def tile_state(
        self, rows: Span, cols: Span, n: int, m: int, lead_ndim: int | None = None
    ) -> TileState:
        """Whether a tile is wholly blocked, wholly open, or mixed, for every batch element.

        Exact for the built-in masks. ``lead_ndim`` (q's leading axes) places the axes of masks
        that vary by batch element; it matters only when such parts are combined.
        """
        if lead_ndim is None:
            lead_ndim = 1 if self.batched else 0
        block = self._block(rows, cols, n, m, lead_ndim)
        if not block.any():
            return TileState.BLOCKED
        return TileState.OPEN if block.all() else TileState.PARTIAL

    #: True for masks whose table differs between batch elements.
    batched: bool = False

    # -- composition ----------------------------------------------------------------------------
    def __add__(self, other: Mask) -> Mask:
        if not isinstance(other, Mask):
            return NotImplemented
        return Combined(self.parts() + other.parts())

    def blame(self, n: int, m: int, lead_ndim: int, row: tuple[int, ...]) -> str:
        """Which part of the mask leaves ``row`` (an index into (..., N)) with no allowed key."""
        i = row[-1]
        culprits = []
        for part in self.parts():
            # Render only that row: the whole table may be far too large (blockwise path).
            block = part._block((i, i + 1), (0, m), n, m, lead_ndim)  # (..., 1, M) or less
            if not tile_at(block, row[:-1]).any():
                culprits.append(part._why(row, lead_ndim))
        if culprits:
            return " and ".join(culprits) + (" (each alone)" if len(culprits) > 1 else "")
        return f"the combination {self!r} (no single part blocks it alone)"

    def _why(self, row: tuple[int, ...], lead_ndim: int) -> str:
        return repr(self)


def tile_at(block: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """The (rows, cols) view of ``block`` (broadcastable to (..., rows, cols)) at leading index
    ``lead``: the block's own leading axes align with the last ones; size-1 axes broadcast."""
    extra = block.ndim - 2
    if extra <= 0:
        return block
    own = lead[len(lead) - extra :]
    return block[tuple(j if s != 1 else 0 for j, s in zip(own, block.shape[:extra], strict=True))]


def _sizes(n: int, m: int | None, lead_ndim: int | None, mask: Mask) -> tuple[int, int, int]:
    m = n if m is None else m
    n, m = positive_int("n", n, ShapeError), positive_int("m", m, ShapeError)
    if lead_ndim is None:
        lead_ndim = 1 if mask.batched else 0
    return n, m, int(lead_ndim)


def _cols(cols: Span) -> np.ndarray:
    return np.arange(cols[0], cols[1])[None, :]  # (1, cols)


_ALIGNS = ("top_left", "bottom_right")


def _check_align(align: str) -> str:
    if align not in _ALIGNS:
        raise AttnlabError(f"expected align to be one of {_ALIGNS}, but got {align!r} instead")
    return align


class _Banded(Mask):
    """Query i may see keys lo(i)..hi(i): hi(i) = i + offset, lo(i) = hi(i) - size + 1."""

    size: float = np.inf
    align: str = "top_left"

    def _offset(self, n: int, m: int) -> int:
        # top_left: query i sees keys 0..i (PyTorch's is_causal). bottom_right: the last query
        # sees the last key, which is what a decoder with a KV cache of M - N old keys needs.
        return 0 if self.align == "top_left" else m - n

    def _block(self, rows, cols, n, m, lead_ndim):
        # Compare a row vector with a column vector: no (rows, cols) integer table is built
        # (for a 512 x 512 tile, 6x faster than subtracting first), only the bool result.
        hi = np.arange(rows[0], rows[1], dtype=np.int64)[:, None] + self._offset(n, m)  # (rows, 1)
        j = np.arange(cols[0], cols[1], dtype=np.int64)[None, :]  # (1, cols)
        if self.size == np.inf:
            return j <= hi  # (rows, cols)
        return (j <= hi) & (j > hi - self.size)  # (rows, cols)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        off = self._offset(n, m)
        hi_first, hi_last = rows[0] + off, rows[1] - 1 + off
        first_col, last_col = cols[0], cols[1] - 1
        if first_col > hi_last or last_col <= hi_first - self.size:
            return TileState.BLOCKED
        if last_col <= hi_first and first_col > hi_last - self.size:
            return TileState.OPEN
        return TileState.PARTIAL


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

    def __init__(self, align: str = "top_left"):
        self.align = _check_align(align)

    def __repr__(self) -> str:
        return "Causal()" if self.align == "top_left" else f"Causal(align={self.align!r})"

    def __eq__(self, other):
        return type(other) is Causal and other.align == self.align

    __hash__ = None


class SlidingWindow(_Banded):
    """Query i sees keys i-size+1..i: a causal band of ``size`` keys (the chapter's fourth kind).

    Args:
        size: how many keys each query sees, itself included (>= 1).
        align: as for ``Causal``.
    """

    def __init__(self, size: int, align: str = "top_left"):
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
            raise AttnlabError(f"expected size to be an integer >= 1, but got {size!r} instead")
        self.size = int(size)
        self.align = _check_align(align)

    def __repr__(self) -> str:
        extra = "" if self.align == "top_left" else f", align={self.align!r}"
        return f"SlidingWindow(size={self.size}{extra})"


class Padding(Mask):
    """Key j is allowed for batch element b iff j < lengths[b] (§6.4's padding mask).

    ``lengths`` index the first leading axis of q, so one spec serves q of shape (B, N, d_k)
    and (B, h, N, d_k) alike.

    Args:
        lengths: one real length per batch element, each >= 0.
    """

    batched = True

    def __init__(self, lengths: Sequence[int] | np.ndarray):
        arr = np.asarray(lengths)
        if arr.ndim != 1 or arr.size == 0:
            raise ShapeError(
                f"expected lengths to be a 1-D list with one entry per batch element, "
                f"but got shape {arr.shape} instead"
            )
        if arr.dtype.kind not in "iu" and not (
            arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
        ):
            raise AttnlabError(f"expected integer lengths, but got {arr.tolist()!r} instead")
        if (arr < 0).any():
            raise AttnlabError(f"expected lengths >= 0, but got {arr.tolist()!r} instead")
        self.lengths = arr.astype(np.int64)

    def __repr__(self) -> str:
        return f"Padding(lengths={self.lengths.tolist()})"

    def _block(self, rows, cols, n, m, lead_ndim):
        if lead_ndim < 1:
            raise ShapeError(
                f"expected q with a batch axis for {self!r}, whose lengths index the first "
                "leading (batch) axis of q, but got q with no leading axis; give q a batch axis "
                f"of size {len(self.lengths)}"
            )
        lengths = self.lengths.reshape((-1,) + (1,) * (lead_ndim - 1) + (1, 1))  # (B, ..., 1, 1)
        return _cols(cols) < lengths  # (B, ..., 1, cols)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        if cols[0] >= self.lengths.max():
            return TileState.BLOCKED
        if cols[1] <= self.lengths.min():
            return TileState.OPEN
        return TileState.PARTIAL

    def _why(self, row, lead_ndim):
        b = row[0] if len(self.lengths) > 1 else 0
        return f"{self!r}: batch element {b} has length {int(self.lengths[b])}"


class Dense(Mask):
    """An explicit table, broadcastable to (..., N, M).

    Args:
        array: bool (True = may attend, as PyTorch's bool ``attn_mask``) or float, added to the
            scaled scores (0 = allowed, -inf = blocked; other finite values act as a bias).
    """

    def __init__(self, array):
        arr = np.asarray(array)
        if arr.ndim < 2:
            raise ShapeError(
                f"expected a mask of shape (..., N, M) with at least 2 axes, "
                f"but got shape {arr.shape} instead"
            )
        if arr.dtype.kind == "b":
            self.boolean = True
        elif arr.dtype.kind == "f":
            if np.isnan(arr).any() or np.isposinf(arr).any():
                raise AttnlabError(
                    "expected an additive mask of finite values and -inf, but it holds NaN or +inf"
                )
            self.boolean = False
        else:
            # Integers are refused, as PyTorch refuses them: is 1 "may attend" or "add 1"?
            raise AttnlabError(
                f"expected a bool or float mask (bool: True = may attend; float: added to the "
                f"scores), but got dtype {arr.dtype} instead; use mask.astype(bool) for 0/1"
            )
        self.array = arr

    def __repr__(self) -> str:
        kind = "bool" if self.boolean else "additive"
        return f"Dense({kind}, shape={self.array.shape})"

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

    def _block(self, rows, cols, n, m, lead_ndim):
        tile = self._slice(rows, cols, n, m)
        return tile if self.boolean else ~np.isneginf(tile)

    def _bias(self, rows, cols, n, m, lead_ndim):
        tile = self._slice(rows, cols, n, m)
        if self.boolean:
            return np.where(tile, 0.0, -np.inf)
        return tile

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        tile = self._slice(rows, cols, n, m)  # a view: no copy of the table
        allowed = tile if self.boolean else ~np.isneginf(tile)
        if not allowed.any():
            return TileState.BLOCKED
        return TileState.OPEN if allowed.all() else TileState.PARTIAL


class Combined(Mask):
    """The sum of several masks: a pair is allowed only if every part allows it."""

    def __init__(self, parts: Sequence[Mask]):
        self._parts = tuple(parts)
        self.boolean = all(p.boolean for p in self._parts)
        self.batched = any(p.batched for p in self._parts)

    def parts(self):
        return self._parts

    def __repr__(self) -> str:
        return " + ".join(repr(p) for p in self._parts)

    def _block(self, rows, cols, n, m, lead_ndim):
        out = self._parts[0]._block(rows, cols, n, m, lead_ndim)
        for p in self._parts[1:]:
            out = out & p._block(rows, cols, n, m, lead_ndim)
        return out

    def _bias(self, rows, cols, n, m, lead_ndim):
        out = self._parts[0]._bias(rows, cols, n, m, lead_ndim)
        for p in self._parts[1:]:
            out = out + p._bias(rows, cols, n, m, lead_ndim)
        return out

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        states = [p.tile_state(rows, cols, n, m, lead_ndim) for p in self._parts]
        if TileState.BLOCKED in states:
            return TileState.BLOCKED
        partial = sum(s is TileState.PARTIAL for s in states)
        if partial == 0:
            return TileState.OPEN
        if partial == 1:  # the other parts allow the whole tile: the sum is that one part
            return TileState.PARTIAL
        # Two partial parts may still leave nothing allowed between them: look at the tile,
        # with each part's leading axes where q's put them (Padding's batch axis first).
        if lead_ndim is None:
            lead_ndim = (
                max(np.ndim(p._block(rows, (cols[0], cols[0] + 1), n, m, 1)) for p in self._parts)
                - 2
            )
        return Mask.tile_state(self, rows, cols, n, m, lead_ndim)


def as_mask(mask) -> Mask | None:
    """Accept None, a Mask, a bool array or an additive float array; return a Mask (or None)."""
    if mask is None or isinstance(mask, Mask):
        return mask
    return Dense(mask)


def check_rows(mask: Mask, n: int, m: int, lead_shape: tuple[int, ...]) -> None:
    """Raise FullyMaskedRowError, naming rows and culprit, if any query row allows no key."""
    lead_ndim = len(lead_shape)
    allowed = np.broadcast_to(mask._block((0, n), (0, m), n, m, lead_ndim), lead_shape + (n, m))
    empty = ~allowed.any(axis=-1)  # (..., N)
    if not empty.any():
        return
    rows = [tuple(int(i) for i in r) for r in np.argwhere(empty)]
    raise_fully_masked(rows, mask.blame(n, m, lead_ndim, rows[0]))


def raise_fully_masked(rows: list[tuple[int, ...]], blocked_by: str) -> None:
    shown = ", ".join(str(r[0]) if len(r) == 1 else str(r) for r in rows[:8])
    more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
    raise FullyMaskedRowError(
        f"query row {shown}{more} may attend to no key (blocked by {blocked_by}); softmax of an "
        "all -inf row is 0/0 = NaN, so every row needs at least one allowed key",
        rows=tuple(rows[:8]),
        blocked_by=blocked_by,
    )
