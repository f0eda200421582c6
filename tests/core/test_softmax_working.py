"""The softmax of one row worked by hand (``core/softmax_working.py``), the one working that
``attnlab example`` prints and the stepper figure shows: checked against closed forms, the
library's softmax and the chapter's worked example."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnlab as al
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.core.numbers import MASKED
from attnlab.core.softmax_working import EXP_LIMIT, softmax_working
from attnlab.figures.stepper import build_stepper


def test_two_scores_give_the_closed_form_weights_and_gap():
    work = softmax_working([0.0, 2.0])
    assert work.exps == [1.0, pytest.approx(math.e**2)]
    assert work.total == pytest.approx(1.0 + math.e**2)
    assert work.weights == pytest.approx([1 / (1 + math.e**2), math.e**2 / (1 + math.e**2)])
    assert work.gap == 2.0 and work.gap_ratio == pytest.approx(math.e**2)
    assert work.shift == 0.0


@pytest.mark.parametrize("blocked", [MASKED, float("-inf"), np.float64(-np.inf)])
def test_a_blocked_key_has_no_exponential_and_no_weight(blocked):
    work = softmax_working([1.5, blocked, -0.5])
    assert work.exps[1] is None and work.weights[1] is None
    assert work.weights[0] + work.weights[2] == pytest.approx(1.0)
    assert work.gap == 2.0


def test_a_row_with_no_allowed_key_has_no_working():
    assert softmax_working([MASKED, float("-inf")]) is None


def test_scores_past_the_limit_are_shifted_by_the_top_one_and_keep_the_weights():
    row = [EXP_LIMIT * 20, EXP_LIMIT * 20 - 1.0, float("-inf")]
    work = softmax_working(row)
    assert work.shift == row[0]
    assert work.exps[:2] == [1.0, pytest.approx(math.exp(-1.0))]
    np.testing.assert_allclose(work.weights[:2] + [0.0], al.softmax(np.array(row)), rtol=1e-12)


def test_a_gap_too_wide_to_exponentiate_has_no_ratio():
    work = softmax_working([800.0, 0.0])
    assert work.gap == 800.0 and work.gap_ratio is None


def test_the_stepper_shows_the_worked_example_rows_of_the_chapter():
    # §6.2 with the causal mask: query 1 sees key 1 only; query 2's scaled scores give the
    # weights the library's softmax gives.
    trace = al.trace_attention(EXAMPLE_Q, EXAMPLE_K, EXAMPLE_V, al.masks.Causal())
    rows = build_stepper().softmax
    assert rows[0].weights == [1.0, None] and rows[0].gap is None
    np.testing.assert_allclose(rows[1].weights, trace.weights[1], rtol=1e-12)
