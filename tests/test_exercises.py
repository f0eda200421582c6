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


# -- strict answers, and a check that agrees with its message ----------------


@pytest.mark.parametrize(
    "answer", ["1_959", "1,959", "0x1", "nan", "-inf", "infinity", "1.9.5", "1e", "- 1.9", "²"]
)
def test_only_a_plain_decimal_number_is_read(answer):
    # float() reads "1_959" as 1959 and "nan"/"infinity" as numbers; an answer must not.
    with pytest.raises(AttnlabError, match="exercise 2"):
        check(2, answer)


@pytest.mark.parametrize("answer", ["1.96", "+1.96", "1.96e0", "196e-2", ".1959e1", "2."])
def test_plain_decimal_forms_are_read(answer):
    assert check(2, answer).expected == get(2).answer  # read, right or wrong


@pytest.mark.parametrize(
    ("answer", "correct"),
    [(1.969, True), ("1.969", True), (1.949, True), ("1.949", True), (1.9691, False),
     (1.9489, False), (1.97, False), (1.948, False)],
)  # fmt: skip
def test_exercise_2_accepts_the_tolerance_around_the_value_it_prints(answer, correct):
    verdict = check(2, answer)
    assert verdict.correct is correct, verdict.message
    if not correct:
        # "expected 1.959 (within 0.01)": the message's own numbers say why it is wrong.
        shown, within = re.search(
            r"expected ([\d.]+) \(within ([\d.]+)\)", verdict.message
        ).groups()
        assert abs(float(answer) - float(shown)) > float(within)


@pytest.mark.parametrize("number", [2, 5])
@pytest.mark.parametrize("step", [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5])
def test_the_verdict_and_its_message_agree(number, step):
    ex = get(number)
    shown = float(f"{ex.answer:.4g}")
    tol = ex.tolerance or 1.0  # exercise 5 is exact: steps of 1 around 8192
    answer = round(shown + step * tol, 6)
    verdict = check(number, answer)
    assert verdict.correct is (abs(step) <= (1.0 if ex.tolerance else 0.0)), verdict.message
    assert f"{shown:g}" in verdict.message
