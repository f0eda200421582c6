"""Masks by tile: every tile a mask renders, and every TileState it reports, against the full table.

The blockwise path trusts ``tile_state`` to skip BLOCKED tiles and to leave OPEN ones alone, and
``_block`` / ``_bias`` to render one tile without the N x M table; here each is checked against
slicing the table that ``allowed`` / ``additive`` render whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.core.chunks import Chunks
from attnlab.core.masks import Causal, Dense, Mask, Padding, SlidingWindow, TileState

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BATCH = 3  # Padding's batch axis in these tests


def _expected_state(mask: Mask, n: int, m: int, rows, cols) -> TileState:
    lead = 1 if mask.batched else 0
    allowed = mask.allowed(n, m, lead_ndim=lead)[..., rows[0] : rows[1], cols[0] : cols[1]]
    if not allowed.any():
        return TileState.BLOCKED
    return TileState.OPEN if allowed.all() else TileState.PARTIAL


@st.composite
def single_masks(draw, n: int, m: int) -> Mask:
    kinds = ["causal", "window", "chunks", "padding", "dense_bool", "dense_additive"]
    kind = draw(st.sampled_from(kinds))
    align = draw(st.sampled_from(["top_left", "bottom_right"]))
    if kind == "causal":
        return Causal(align)
    if kind == "chunks":
        return Chunks(draw(st.integers(1, max(n, m) + 2)), align)
    if kind == "window":
        return SlidingWindow(draw(st.integers(1, m + 2)), align)
    if kind == "padding":
        return Padding(draw(st.lists(st.integers(0, m + 1), min_size=BATCH, max_size=BATCH)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.0, 0.3, 0.9, 1.0]))
    allowed = rng.random((n, m)) < density
    if kind == "dense_bool":
        return Dense(allowed)
    bias = np.where(rng.random((n, m)) < 0.5, 0.0, rng.normal(size=(n, m)))
    return Dense(np.where(allowed, bias, -np.inf))


@st.composite
def cases(draw):
    n, m = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    parts = draw(st.lists(single_masks(n, m), min_size=1, max_size=3))
    mask = parts[0]
    for p in parts[1:]:
        mask = mask + p
    r0 = draw(st.integers(0, n - 1))
    c0 = draw(st.integers(0, m - 1))
    rows = (r0, draw(st.integers(r0 + 1, n)))
    cols = (c0, draw(st.integers(c0 + 1, m)))
    return mask, n, m, rows, cols


@FAST
@given(cases())
def test_tile_state_is_exact_against_the_full_table(case):
    mask, n, m, rows, cols = case
    assert mask.tile_state(rows, cols, n, m) is _expected_state(mask, n, m, rows, cols)


@FAST
@given(cases())
def test_a_rendered_tile_is_the_slice_of_the_full_table(case):
    mask, n, m, rows, cols = case
    lead = 1 if mask.batched else 0
    table_shape = mask.allowed(n, m, lead_ndim=lead).shape
    tile_shape = table_shape[:-2] + (rows[1] - rows[0], cols[1] - cols[0])
    for part in mask.parts():
        full_allowed = part.allowed(n, m, lead_ndim=lead)
        full_added = part.additive(n, m, lead_ndim=lead)
        block = part.block(rows, cols, n, m, lead)
        bias = part.bias(rows, cols, n, m, lead)
        window = (..., slice(*rows), slice(*cols))
        np.testing.assert_array_equal(
            np.broadcast_to(block, tile_shape), np.broadcast_to(full_allowed[window], tile_shape)
        )
        np.testing.assert_array_equal(
            np.broadcast_to(bias, tile_shape), np.broadcast_to(full_added[window], tile_shape)
        )


@pytest.mark.parametrize(
    ("mask", "rows", "cols", "state"),
    [
        (Causal(), (0, 4), (4, 8), TileState.BLOCKED),  # above the diagonal
        (Causal(), (4, 8), (0, 4), TileState.OPEN),  # below it
        (Causal(), (0, 4), (0, 4), TileState.PARTIAL),  # on it
        (SlidingWindow(2), (6, 8), (0, 4), TileState.BLOCKED),  # too far back
        (Padding([3, 5]), (0, 8), (5, 8), TileState.BLOCKED),  # past every length
        (Padding([3, 5]), (0, 8), (0, 3), TileState.OPEN),  # within every length
        (Padding([3, 5]), (0, 8), (2, 4), TileState.PARTIAL),
        (Dense(np.full((8, 8), 0.5)), (0, 8), (0, 8), TileState.OPEN),  # a bias, nothing blocked
    ],
)
def test_tile_states_of_the_chapter_masks(mask, rows, cols, state):
    assert mask.tile_state(rows, cols, 8, 8) is state


def test_two_partial_parts_that_allow_nothing_together_are_blocked():
    # One part allows only key 0, the other only key 1: each alone is partial on the tile.
    left = Dense(np.array([[True, False], [True, False]]))
    right = Dense(np.array([[False, True], [False, True]]))
    assert left.tile_state((0, 2), (0, 2), 2, 2) is TileState.PARTIAL
    assert (left + right).tile_state((0, 2), (0, 2), 2, 2) is TileState.BLOCKED


@dataclass(frozen=True, eq=False)
class _Spy(Causal):
    """A causal mask that records the size of every tile it is asked to render."""

    sizes: list = field(default_factory=list)

    def block(self, rows, cols, n, m, lead_ndim):
        self.sizes.append((rows[1] - rows[0]) * (cols[1] - cols[0]))
        return super().block(rows, cols, n, m, lead_ndim)


def test_blockwise_renders_tiles_never_the_table():
    n = 96
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, n, 4)) for _ in range(3))
    spy = _Spy()
    al.attention(q, k, v, spy, method="blockwise", block_size=16)
    assert spy.sizes and max(spy.sizes) <= 16 * 16
    # tile_state is arithmetic for banded masks: only the diagonal tiles were rendered (by each
    # work item that needed them; an item may hold one lead element or several).
    assert len(spy.sizes) <= 1 + 2 * (n // 16)


def test_checking_a_mask_shape_renders_one_cell():
    spy = _Spy()
    al.attention(np.ones((50, 2)), np.ones((50, 2)), np.ones((50, 1)), spy, method="dense")
    assert spy.sizes[0] == 1  # the shape check: a 1 x 1 tile, then the dense path's table


def test_blame_renders_one_row_only():
    spy = _Spy(align="bottom_right")  # with N > M the first N - M rows see no key
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(40, 2)), rng.normal(size=(30, 2)), rng.normal(size=(30, 1))
    with pytest.raises(al.FullyMaskedRowError, match="query row 0, 1"):
        al.attention(q, k, v, spy, method="blockwise", block_size=8)
    assert max(spy.sizes) <= 8 * 8


def test_combined_tile_state_places_the_batch_axis_where_q_has_it():
    # q of shape (B=2, h=3, N, d): Padding's lengths index B, the Dense table's axes are (1, h).
    n = m = 6
    table = np.ones((1, 3, n, m), bool)
    table[0, 1, :, :3] = False  # head 1 may not see keys 0-2
    mask = Padding([2, 6]) + Dense(table)
    full = mask.allowed(n, m, lead_ndim=2)  # (2, 3, N, M)
    for cols in [(0, 2), (0, 3), (2, 6), (4, 6)]:
        tile = full[..., :, cols[0] : cols[1]]
        expected = (
            TileState.BLOCKED
            if not tile.any()
            else TileState.OPEN
            if tile.all()
            else TileState.PARTIAL
        )
        assert mask.tile_state((0, n), cols, n, m, lead_ndim=2) is expected
