"""Safe softmax and logsumexp: closed forms, properties, PyTorch, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.errors import FullyMaskedRowError, NonFiniteInputError
from tolerances import F64

FAST = settings(max_examples=40, deadline=None)

finite = st.floats(-50, 50, allow_nan=False)
rows = st.lists(finite, min_size=1, max_size=8)


def test_exercise_weights_by_hand():
    # Scores [2, 0, 0]: e^2 / (e^2 + 2) and 1 / (e^2 + 2) twice.
    total = math.exp(2) + 2
    expected = [math.exp(2) / total, 1 / total, 1 / total]
    np.testing.assert_allclose(al.softmax([2.0, 0.0, 0.0]), expected, **F64)
    np.testing.assert_allclose(al.softmax([2, 0, 0]), expected, **F64)


@FAST
@given(rows)
def test_rows_are_probabilities(row):
    w = al.softmax(np.array(row))
    assert np.all(w >= 0)
    assert math.isclose(w.sum(), 1.0, abs_tol=1e-12)


@FAST
@given(rows, st.floats(-1e3, 1e3))
def test_adding_a_constant_changes_nothing(row, shift):
    row = np.array(row)
    np.testing.assert_allclose(al.softmax(row + shift), al.softmax(row), **F64)


@FAST
@given(rows)
def test_matches_plain_exponentials(row):
    # Small scores: the textbook formula without any shift is exact enough to be the oracle.
    e = [math.exp(x) for x in row]
    np.testing.assert_allclose(al.softmax(np.array(row)), [x / sum(e) for x in e], **F64)


def test_huge_scores_do_not_overflow():
    w = al.softmax(np.array([1000.0, 0.0, -1000.0]))
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [1.0, math.exp(-1000), 0.0], **F64)
    # Equal huge scores split evenly, where exp(1000) alone would be inf.
    np.testing.assert_allclose(al.softmax([1000.0, 1000.0]), [0.5, 0.5], **F64)


def test_minus_inf_gets_exactly_zero_weight():
    w = al.softmax(np.array([[0.0, -np.inf, 1.0], [-np.inf, 3.0, -np.inf]]))
    assert w[0, 1] == 0.0
    assert w[1].tolist() == [0.0, 1.0, 0.0]
    np.testing.assert_allclose(w[0], [1 / (1 + math.e), 0, math.e / (1 + math.e)], **F64)


def test_axis_argument():
    x = np.random.default_rng(0).normal(size=(3, 4, 5))
    for axis in range(3):
        w = al.softmax(x, axis=axis)
        np.testing.assert_allclose(w.sum(axis=axis), 1.0, **F64)
        np.testing.assert_allclose(w, np.moveaxis(al.softmax(np.moveaxis(x, axis, -1)), -1, axis))


def test_dtypes():
    assert al.softmax(np.zeros(3, np.float32)).dtype == np.float32
    assert al.softmax(np.zeros(3)).dtype == np.float64
    assert al.softmax(np.zeros(3, np.int32)).dtype == np.float64


def test_all_minus_inf_row_raises_naming_the_row():
    x = np.zeros((3, 2))
    x[2] = -np.inf
    with pytest.raises(FullyMaskedRowError, match=r"row 2\b") as info:
        al.softmax(x)
    assert info.value.rows == ((2,),)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_plus_inf_are_refused(bad):
    with pytest.raises(NonFiniteInputError, match="index"):
        al.softmax([0.0, bad])
    with pytest.raises(NonFiniteInputError):
        al.logsumexp([0.0, bad])


def test_non_real_input_is_refused():
    with pytest.raises(al.AttnlabError, match="real"):
        al.softmax(np.array(["a", "b"]))


@FAST
@given(rows)
def test_logsumexp_against_plain_python(row):
    expected = math.log(sum(math.exp(x) for x in row))
    assert math.isclose(al.logsumexp(np.array(row)), expected, rel_tol=0, abs_tol=1e-12)


def test_logsumexp_large_and_empty():
    assert math.isclose(al.logsumexp([1000.0, 999.0]), 1000 + math.log1p(math.exp(-1)))
    assert al.logsumexp([-np.inf, -np.inf]) == -np.inf
    out = al.logsumexp(np.array([[0.0, 0.0], [-np.inf, -np.inf]]))
    np.testing.assert_allclose(out, [math.log(2), -np.inf])


@pytest.mark.oracle
def test_against_torch(torch):
    x = np.random.default_rng(1).normal(scale=10, size=(4, 6, 7))
    x[0, 1, :3] = -np.inf
    for axis in (-1, 1):
        np.testing.assert_allclose(
            al.softmax(x, axis=axis), torch.softmax(torch.from_numpy(x), dim=axis).numpy(), **F64
        )
    np.testing.assert_allclose(
        al.logsumexp(x), torch.logsumexp(torch.from_numpy(x), dim=-1).numpy(), **F64
    )
