"""The block mask: which (query block, key block) tiles a mask_mod blocks whole, allows whole,
or cuts, found once so that flex_attention skips the first and evaluates the mask_mod only on the
last.

Shape legend (torch's FlexAttention letters):
    B   batch (1 when created with B=None: every batch element alike)
    H   query heads (1 when created with H=None)
    L   query rows (Q_LEN)          S   key rows (KV_LEN)
    nq = ceil(L / BLOCK_SIZE[0])    nk = ceil(S / BLOCK_SIZE[1])

``kinds`` (B, H, nq, nk) holds EMPTY, PARTIAL or FULL for each tile. As in torch, a tile that
hangs over the end of the table counts its missing pairs as blocked, so it is never FULL, and
``sparsity()`` is the share of the B · H · L · S table in tiles that are not computed.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.errors import AttnlabError
from attnlab.flex._calls import call_mask_mod, indices

__all__ = ["EMPTY", "FULL", "PARTIAL", "BlockMask", "create_block_mask", "noop_mask"]

EMPTY, PARTIAL, FULL = 0, 1, 2


def noop_mask(b, h, q_idx, kv_idx):
    """The mask_mod that allows every pair (torch's ``noop_mask``)."""
    return np.ones((), dtype=bool)


class BlockMask:
    """A mask_mod and the state of each of its tiles (see the module docstring).

    Attributes:
        shape: (B, H, Q_LEN, KV_LEN).   BLOCK_SIZE: (query rows, keys) per tile.
        mask_mod: the rule, called on the tiles that are PARTIAL.
        kinds: int8 (B, H, nq, nk): 0 empty (skipped), 1 partial, 2 full.
    """

    def __init__(self, kinds: np.ndarray, mask_mod, shape: tuple, block_size: tuple[int, int]):
        self.kinds = kinds
        self.mask_mod = mask_mod
        self.shape = tuple(int(s) for s in shape)
        self.BLOCK_SIZE = block_size

    @property
    def kv_num_blocks(self) -> np.ndarray:
        """Partial tiles per query block, (B, H, nq), as torch counts them."""
        return (self.kinds == PARTIAL).sum(axis=-1)

    @property
    def full_kv_num_blocks(self) -> np.ndarray:
        """Full tiles per query block, (B, H, nq)."""
        return (self.kinds == FULL).sum(axis=-1)

    def numel(self) -> int:
        """Pairs in the (B, H, Q_LEN, KV_LEN) table, whatever the sparsity."""
        return int(np.prod(self.shape))

    def sparsity(self) -> float:
        """The percentage of the table in tiles that are not computed (torch's definition: an
        overhanging tile counts whole, so this can dip below 0 for short sequences)."""
        computed = int((self.kinds != EMPTY).sum()) * self.BLOCK_SIZE[0] * self.BLOCK_SIZE[1]
        return 100.0 * (1.0 - computed / self.numel())

    def to_dense(self) -> np.ndarray:
        """Bool (B, H, nq, nk): True for every tile that is computed."""
        return self.kinds != EMPTY

    def to_string(self, limit: int = 16) -> str:
        """The tiles of batch 0, head 0 as text: '#' full, '+' partial, '.' skipped."""
        grid = self.kinds[0, 0, :limit, :limit]  # (min(nq, limit), min(nk, limit))
        chars = np.array([".", "+", "#"])[grid]
        return "\n".join("".join(row) for row in chars)

    def __repr__(self) -> str:
        name = getattr(self.mask_mod, "__name__", None) or repr(self.mask_mod)
        return (
            f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
            f"sparsity={self.sparsity():.2f}%, mask_mod={name})\n{self.to_string()}"
        )


def _block_size(value) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int | np.integer) else value
    if (
        not isinstance(pair, tuple | list)
        or len(pair) != 2
        or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in pair)
        or min(pair) < 1
    ):
        raise AttnlabError(
            f"expected BLOCK_SIZE to be a positive int or a pair of them, but got {value!r} instead"
        )
    return int(pair[0]), int(pair[1])


def _optional(name: str, value) -> int:
    return 1 if value is None else positive_int(name, value, AttnlabError)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE=128):
    """The BlockMask of ``mask_mod`` over a (B, H, Q_LEN, KV_LEN) table: torch's
    ``create_block_mask`` on numpy.

    Args:
        mask_mod: mask_mod(b, h, q_idx, kv_idx) -> bool, True where the pair may attend; it
            receives broadcastable integer arrays b (B, 1, 1, 1), h (1, H, 1, 1),
            q_idx (1, 1, rows, 1), kv_idx (1, 1, 1, keys) and is called once per row of tiles.
        B, H: batch and query heads; None for a mask alike over every batch element / head.
        Q_LEN, KV_LEN: query and key counts.
        BLOCK_SIZE: tile size, an int or (query rows, keys); 128 as torch's default.

    >>> bm = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 4, 4, BLOCK_SIZE=2)
    >>> bm.sparsity()
    25.0
    """
    if not callable(mask_mod):
        raise AttnlabError(f"expected mask_mod to be callable, but got {mask_mod!r} instead")
    batch, heads = _optional("B", B), _optional("H", H)
    n, m = positive_int("Q_LEN", Q_LEN, AttnlabError), positive_int("KV_LEN", KV_LEN, AttnlabError)
    bq, bk = _block_size(BLOCK_SIZE)
    nq, nk = -(-n // bq), -(-m // bk)
    kinds = np.empty((batch, heads, nq, nk), np.int8)  # (B, H, nq, nk)
    cols = np.arange(m)
    pad = nk * bk - m  # keys past the end count as blocked, as torch pads the mask with False
    for i in range(nq):
        rows = np.arange(i * bq, min(n, (i + 1) * bq))
        args = indices(batch, heads, rows, cols)
        allowed = call_mask_mod(mask_mod, args, (batch, heads, len(rows), m))
        allowed = np.pad(allowed, ((0, 0), (0, 0), (0, bq - len(rows)), (0, pad)))
        tiles = allowed.reshape(batch, heads, bq, nk, bk)  # (B, H, bq, nk, bk)
        count = tiles.sum(axis=(2, 4))  # (B, H, nk): allowed pairs per tile
        kinds[:, :, i] = np.where(count == 0, EMPTY, np.where(count == bq * bk, FULL, PARTIAL))
    return BlockMask(kinds, mask_mod, (batch, heads, n, m), (bq, bk))
