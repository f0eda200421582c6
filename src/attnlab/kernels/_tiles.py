"""What each tile of the blockwise path needs: which tiles to visit, their masks, their memory.

Shape legend: N queries, M keys, d_v value width, Bq x Bk a tile (query rows x keys), ... the
leading axes of q.

A mask is consulted per tile through ``Mask.tile_state`` (arithmetic for the built-in masks, no
table rendered): BLOCKED tiles are never visited, OPEN ones need no mask arithmetic, and only
the tiles a mask cuts through are rendered, once, for every lead element.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from attnlab.core.masks import Mask, TileState

LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2 e)
LN2 = 0.6931471805599453  # exp2(x) = exp(x · ln 2)


def _simd_exp2() -> bool:
    # numpy vectorises float32 exp2 only through SVML, which it builds for AVX-512 (Skylake-X
    # and later); elsewhere exp2 is a scalar loop while exp has numpy's own AVX2 code.
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # a numpy that moved it: take the choice measured on AVX2 below
        return False
    return bool(__cpu_features__.get("AVX512_SKX"))


_SIMD_EXP2 = _simd_exp2()


def natural_exp(dtype) -> bool:
    """Whether the forward's fast pass exponentiates in natural units (np.exp) rather than
    log2 units (np.exp2): the one of the two that numpy vectorises on this CPU. Measured on
    a 256 x 512 float32 tile, AMD EPYC (AVX2, no AVX-512): exp2 696 us, exp 359 us, half of the
    whole tile's time (benchmarks/profile_blockwise.py); float64 exp2 1339 us, exp 1411 us. With
    AVX-512, exp2 (SVML) is what the Xeon figures in kernels/blockwise.py were measured with.
    Decided by the CPU, never by a timing, so every call in a process rounds alike."""
    return np.dtype(dtype) == np.float32 and not _SIMD_EXP2


def exp2_floor(dtype) -> np.floating:
    """The exponent floor (f32: -119, f64: -1015): 2^floor is the smallest exp2 numpy still
    computes on its fast path. Below it, and for -inf, exp2 takes a slow path (measured 17x for
    a result of 0, 150x for a subnormal one), so the kernels clamp exponents far below at this
    floor: each weight so raised is at most 2^floor, invisible beside a row sum the kernels
    keep >= 2^-64 (f32)."""
    return np.dtype(dtype).type(np.finfo(dtype).minexp + 6)


class Step(NamedTuple):
    """One tile of a query block, as the kernel's loop needs it (unpacked by position there).

    rows: the block's rows this step covers (a slice; strips cover part of the block).
    c0, c1: the keys [c0, c1) of the tile.
    scores: (rows, cols) buffer for score - base, then the weights.
    pv: (rows, d_v) buffer for Σ p v;  psum: (rows,) buffer for Σ p;  both: the two side by side,
        (rows, d_v + 1), added to the running sums in one call.
    ones: (cols,) ones, for the row sums as a matrix-vector product.
    mask: the tile's TileMask, or None when the mask allows the whole tile.
    """

    rows: slice
    c0: int
    c1: int
    scores: np.ndarray
    pv: np.ndarray
    psum: np.ndarray
    both: np.ndarray
    ones: np.ndarray
    mask: TileMask | None


# A partial tile is cut into this many row strips (measured: 2 and 4 alike, 8 slower).
_STRIPS = 4


def plan(mask: Mask | None, rows: tuple[int, int], n: int, m: int, bk: int, lead_ndim: int = 0):
    """The steps of one query block: (row strip a:b within the block, cols, needs_mask).

    Tiles the mask BLOCKED are left out; an OPEN tile of an allow/forbid mask needs no mask
    arithmetic (a float mask's biases are added to every tile it does not block). A PARTIAL
    tile is cut into strips of a quarter of its rows, each trimmed to the columns it needs,
    when that saves a third of the tile or more: on the diagonal of a causal mask it computes
    5/8 of the tile instead of all of it. Smaller matmuls run slower, so the time saved is
    less than the area: measured 3-9% of a causal call.
    """
    height = rows[1] - rows[0]
    if mask is None:
        return [(0, height, (c0, min(m, c0 + bk)), False) for c0 in range(0, m, bk)]
    steps = []
    for c0 in range(0, m, bk):
        cols = (c0, min(m, c0 + bk))
        state = mask.tile_state(rows, cols, n, m, lead_ndim)
        if state is TileState.BLOCKED:
            continue
        partial = state is TileState.PARTIAL
        strips = _strips(mask, rows, cols, n, m, lead_ndim) if partial else None
        if strips is None:
            steps.append((0, height, cols, partial or not mask.boolean))
        else:
            steps.extend(strips)
    return steps


def _strips(mask: Mask, rows, cols, n: int, m: int, lead_ndim: int):
    sub = max(32, (rows[1] - rows[0]) // _STRIPS)
    width = cols[1] - cols[0]
    chunk = max(32, width // _STRIPS)
    out, area = [], 0
    for a in range(rows[0], rows[1], sub):
        strip = (a, min(rows[1], a + sub))
        live = [
            (c0, min(cols[1], c0 + chunk))
            for c0 in range(cols[0], cols[1], chunk)
            if mask.tile_state(strip, (c0, min(cols[1], c0 + chunk)), n, m, lead_ndim)
            is not TileState.BLOCKED
        ]
        if live:
            span = (live[0][0], live[-1][1])
            out.append((strip[0] - rows[0], strip[1] - rows[0], span, True))
            area += (strip[1] - strip[0]) * (span[1] - span[0])
    if area > (2 / 3) * (rows[1] - rows[0]) * width:
        return None  # not worth the smaller matmuls
    return out


# At least this many work items per thread, so uneven items (causal: later rows see more keys)
# and a core shared with another process even out. The backward renders its masks per item,
# so it asks for few (measured flat from 2 to 8 at N = 2048, slower at 16: more renders).
ITEMS_PER_THREAD = 4


def work_items(
    blocks, plans: dict, lead: tuple[int, ...], threads: int, per_thread: int = ITEMS_PER_THREAD
) -> list:
    """The work of a blockwise kernel, forward or backward: (query block, group of lead
    indices) items, enough to give every thread ``per_thread`` or more, longest first."""
    lead_idx = list(np.ndindex(lead)) if lead else [()]
    per_item = max(1, min(len(lead_idx), len(blocks) * len(lead_idx) // (per_thread * threads)))
    items = [
        (rows, lead_idx[i : i + per_item])
        for rows in blocks
        for i in range(0, len(lead_idx), per_item)
    ]
    cost = {rows: sum((b - a) * (c1 - c0) for a, b, (c0, c1), _ in p) for rows, p in plans.items()}
    items.sort(key=lambda it: -cost[it[0]] * len(it[1]))  # longest first: better balance
    return items


def lone_keys(steps, tiles: dict, height: int):
    """For a query block's rows, how many keys each allows and the first of them:
    (count (..., Bq, 1), first (..., Bq, 1)), leading axes the mask's own; None when no row
    allows exactly one key (the only case the kernels use them for)."""
    shapes = [t.allowed.shape[:-2] for t in tiles.values()]
    lead = tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    count = np.zeros(lead + (height,), np.int64)  # (..., Bq)
    first = np.zeros_like(count)  # (..., Bq)
    for a, b, (c0, c1), masked in steps:
        if masked:
            ok = tiles[a, c0].allowed  # (..., rows | 1, cols | 1)
            ok = np.broadcast_to(ok, ok.shape[:-1] + (c1 - c0,))  # (..., rows | 1, cols)
            n, f = ok.sum(axis=-1), c0 + np.argmax(ok, axis=-1)  # (..., rows | 1)
        else:
            n, f = c1 - c0, c0
        first[..., a:b] = np.where(count[..., a:b] == 0, f, first[..., a:b])
        count[..., a:b] += n
    if not (count == 1).any():
        return None
    return count[..., None], first[..., None]


def lead_at(a: np.ndarray, idx: tuple[int, ...]):
    """The entry of ``a`` (broadcastable into the lead shape, aligned at its end) at ``idx``."""
    own = idx[len(idx) - a.ndim :] if a.ndim else ()
    return a[tuple(i if s != 1 else 0 for i, s in zip(own, a.shape, strict=True))]


class TileMask:
    """A tile's mask, rendered once and shared by every lead element.

    Each array broadcasts to (..., Bq, Bk). The fast step adds ``bias`` and multiplies the
    exponentials by ``keep`` (1 allowed, 0 blocked) instead of writing -inf: numpy's float32
    exp2 takes a slow path (measured 5-9x) for any input whose result is 0 or subnormal, -inf
    included, while a multiply by 0 costs one quick pass. The exact step takes each row's
    maximum over ``allowed`` pairs only.

    ``floor``: ``exp2_floor`` where the tile's biases reach below half of it (in log2 units:
    f32 -60, a padding convention's -10000 or a long ALiBi distance), so the fast step clamps
    its exponents there, one quick pass instead of exp2's slow one (forward 136 -> 100 ms
    measured with -10000 on half the keys, N = 2048, h = 8); None where no bias goes that deep.
    ``ebias`` and ``efloor``: the same two in natural units, for a fast step that uses np.exp
    (``natural_exp``).
    """

    def __init__(self, mask: Mask, rows, cols, n: int, m: int, lead_ndim: int, dtype):
        dtype = np.dtype(dtype)
        allowed, bias, ebias = None, None, None
        for part in mask.parts():
            if part.boolean:
                ok = part.block(rows, cols, n, m, lead_ndim)
            else:
                # In the compute dtype before any arithmetic: a float32 mask on float64 inputs
                # keeps float64 accuracy (§6.4's additive mask, in base 2 here).
                b = np.asarray(part.bias(rows, cols, n, m, lead_ndim), dtype=dtype)
                ok = ~np.isneginf(b)
                e = np.where(ok, b, dtype.type(0.0))
                b = e * dtype.type(LOG2E)  # the same as scaling first: blocked pairs are 0
                bias = b if bias is None else bias + b
                ebias = e if ebias is None else ebias + e
            allowed = ok if allowed is None else allowed & ok
        self.bias, self.ebias = bias, ebias
        floor = exp2_floor(dtype)
        self.floor = floor if bias is not None and bias.min() < floor / 2 else None
        self.efloor = None if self.floor is None else floor * dtype.type(LN2)
        self.keep = allowed.astype(dtype)
        self.allowed = allowed


_local = threading.local()


def buffers(dtype, dv: int, bk: int) -> _Buffers:
    """This thread's tile buffers, kept between work items and calls: a fresh 1 MiB array is a
    new mmap whose pages fault on first touch (~0.25 ms per tile, 5% of a 2048-token call)."""
    key = (np.dtype(dtype), dv, bk)
    cache = getattr(_local, "buffers", None)
    if cache is None or cache.key != key:
        cache = _local.buffers = _Buffers(dtype, dv, bk)
        cache.key = key
    return cache


class _Buffers:
    """Tiles reused across work items, one set per step shape (strips and ragged edges vary)."""

    def __init__(self, dtype, dv: int, bk: int):
        self.dtype, self.dv, self.cache = dtype, dv, {}
        self.ones = np.ones(bk, dtype)  # (Bk,) for the row sums

    def __call__(self, rows: int, cols: int):
        key = (rows, cols)
        if key not in self.cache:
            if len(self.cache) >= 16:  # ragged edges of many different calls: start afresh
                self.cache.clear()
            rl = np.empty((rows, self.dv + 1), self.dtype)  # (rows, d_v + 1): Σ p v | Σ p
            self.cache[key] = (
                np.empty((rows, cols), self.dtype),  # (rows, cols) scores, then weights
                rl[:, :-1],  # (rows, d_v) Σ p v
                rl[:, -1],  # (rows,) Σ p
                rl,
                self.ones[:cols],  # (cols,)
            )
        return self.cache[key]
