"""Sinusoidal position vectors: the closed form, values worked by hand, and what they are for."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.positions import sinusoidal
from tolerances import F64

FAST = settings(max_examples=40, deadline=None)


def closed_form(n: int, d_model: int, base: float = 10000.0) -> list[list[float]]:
    """Vaswani et al. (2017) §3.5, entry by entry: even columns sine, odd columns cosine."""
    table = []
    for pos in range(n):
        row = []
        for col in range(d_model):
            angle = pos / base ** ((col - col % 2) / d_model)
            row.append(math.sin(angle) if col % 2 == 0 else math.cos(angle))
        table.append(row)
    return table


@FAST
@given(st.integers(1, 40), st.integers(1, 33))
def test_matches_the_closed_form(n, d_model):
    table = sinusoidal(n, d_model)
    assert table.shape == (n, d_model) and table.dtype == np.float64
    np.testing.assert_allclose(table, closed_form(n, d_model), **F64)


def test_values_by_hand():
    table = sinusoidal(3, 4)
    # Position 0: sin 0 = 0 and cos 0 = 1 in every pair.
    np.testing.assert_array_equal(table[0], [0, 1, 0, 1])
    # Position 1, d_model 4: frequencies 1 and 1/10000^(2/4) = 1/100.
    np.testing.assert_allclose(
        table[1], [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004], atol=1e-10
    )
    np.testing.assert_allclose(table[2, :2], [0.9092974268, -0.4161468365], atol=1e-10)


def test_odd_width_ends_with_a_sine_column():
    table = sinusoidal(4, 5)
    np.testing.assert_allclose(table[:, 4], np.sin(np.arange(4) / 10000 ** (4 / 5)), **F64)


def test_base_changes_the_frequencies():
    np.testing.assert_allclose(sinusoidal(3, 4, base=4.0)[2, 2], math.sin(2 / 2), **F64)


def test_positions_break_permutation_equivariance():
    # §6.5: with position vectors added, shuffling the tokens changes the outputs themselves.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 8))
    perm = np.array([1, 0, 2, 3, 4])
    pe = sinusoidal(5, 8)
    plain = al.attention(x[perm], x[perm], x[perm])
    np.testing.assert_allclose(plain, al.attention(x, x, x)[perm], **F64)
    shuffled = x[perm] + pe
    original = x + pe
    moved = al.attention(shuffled, shuffled, shuffled)
    assert not np.allclose(moved, al.attention(original, original, original)[perm], atol=1e-3)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_bad_sizes(bad):
    with pytest.raises(al.AttnlabError, match="positive integer"):
        sinusoidal(bad, 4)
    with pytest.raises(al.AttnlabError, match="d_model"):
        sinusoidal(4, bad)


@pytest.mark.parametrize("base", [0.0, -10.0, float("nan"), float("inf"), "10000"])
def test_bad_base(base):
    with pytest.raises(al.AttnlabError, match="base"):
        sinusoidal(4, 4, base=base)
