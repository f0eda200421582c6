"""Flex attention with an arbitrary score_mod, by rows of tiles on the thread pool (forward only).

Shape legend (torch's FlexAttention letters):
    B   batch       H   query heads     G   query heads per key/value head
    L   query rows  S   key rows        E   query/key width     Ev  value width
    r   a piece's query rows         K   the keys of the tiles its row computes

A score_mod may be any function of the score, so it cannot ride on attention's mask protocol as
the named ones do (``_mask.py``). Here each row of tiles (in pieces of at most 128 rows)
gathers the keys of its computed tiles (skipped tiles cost nothing), scores them, calls
score_mod once on the (B, H, r, K) block, calls mask_mod only on partial tiles, and takes the
weights from ``core.softmax.logsumexp``: the same exp(z − lse) every attnlab kernel computes,
with a row that allows no key giving 0 and -inf.
"""

from __future__ import annotations

import os

import numpy as np

from attnlab.core.softmax import logsumexp
from attnlab.errors import NonFiniteResultError
from attnlab.flex._block_mask import EMPTY, BlockMask
from attnlab.flex._calls import call_score_mod, indices
from attnlab.flex._mask import allowed_pairs
from attnlab.kernels._threads import pool_map

__all__ = ["forward"]


ROWS = 128  # query rows scored at once: a (B, H, 128, K) table, whatever the tile height


def _items(bm: BlockMask, n: int) -> list[tuple[int, int, int]]:
    """(tile row, first row, end row): each row of tiles, cut into pieces of at most ROWS."""
    bq = bm.BLOCK_SIZE[0]
    return [
        (i, r0, min(n, (i + 1) * bq, r0 + ROWS))
        for i in range(bm.kinds.shape[2])
        for r0 in range(i * bq, min(n, (i + 1) * bq), ROWS)
    ]


def forward(q, k, v, score_mod, bm: BlockMask, scale: float, group: int):
    """(out (B, H, L, Ev), lse (B, H, L)) for validated arrays: q (B, H, L, E), k (B|1, Hkv, S,
    E), v (B|1, Hkv, S, Ev), in q's dtype. Pieces of rows run on attnlab's thread pool (each
    writes its own rows), so a score_mod or mask_mod may be called from several threads."""
    batch, heads, n, _ = q.shape
    kv_head = np.arange(heads) // group  # (H,): the key/value head each query head reads
    out = np.zeros((batch, heads, n, v.shape[-1]), q.dtype)  # (B, H, L, Ev)
    lse = np.full((batch, heads, n), -np.inf, q.dtype)  # (B, H, L)
    kh, vh = k[:, kv_head], v[:, kv_head]  # (B|1, H, S, E), (B|1, H, S, Ev)
    bk = bm.BLOCK_SIZE[1]

    def piece(item: tuple[int, int, int]) -> None:
        i, r0, r1 = item
        kinds = bm.kinds[:, :, i]  # (B|1, H|1, nk)
        tiles = np.flatnonzero((kinds != EMPTY).any(axis=(0, 1)))
        if tiles.size == 0:
            return  # every tile of the row skipped: out 0, lse -inf
        keys = (tiles[:, None] * bk + np.arange(bk)).reshape(-1)
        keys = keys[keys < k.shape[2]]  # (K,)
        rows = np.arange(r0, r1)
        kt, vt = kh[:, :, keys], vh[:, :, keys]  # (B|1, H, K, E), (B|1, H, K, Ev)
        with np.errstate(all="ignore"):  # an overflow is refused just below, by name
            scores = (q[:, :, r0:r1] @ np.swapaxes(kt, -1, -2)) * q.dtype.type(scale)  # (B,H,r,K)
        if not np.isfinite(scores).all():
            raise NonFiniteResultError(
                f"expected q·kᵀ·scale to stay within {q.dtype}'s range, but got inf or NaN from "
                "query and key instead (scale them down)",
                stage="forward",
                array="scores",
            )
        args = indices(batch, heads, rows, keys)
        allowed = allowed_pairs(bm, kinds, args, scores.shape, keys)
        z = call_score_mod(score_mod, scores, args, allowed)  # (B, H, r, K), -inf if blocked
        row_lse = logsumexp(z, axis=-1)  # (B, H, r)
        live = np.isfinite(row_lse)[..., None]  # rows with an allowed key
        with np.errstate(invalid="ignore"):  # -inf - -inf on a row with no key, zeroed next
            p = np.where(live, np.exp(z - row_lse[..., None]), 0.0).astype(q.dtype)
        with np.errstate(all="ignore"):
            out[:, :, r0:r1] = p @ vt
        lse[:, :, r0:r1] = row_lse

    items = _items(bm, n)
    with pool_map(os.cpu_count() or 1, len(items)) as each:
        each(piece, items)
    if not np.isfinite(out).all():
        raise NonFiniteResultError(
            f"expected the output, a weighted average of value rows, within {q.dtype}'s range, "
            "but got inf or NaN instead (scale value down)",
            stage="forward",
            array="output",
        )
    return out, lse
