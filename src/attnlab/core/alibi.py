"""ALiBi, attention with linear biases (Press et al., 2022): a mask that blocks nothing and adds
-slope · distance to every score, one slope per head.

Shape legend (the chapter's letters):
    N   query rows          M   key rows          h   heads
    ... leading batch axes of q, ending in the head axis (for example (B, h))

A mask spec like the others in ``core/masks.py``: its biases are rendered one tile at a time,
so the blockwise path never builds the N x M table, and every tile is OPEN (nothing skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attnlab.core._mask_base import Mask, TileState, check_align
from attnlab.errors import AttnlabError, ShapeError

__all__ = ["ALiBi"]


@dataclass(frozen=True, eq=False, repr=False)
class ALiBi(Mask):
    """ALiBi's linear biases (Press et al., 2022): -slope · |i + offset - j| on every score,
    one slope per head; nothing is blocked.

    Args:
        slopes: one slope per head, shape (h,) for q of shape (..., h, N, d_k), or (B, h) for
            one slope per batch element and head: they sit on the head axis, q's axis -3.
        align: "top_left" (offset 0) or "bottom_right" (offset M - N: the last query is at
            distance 0 from the last key), as FlashAttention's causal ALiBi.

    >>> ALiBi([0.5]).additive(3, lead_ndim=1)
    array([[[ 0. , -0.5, -1. ],
            [-0.5,  0. , -0.5],
            [-1. , -0.5,  0. ]]])
    """

    slopes: np.ndarray
    align: str = "top_left"
    boolean: ClassVar[bool] = False

    def __post_init__(self):
        try:
            arr = np.asarray(self.slopes, dtype=np.float64)
        except (TypeError, ValueError):
            raise AttnlabError(
                f"expected slopes to be an array of real numbers, but got {self.slopes!r}"
            ) from None
        if arr.ndim not in (1, 2) or arr.size == 0:
            raise ShapeError(
                "expected slopes of shape (h,) or (B, h), one per head, but got shape "
                f"{arr.shape} instead"
            )
        if not np.isfinite(arr).all():
            raise AttnlabError(f"expected finite slopes, but got {arr.tolist()!r} instead")
        object.__setattr__(self, "slopes", arr)
        check_align(self.align)

    def __eq__(self, other):
        return (
            type(other) is ALiBi
            and other.align == self.align
            and other.slopes.shape == self.slopes.shape
            and bool(np.array_equal(other.slopes, self.slopes))
        )

    __hash__ = None  # an array is not hashable

    def __repr__(self) -> str:
        extra = "" if self.align == "top_left" else f", align={self.align!r}"
        return f"ALiBi(slopes of shape {self.slopes.shape}{extra})"

    def block(self, rows, cols, n, m, lead_ndim):
        return np.ones(self.slopes.shape + (1, 1), bool)  # (..., h, 1, 1): all allowed

    def bias(self, rows, cols, n, m, lead_ndim):
        off = 0 if self.align == "top_left" else m - n
        i = np.arange(rows[0], rows[1], dtype=np.float64)[:, None] + off  # (rows, 1)
        dist = np.abs(i - np.arange(cols[0], cols[1], dtype=np.float64)[None, :])  # (rows, cols)
        return -self.slopes[..., None, None] * dist  # (..., h, rows, cols)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        return TileState.OPEN
