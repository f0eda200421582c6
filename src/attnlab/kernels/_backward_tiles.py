"""The backward kernel's tile memory: which tiles a query block keeps between its sweeps, and
each thread's scratch tiles.

Shape legend: Bq x Bk a tile (query rows x keys), d_k and d_v the widths.

``kernels/blockwise_backward.py`` keeps a block's weights p and dP' from one sweep to the next
while they fit a budget (``keep_tiles``), and computes the rest again in scratch tiles that
each thread keeps between work items and calls (``scratch``); ``may_have_one_key`` says from a
block's tiles whether it must divide them by the row sums.
"""

from __future__ import annotations

import threading

import numpy as np

from attnlab.kernels._tiles import TileMask

__all__ = ["keep_tiles", "may_have_one_key", "scratch", "tile_steps"]


def tile_steps(x, rows: tuple[int, int], steps) -> list:
    """A query block's plan (``_tiles.plan``) as (row slice, column slice, its ``TileMask`` or
    None where the tile needs no mask arithmetic), the form the backward sweeps read."""
    r0, lead_ndim = rows[0], len(x.lead)
    return [
        (
            slice(a, b),
            slice(c0, c1),
            TileMask(x.mask, (r0 + a, r0 + b), (c0, c1), x.n, x.m, lead_ndim, x.q.dtype)
            if masked
            else None,
        )
        for a, b, (c0, c1), masked in steps
    ]


def may_have_one_key(steps, height: int) -> bool:
    """Whether a row of the block may allow a single key: False when one tile of two or more
    keys allows every key to every row of the block (no mask there, or a mask that blocks
    none of it): every block of an unmasked call, all but the first of a causal one.

    A block that may hold such a row divides its tiles p by the row sums l in place, so that
    the row has P = p / p = 1 exactly, D = its dP and dS exactly 0, as in exact arithmetic and
    in torch's autograd. Carrying 1/l on dO and D instead left an ulp of dP there (dq ~1e-7
    where it is 0: FlashAttention's float32 grid, one key per row); the division, one pass
    over each tile, cost 3-8% of a 2048-token backward, so the other blocks skip it."""
    for rows, cols, tm in steps:
        full = rows.start == 0 and rows.stop == height and cols.stop - cols.start >= 2
        if full and (tm is None or bool(tm.allowed.all())):
            return False
    return True


def keep_tiles(steps, budget: int, dtype) -> list:
    """(p, dP') buffers for the first steps whose two tiles fit ``budget`` elements; None for
    the rest, which sweep B2 recomputes."""
    sizes = [(st[0].stop - st[0].start, st[1].stop - st[1].start) for st in steps]
    count, used = 0, 0
    for rows, cols in sizes:
        if used + 2 * rows * cols > budget:
            break
        used += 2 * rows * cols
        count += 1
    flat = np.empty(used, dtype)  # one allocation: the tiles are views of it
    kept, at = [], 0
    for rows, cols in sizes[:count]:
        size = rows * cols
        kept.append(
            tuple(flat[at + i * size : at + (i + 1) * size].reshape(rows, cols) for i in (0, 1))
        )
        at += 2 * size
    return kept + [None] * (len(steps) - count)


_local = threading.local()


def scratch(dtype) -> _Scratch:
    """This thread's scratch tiles, kept between items and calls (a fresh 1 MiB array faults
    its pages in on first touch: see _tiles.buffers)."""
    cache = getattr(_local, "scratch", None)
    if cache is None or cache.dtype != dtype:
        cache = _local.scratch = _Scratch(dtype)
    return cache


class _Scratch:
    """Tiles for steps not kept, and each step's (rows, d_k), (cols, d_k), (cols, d_v) products."""

    def __init__(self, dtype):
        self.dtype, self.table, self.ones = dtype, {}, np.ones(0, dtype)

    def _get(self, key, make):
        if key not in self.table:
            if len(self.table) >= 32:  # ragged edges of many different calls: start afresh
                self.table.clear()
            self.table[key] = make()
        return self.table[key]

    def __call__(self, rows: int, cols: int, dk: int):
        return self._get(
            (rows, cols, dk),
            lambda: (
                np.empty((rows, cols), self.dtype),  # p
                np.empty((rows, cols), self.dtype),  # dP', then dS
                np.empty((rows, dk), self.dtype),  # dS K_j
                np.empty((cols, dk), self.dtype),  # dSᵀ Q_i
            ),
        )

    def ones_for(self, cols: int) -> np.ndarray:
        if self.ones.size < cols:
            self.ones = np.ones(cols, self.dtype)  # row sums by matrix-vector products
        return self.ones[:cols]

    def tv(self, cols: int, dv: int) -> np.ndarray:
        return self._get((cols, dv), lambda: np.empty((cols, dv), self.dtype))  # pᵀ dO / l
