"""Chunked attention as a mask spec: a query sees only the keys of its own chunk.

Shape legend (the chapter's letters):
    N   query rows          M   key rows

Positions are cut into consecutive chunks of ``size``: 0..size-1, size..2·size-1, and so on.
Query i sits at position i (top_left) or i + M - N (bottom_right: a query after M - N cached
keys), and may attend to key j only when both positions fall in the same chunk. Alone the
table is block-diagonal; added to ``Causal()`` it is Llama 4's chunked local attention, where
each query sees the earlier keys of its own chunk:

>>> from attnlab.core.masks import Causal
>>> (Causal() + Chunks(2)).allowed(4).astype(int)
array([[1, 0, 0, 0],
       [1, 1, 0, 0],
       [0, 0, 1, 0],
       [0, 0, 1, 1]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.core._mask_base import Mask, TileState, check_align

__all__ = ["Chunks"]


@dataclass(frozen=True, repr=False)
class Chunks(Mask):
    """Query i may attend to key j only if both lie in the same chunk of ``size`` positions.

    Args:
        size: the chunk length (>= 1).
        align: "top_left" (default): query i is at position i. "bottom_right": at i + M - N.
    """

    size: int
    align: str = "top_left"

    def __post_init__(self):
        object.__setattr__(self, "size", positive_int("size", self.size))
        check_align(self.align)

    def _offset(self, n: int, m: int) -> int:
        return 0 if self.align == "top_left" else m - n

    def block(self, rows, cols, n, m, lead_ndim):
        off = self._offset(n, m)
        chunk_i = (np.arange(rows[0], rows[1], dtype=np.int64) + off) // self.size  # (rows,)
        chunk_j = np.arange(cols[0], cols[1], dtype=np.int64) // self.size  # (cols,)
        return chunk_i[:, None] == chunk_j[None, :]  # (rows, cols)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        # The tile's query chunks run over [first, last] and its key chunks over [lo, hi]:
        # disjoint ranges block it; one shared chunk on both sides opens it.
        off = self._offset(n, m)
        first, last = (rows[0] + off) // self.size, (rows[1] - 1 + off) // self.size
        lo, hi = cols[0] // self.size, (cols[1] - 1) // self.size
        if last < lo or first > hi:
            return TileState.BLOCKED
        if first == last == lo == hi:
            return TileState.OPEN
        return TileState.PARTIAL

    def why(self, row, lead_ndim) -> str:
        return f"{self!r} (query {row[-1]} sees only its own chunk's keys)"

    def __repr__(self) -> str:
        extra = "" if self.align == "top_left" else f", align={self.align!r}"
        return f"Chunks({self.size}{extra})"
