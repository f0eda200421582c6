"""The base of attnlab's mask specs: the rendering protocol, tile states, and sums of masks.

Shape legend (the chapter's letters):
    N   query rows          M   key rows
    ... leading batch axes of q (for example (B,) or (B, h))

The kinds (``Causal``, ``SlidingWindow``, ``Padding``, ``Dense``) live in ``core/masks.py``;
this module holds what they share, so that masks.py stays one concept: the kinds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.errors import AttnlabError, FullyMaskedRowError, ShapeError

__all__ = [
    "Combined",
    "Mask",
    "Span",
    "TileState",
    "check_align",
    "raise_fully_masked",
    "tile_at",
]

Span = tuple[int, int]  # a half-open index range [start, stop)


class TileState(enum.Enum):
    """What a mask does to a whole tile of the score table (for every batch element)."""

    BLOCKED = "blocked"  # no pair in the tile is allowed: skip the tile
    OPEN = "open"  # every pair is allowed: nothing to block (a float mask may still add a bias)
    PARTIAL = "partial"  # some pairs allowed, some not


class Mask:
    """Base class of mask specs. A subclass implements ``block`` (and may sharpen ``tile_state``
    and ``bias``); the rest of attnlab renders masks only through these public methods:

        block(rows, cols, n, m, lead_ndim)  -> bool, broadcastable to (..., rows, cols)
        bias(rows, cols, n, m, lead_ndim)   -> float, broadcastable to (..., rows, cols)
        table_shape(n, m, lead_ndim)        -> the shape the mask broadcasts to
        tile_state(rows, cols, n, m, ...)   -> TileState of a whole tile
        parts()                             -> the masks whose sum this one is

    The built-in masks are frozen dataclasses: two specs are equal when their fields are.
    """

    #: True when the mask is a plain allow/forbid rule; False when it carries float biases.
    boolean: ClassVar[bool] = True
    #: True for masks whose table differs between batch elements.
    batched: ClassVar[bool] = False

    # -- rendering ---------------------------------------------------------------------------
    def block(self, rows: Span, cols: Span, n: int, m: int, lead_ndim: int) -> np.ndarray:
        """Bool array broadcastable to (..., rows, cols): True where the pair may attend."""
        raise NotImplementedError

    def bias(self, rows: Span, cols: Span, n: int, m: int, lead_ndim: int) -> np.ndarray:
        """Float array broadcastable to (..., rows, cols), added to the scores (0 / -inf)."""
        allowed = self.block(rows, cols, n, m, lead_ndim)
        return np.where(allowed, 0.0, -np.inf)

    def parts(self) -> tuple[Mask, ...]:
        """The masks whose sum this mask is (itself, for a single mask)."""
        return (self,)

    def for_dtype(self, dtype) -> Mask:
        """This mask as the kernels computing in ``dtype`` should see it (itself, unless it
        holds float values that must first be read in that dtype: see ``Dense``)."""
        return self

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
            self.block((0, n), (0, m), n, m, lead), self.table_shape(n, m, lead)
        ).copy()

    def additive(
        self, n: int, m: int | None = None, *, lead_ndim: int | None = None, dtype=np.float64
    ) -> np.ndarray:
        """The additive table of §6.4: 0 where allowed, -inf where blocked (shape as ``allowed``)."""
        n, m, lead = _sizes(n, m, lead_ndim, self)
        total = np.zeros(self.table_shape(n, m, lead), dtype=dtype)
        for part in self.parts():
            total = total + part.bias((0, n), (0, m), n, m, lead).astype(dtype, copy=False)
        return total

    def table_shape(self, n: int, m: int, lead_ndim: int) -> tuple[int, ...]:
        """The shape the rendered table broadcasts to: (N, M) with the mask's own lead axes."""
        # Render one 1 x 1 tile per part, not the table: its leading axes are the mask's own
        # (a Dense mask still checks its row and column sizes against n and m as it slices).
        shapes = [np.shape(p.block((0, 1), (0, 1), n, m, lead_ndim))[:-2] for p in self.parts()]
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
        block = self.block(rows, cols, n, m, lead_ndim)
        if not block.any():
            return TileState.BLOCKED
        return TileState.OPEN if block.all() else TileState.PARTIAL

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
            block = part.block((i, i + 1), (0, m), n, m, lead_ndim)  # (..., 1, M) or less
            if not tile_at(block, row[:-1]).any():
                culprits.append(part.why(row, lead_ndim))
        if culprits:
            return " and ".join(culprits) + (" (each alone)" if len(culprits) > 1 else "")
        return f"the combination {self!r} (no single part blocks it alone)"

    def why(self, row: tuple[int, ...], lead_ndim: int) -> str:
        """Words for what this part does to ``row``, for the fully-masked-row error."""
        return repr(self)


_ALIGNS = ("top_left", "bottom_right")


def check_align(align) -> str:
    if not isinstance(align, str) or align not in _ALIGNS:
        raise AttnlabError(f"expected align to be one of {_ALIGNS}, but got {align!r} instead")
    return align


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


@dataclass(frozen=True, eq=False, repr=False)
class Combined(Mask):
    """The sum of several masks: a pair is allowed only if every part allows it (§6.4)."""

    members: tuple[Mask, ...]

    def __post_init__(self):
        object.__setattr__(self, "members", tuple(self.members))

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return all(p.boolean for p in self.members)

    @property
    def batched(self) -> bool:  # type: ignore[override]
        return any(p.batched for p in self.members)

    def parts(self):
        return self.members

    def __eq__(self, other):
        return type(other) is Combined and other.members == self.members

    __hash__ = None  # a Dense part may hold an array

    def for_dtype(self, dtype) -> Mask:
        return Combined(tuple(p.for_dtype(dtype) for p in self.members))

    def __repr__(self) -> str:
        return " + ".join(repr(p) for p in self.members)

    def block(self, rows, cols, n, m, lead_ndim):
        out = self.members[0].block(rows, cols, n, m, lead_ndim)
        for p in self.members[1:]:
            out = out & p.block(rows, cols, n, m, lead_ndim)
        return out

    def bias(self, rows, cols, n, m, lead_ndim):
        out = self.members[0].bias(rows, cols, n, m, lead_ndim)
        for p in self.members[1:]:
            out = out + p.bias(rows, cols, n, m, lead_ndim)
        return out

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        states = [p.tile_state(rows, cols, n, m, lead_ndim) for p in self.members]
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
                max(np.ndim(p.block(rows, (cols[0], cols[0] + 1), n, m, 1)) for p in self.members)
                - 2
            )
        return Mask.tile_state(self, rows, cols, n, m, lead_ndim)


def raise_fully_masked(rows: list[tuple[int, ...]], blocked_by: str) -> None:
    shown = ", ".join(str(r[0]) if len(r) == 1 else str(r) for r in rows[:8])
    more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
    raise FullyMaskedRowError(
        f"query row {shown}{more} may attend to no key (blocked by {blocked_by}); softmax of an "
        "all -inf row is 0/0 = NaN, so every row needs at least one allowed key",
        rows=tuple(rows[:8]),
        blocked_by=blocked_by,
    )
