"""A BlockMask and a bias score_mod as attnlab mask specs, so ``attention`` and
``attention_backward`` (dense or blockwise) compute flex attention through the mask protocol.

Shape legend:
    B   batch           Hkv key/value heads     G   query heads per key/value head (H = Hkv · G)
    L   query rows      S   key rows            r, c   a tile's rows and keys
    attention's leading axes are (B, Hkv, G): query head h is (h // G, h % G), so key/value
    heads broadcast over G and grouped-query attention needs no copy of k or v.

``FlexMask`` answers ``tile_state`` from the block mask's tiles (a skipped tile is never
computed) and renders a tile by calling the mask_mod only where some tile is partial;
``FlexBias`` renders ALiBi's or a relative bias's additive table one tile at a time.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from attnlab.core._mask_base import Mask, TileState
from attnlab.flex._block_mask import EMPTY, FULL, BlockMask
from attnlab.flex._calls import call_mask_mod, indices

__all__ = ["FlexBias", "FlexMask"]


def _blocks(span: tuple[int, int], size: int) -> slice:
    return slice(span[0] // size, (span[1] - 1) // size + 1)


class FlexMask(Mask):
    """The block mask of a flex call over attention's (B, Hkv, G) leading axes."""

    batched: ClassVar[bool] = True

    def __init__(self, block_mask: BlockMask, batch: int, kv_heads: int, group: int):
        self.block_mask = block_mask
        self.batch, self.kv_heads, self.group = batch, kv_heads, group

    def __repr__(self) -> str:
        return f"block_mask (mask_mod {getattr(self.block_mask.mask_mod, '__name__', '?')})"

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
        r, c = np.arange(*rows), np.arange(*cols)
        shape = (self.batch, heads, len(r), len(c))
        allowed = call_mask_mod(self.block_mask.mask_mod, indices(self.batch, heads, r, c), shape)
        # A tile the block mask skips stays blocked whatever the mask_mod says of it.
        bq, bk = self.block_mask.BLOCK_SIZE
        down, across = r // bq - r[0] // bq, c // bk - c[0] // bk
        open_tile = (kinds != EMPTY)[:, :, down[:, None], across[None, :]]  # (B|1, H|1, r, c)
        allowed = allowed & open_tile  # (B, H, r, c)
        return allowed.reshape(self.batch, self.kv_heads, self.group, len(r), len(c))


class FlexBias(Mask):
    """A bias score_mod (``flex.alibi``, ``flex.relative_bias``) as an additive mask spec."""

    boolean: ClassVar[bool] = False

    def __init__(self, mod, kv_heads: int, group: int):
        self.mod, self.kv_heads, self.group = mod, kv_heads, group

    def __repr__(self) -> str:
        return f"score_mod {self.mod!r}"

    def block(self, rows, cols, n, m, lead_ndim):
        return np.ones((1,) * 5, bool)  # a bias blocks nothing: (1, 1, 1, 1, 1)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        return TileState.OPEN

    def bias(self, rows, cols, n, m, lead_ndim):
        heads = self.kv_heads * self.group
        r, c = np.arange(*rows, dtype=np.int64), np.arange(*cols, dtype=np.int64)
        _, h, qi, ki = indices(1, heads, r, c)
        table = np.broadcast_to(self.mod.bias(h, qi, ki), (1, heads, len(r), len(c)))
        return table.reshape(1, self.kv_heads, self.group, len(r), len(c))  # (1, Hkv, G, r, c)
