"""The chapter's exercises: right answers accepted, wrong ones rejected, solutions worked by attnlab."""

from __future__ import annotations

import math
import re

import pytest

from attnlab import exercises
from attnlab.errors import AttnlabError
from attnlab.exercises import EXERCISES, check, get


def test_seven_exercises_in_the_chapter_order():
    assert [ex.number for ex in EXERCISES] == [1, 2, 3, 4, 5, 6, 7]
    assert [ex.kind for ex in EXERCISES] == ["check"] + ["apply"] * 4 + ["extend"] * 2
    assert [ex.number for ex in EXERCISES if ex.answer is not None] == [2, 5]
    assert all(ex.question and ex.solution for ex in EXERCISES)
    assert get(3) is EXERCISES[2]


def test_numeric_answers_are_computed_not_typed():
    # Exercise 2 by hand: (e² · 1 + 4 + 7) / (e² + 2).
    e2 = math.exp(2)
    assert get(2).answer == pytest.approx((e2 + 11) / (e2 + 2), abs=1e-12)
    assert round(get(2).answer, 3) == 1.959 and get(2).tolerance == 0.01
    assert get(5).answer == 8192 and get(5).tolerance == 0


@pytest.mark.parametrize(
    ("number", "answer", "correct"),
    [
        (2, 1.959, True),
        (2, "1.96", True),
        (2, " 1.95 ", True),
        (2, 1.97, False),
        (2, 1.9, False),
        (2, -1.959, False),
        (5, 8192, True),
        (5, "8192", True),
        (5, 8192.0, True),
        (5, 8191, False),
        (5, 8192.5, False),
        (5, 4096, False),
    ],
)
def test_numeric_check(number, answer, correct):
    verdict = check(number, answer)
    assert verdict.correct is correct
    assert verdict.expected == get(number).answer and verdict.tolerance == get(number).tolerance
    assert verdict.message.startswith("Correct" if correct else "Not quite")
    assert verdict.solution == get(number).solution


@pytest.mark.parametrize("number", [1, 3, 4, 6, 7])
def test_written_exercises_return_the_worked_solution_ungraded(number):
    verdict = check(number, "whatever I wrote")
    assert verdict.correct is None and verdict.expected is None
    assert verdict.solution == get(number).solution
    assert "written" in verdict.message


def test_exercise_4_mask_and_first_row_come_from_the_library():
    solution = get(4).solution
    assert solution.count("-inf") == 3  # above the diagonal of a 3 x 3 causal mask
    assert "on random scores: [1, 0, 0]" in solution


def test_exercises_6_and_7_report_library_checks_at_rounding_level():
    for number in (6, 7):
        (gap,) = re.findall(r"\d\.\de[+-]\d\d", get(number).solution)
        assert float(gap) < 1e-12


@pytest.mark.parametrize("number", [0, 8, -1, "2", 2.0, True, None])
def test_unknown_exercise_number(number):
    with pytest.raises(AttnlabError, match="exercise number from 1 to 7"):
        check(number, 1)


@pytest.mark.parametrize("answer", ["abc", "", None, [1.959], True, math.nan, "inf"])
def test_non_numeric_answer_to_a_numeric_exercise(answer):
    with pytest.raises(AttnlabError, match="exercise 2"):
        check(2, answer)


def test_verdicts_and_exercises_serialise():
    assert check(2, 2).as_dict()["correct"] is False
    assert exercises.get(1).as_dict()["answer"] is None
