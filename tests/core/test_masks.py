"""Mask specs: tables written out by hand, numpy's triangle helpers, and how masks combine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.masks import Causal, Combined, Dense, Padding, SlidingWindow, TileState

FAST = settings(max_examples=40, deadline=None)
NEG = -np.inf
T, F = True, False


def test_three_token_causal_mask_of_the_exercise():
    expected = np.array([[0, NEG, NEG], [0, 0, NEG], [0, 0, 0]])
    np.testing.assert_array_equal(Causal().additive(3), expected)


def test_four_token_causal_mask_of_the_chapter():
    expected = np.array(
        [[0, NEG, NEG, NEG], [0, 0, NEG, NEG], [0, 0, 0, NEG], [0, 0, 0, 0]], dtype=float
    )
    np.testing.assert_array_equal(Causal().additive(4), expected)
    np.testing.assert_array_equal(Causal().allowed(4), expected == 0)


@pytest.mark.parametrize(
    ("mask", "n", "m", "table"),
    [
        # top-left, as PyTorch's is_causal: query i sees keys 0..i whatever M is.
        (Causal(), 2, 4, [[T, F, F, F], [T, T, F, F]]),
        (Causal(), 4, 2, [[T, F], [T, T], [T, T], [T, T]]),
        # bottom-right: the last query sees the last key (a KV cache of M - N old keys).
        (Causal("bottom_right"), 2, 4, [[T, T, T, F], [T, T, T, T]]),
        (Causal("bottom_right"), 3, 3, [[T, F, F], [T, T, F], [T, T, T]]),
        (Causal("bottom_right"), 3, 2, [[F, F], [T, F], [T, T]]),
        (SlidingWindow(1), 3, 3, [[T, F, F], [F, T, F], [F, F, T]]),
        (
            SlidingWindow(2),
            4,
            4,
            [[T, F, F, F], [T, T, F, F], [F, T, T, F], [F, F, T, T]],
        ),
        (SlidingWindow(3, align="bottom_right"), 2, 5, [[F, T, T, T, F], [F, F, T, T, T]]),
    ],
)
def test_tables_by_hand(mask, n, m, table):
    np.testing.assert_array_equal(mask.allowed(n, m), np.array(table))
    np.testing.assert_array_equal(mask.additive(n, m), np.where(table, 0.0, NEG))


@FAST
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 10))
def test_banded_masks_against_numpy_triangles(n, m, size):
    # np.tri(n, m, k) is True where j <= i + k: the lower triangle shifted by k.
    np.testing.assert_array_equal(Causal().allowed(n, m), np.tri(n, m, 0, dtype=bool))
    np.testing.assert_array_equal(
        Causal("bottom_right").allowed(n, m), np.tri(n, m, m - n, dtype=bool)
    )
    for align, k in (("top_left", 0), ("bottom_right", m - n)):
        band = np.tri(n, m, k, dtype=bool) & ~np.tri(n, m, k - size, dtype=bool)
        np.testing.assert_array_equal(SlidingWindow(size, align=align).allowed(n, m), band)


def test_window_as_wide_as_the_sequence_is_causal():
    np.testing.assert_array_equal(SlidingWindow(5).allowed(5, 7), Causal().allowed(5, 7))


def test_padding_tables():
    # Key j is allowed for batch element b iff j < lengths[b], for every query row.
    expected = np.array([[[T, F, F]] * 2, [[T, T, T]] * 2])  # (B, N, M)
    np.testing.assert_array_equal(Padding([1, 3]).allowed(2, 3), expected)
    np.testing.assert_array_equal(Padding([1, 3]).additive(2, 3), np.where(expected, 0.0, NEG))
    # With a head axis, (B, h, N, d), the lengths still index the first axis.
    with_heads = Padding([1, 3]).allowed(2, 3, lead_ndim=2)
    assert with_heads.shape == (2, 1, 2, 3)
    np.testing.assert_array_equal(with_heads[:, 0], expected)


def test_dense_masks():
    table = np.array([[T, F], [F, T]])
    np.testing.assert_array_equal(Dense(table).allowed(2), table)
    np.testing.assert_array_equal(Dense(table).additive(2), [[0, NEG], [NEG, 0]])
    bias = np.array([[0.5, NEG], [-1.0, 2.0]])
    np.testing.assert_array_equal(Dense(bias).additive(2), bias)  # finite values act as a bias
    np.testing.assert_array_equal(Dense(bias).allowed(2), [[T, F], [T, T]])
    assert Dense(bias).additive(2, dtype=np.float32).dtype == np.float32


def _pool(n: int, m: int, seed: int) -> list:
    """A mix of every mask kind for an n x m table (batch of 2 where it matters)."""
    rng = np.random.default_rng(seed)
    bias = rng.normal(size=(n, m))
    bias[rng.random((n, m)) < 0.3] = NEG
    return [
        Causal(),
        Causal("bottom_right"),
        SlidingWindow(int(rng.integers(1, 4))),
        Padding(rng.integers(0, m + 1, size=2)),
        Dense(rng.random((2, n, m)) < 0.6),
        Dense(bias),
    ]


@FAST
@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 5), min_size=2, max_size=3),
)
def test_masks_combine_by_adding(n, m, seed, picks):
    pool = _pool(n, m, seed)
    parts = [pool[i] for i in picks]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    assert isinstance(total, Combined)
    assert total.parts() == tuple(parts)  # sums flatten: (a + b) + c has three parts
    additive = sum(p.additive(n, m, lead_ndim=1) for p in parts)
    np.testing.assert_array_equal(total.additive(n, m, lead_ndim=1), additive)
    allowed = np.logical_and.reduce(
        np.broadcast_arrays(*(p.allowed(n, m, lead_ndim=1) for p in parts))
    )
    np.testing.assert_array_equal(total.allowed(n, m, lead_ndim=1), allowed)


def test_adding_a_non_mask_is_a_type_error():
    with pytest.raises(TypeError):
        Causal() + np.zeros((2, 2))


def test_equality_and_repr():
    assert Causal() == Causal()
    assert Causal() != Causal("bottom_right")
    assert repr(Causal() + Padding([2, 3])) == "Causal() + Padding(lengths=[2, 3])"
    assert repr(SlidingWindow(4)) == "SlidingWindow(size=4)"


@FAST
@given(
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(0, 2**32 - 1),
    st.integers(0, 5),
    st.data(),
)
def test_tile_state_agrees_with_the_table(n, m, seed, pick, data):
    mask = _pool(n, m, seed)[pick]
    r0 = data.draw(st.integers(0, n - 1))
    r1 = data.draw(st.integers(r0 + 1, n))
    c0 = data.draw(st.integers(0, m - 1))
    c1 = data.draw(st.integers(c0 + 1, m))
    tile = mask.allowed(n, m, lead_ndim=1)[..., r0:r1, c0:c1]
    expected = (
        TileState.BLOCKED if not tile.any() else TileState.OPEN if tile.all() else TileState.PARTIAL
    )
    assert mask.tile_state((r0, r1), (c0, c1), n, m) is expected
