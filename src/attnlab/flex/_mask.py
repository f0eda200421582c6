"""A BlockMask and a bias score_mod as attnlab mask specs, so ``attention`` and
``attention_backward`` (dense or blockwise) compute flex attention through the mask protocol.

Shape legend:
    B   batch           Hkv key/value heads     G   query heads per key/value head (H = Hkv · G)
    L   query rows      S   key rows            r, c   a tile's rows and keys
    attention's leading axes are (B, Hkv, G): query head h is (h // G, h % G), so key/value
    heads broadcast over G and grouped-query attention needs no copy of k or v.

``FlexMask`` answers ``tile_state`` from the block mask's tiles (a skipped tile is never
computed), renders a tile by calling the mask_mod only where some tile is partial, and adds
ALiBi's or a relative bias's table one tile at a time.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from attnlab.core._mask_base import Mask, TileState
from attnlab.flex._block_mask import EMPTY, FULL, PARTIAL, BlockMask
from attnlab.flex._calls import call_mask_mod, indices

__all__ = ["FlexMask", "allowed_pairs"]


def allowed_pairs(bm: BlockMask, kinds: np.ndarray, args: tuple, shape: tuple, keys: np.ndarray):
    """Bool (B, H, r, K) for one row of tiles (``kinds`` (B|1, H|1, nk), keys (K,) any of the
    row's keys): FULL tiles allowed, EMPTY ones blocked, and the mask_mod called once, on the
    keys of the tiles partial somewhere in the row only."""
    kind = kinds[:, :, None, keys // bm.BLOCK_SIZE[1]]  # (B|1, H|1, 1, K)
    partial = kind == PARTIAL
    if not partial.any():
        return kind == FULL
    cols = np.flatnonzero(partial.any(axis=(0, 1, 2)))
    sub = (args[0], args[1], args[2], args[3][..., cols])
    rule = call_mask_mod(bm.mask_mod, sub, shape[:3] + (len(cols),))  # (B, H, r, K')
    allowed = np.broadcast_to(kind == FULL, shape).copy()
    allowed[..., cols] |= rule & partial[..., cols]
    return allowed


def _blocks(span: tuple[int, int], size: int) -> slice:
    return slice(span[0] // size, (span[1] - 1) // size + 1)


class FlexMask(Mask):
    """The block mask of a flex call, and its bias score_mod if any (``flex.alibi``,
    ``flex.relative_bias``), as one mask spec over attention's (B, Hkv, G) leading axes.

    One spec, not a sum of two: a sum's shape is found by rendering a 1 x 1 tile of each part,
    which would call the mask_mod at validation, where its errors would be mistaken for shapes.
    """

    batched: ClassVar[bool] = True

    def __init__(self, block_mask: BlockMask, bias_mod, batch: int, kv_heads: int, group: int):
        self.block_mask, self.bias_mod = block_mask, bias_mod
        self.batch, self.kv_heads, self.group = batch, kv_heads, group

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.bias_mod is None

    def __repr__(self) -> str:
        name = getattr(self.block_mask.mask_mod, "__name__", repr(self.block_mask.mask_mod))
        bias = "" if self.bias_mod is None else f" and score_mod {self.bias_mod!r}"
        return f"block_mask (mask_mod {name}){bias}"

    def table_shape(self, n, m, lead_ndim):
        return (self.batch, self.kv_heads, self.group, n, m)

    def _kinds(self, rows, cols) -> np.ndarray:
        bq, bk = self.block_mask.BLOCK_SIZE
        return self.block_mask.kinds[:, :, _blocks(rows, bq), _blocks(cols, bk)]

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        kinds = self._kinds(rows, cols)  # (B or 1, H or 1, tiles down, tiles across)
        if (kinds == EMPTY).all():
            return TileState.BLOCKED
        return TileState.OPEN if (kinds == FULL).all() else TileState.PARTIAL

    def block(self, rows, cols, n, m, lead_ndim):
        kinds = self._kinds(rows, cols)
        if (kinds == FULL).all() or (kinds == EMPTY).all():
            return np.full((1,) * 5, bool((kinds == FULL).all()))  # (1, 1, 1, 1, 1)
        heads = self.kv_heads * self.group
        bm, (bq, _) = self.block_mask, self.block_mask.BLOCK_SIZE
        keys = np.arange(*cols)
        out = np.empty((self.batch, heads, rows[1] - rows[0], len(keys)), bool)  # (B, H, r, c)
        # One row of the block mask's tiles at a time, so mask_mod sees partial tiles only.
        for i in range(rows[0] // bq, (rows[1] - 1) // bq + 1):
            r = np.arange(max(rows[0], i * bq), min(rows[1], (i + 1) * bq))
            args = indices(self.batch, heads, r, keys)
            part = allowed_pairs(
                bm, bm.kinds[:, :, i], args, (self.batch, heads, len(r), len(keys)), keys
            )
            out[:, :, r - rows[0]] = part
        return out.reshape(self.batch, self.kv_heads, self.group, *out.shape[2:])

    def bias(self, rows, cols, n, m, lead_ndim):
        """The bias mod's table on the tile, -inf where the block mask blocks the pair."""
        heads = self.kv_heads * self.group
        r, c = np.arange(*rows, dtype=np.int64), np.arange(*cols, dtype=np.int64)
        _, h, qi, ki = indices(1, heads, r, c)
        table = np.broadcast_to(self.bias_mod.bias(h, qi, ki), (1, heads, len(r), len(c)))
        table = table.reshape(1, self.kv_heads, self.group, len(r), len(c))  # (1, Hkv, G, r, c)
        return np.where(self.block(rows, cols, n, m, lead_ndim), table, -np.inf)
