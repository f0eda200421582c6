"""The chapter's seven exercises, with answers and worked solutions computed by attnlab itself.

Kinds: "check" (recall), "apply" (compute or prove), "extend" (think past the text). Exercises
2 and 5 have numeric answers, and ``check`` grades them: correct when the answer is within the
tolerance of the expected value as printed (1.959 ± 0.01 for exercise 2; 8192 exactly for 5). The others are written answers that no program can grade: ``check`` returns
``correct=None`` with the worked solution to compare against, whatever the answer says.

Errors (both ``AttnlabError``, so the CLI exits 2 and the web API answers 422): an exercise
number outside 1..7, and a numeric exercise's answer that is not a finite number.

>>> check(2, "1.96").correct, check(5, 8192).correct, check(5, 8000).correct
(True, True, False)
>>> check(4, "anything").correct is None
True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from attnlab import attention
from attnlab.cost import breakdown, crossover_length
from attnlab.errors import AttnlabError
from attnlab.masks import Causal

__all__ = ["EXERCISES", "Exercise", "Verdict", "check", "get"]


@dataclass(frozen=True)
class Exercise:
    number: int  # 1..7, the order in the chapter
    kind: str  # "check" | "apply" | "extend"
    question: str
    answer: float | None  # None for a written exercise
    tolerance: float | None
    solution: str

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def _repr_html_(self) -> str:  # Jupyter: a table, the solution folded away
        from attnlab.labs._display import exercise_html

        return exercise_html(self)


@dataclass(frozen=True)
class Verdict:
    number: int
    correct: bool | None  # None: a written exercise, compare with the solution yourself
    expected: float | None
    tolerance: float | None
    message: str
    solution: str

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def _repr_html_(self) -> str:  # Jupyter: right or wrong in colour, then the solution
        from attnlab.labs._display import verdict_html

        return verdict_html(self)


def _matrix_text(table: np.ndarray) -> str:
    cells = [["-inf" if np.isneginf(x) else f"{x:g}" for x in row] for row in table]
    width = max(len(c) for row in cells for c in row)
    return "\n".join("    [ " + "  ".join(c.rjust(width) for c in row) + " ]" for row in cells)


def _exercise_2() -> tuple[float, str]:
    # Scores [2, 0, 0] are already scaled: one 1-wide query against three keys, scale 1.
    out, weights = attention([[1.0]], [[2.0], [0.0], [0.0]], [[1.0], [4.0], [7.0]], scale=1.0,
                             return_weights=True)  # fmt: skip
    w = weights[0]
    return float(out[0, 0]), (
        f"Softmax turns [2, 0, 0] into weights e^2/(e^2 + 2) = {w[0]:.4f} for the first key and "
        f"1/(e^2 + 2) = {w[1]:.4f} for each of the other two. The output is the weighted average "
        f"of the values: {w[0]:.4f}·1 + {w[1]:.4f}·4 + {w[2]:.4f}·7 = {out[0, 0]:.4f}, "
        "pulled towards the first value because its score is highest."
    )


def _exercise_4() -> str:
    mask = Causal().additive(3)  # (3, 3): 0 where allowed, -inf where blocked
    scores = np.random.default_rng(4).normal(scale=5.0, size=(3, 3))  # any scores at all
    _, weights = attention(scores, np.eye(3), np.eye(3), mask=Causal(), scale=1.0,
                           return_weights=True)  # fmt: skip
    first = "[" + ", ".join(f"{w:g}" for w in weights[0]) + "]"
    return (
        "Query i may look at keys 1..i only, so everything above the diagonal is blocked:\n"
        f"{_matrix_text(mask)}\n"
        "Row 1 leaves a single key open, key 1, and softmax must give all of the weight to it: "
        f"[1, 0, 0] whatever the scores. (attnlab, on random scores: {first}.)"
    )


def _exercise_6() -> str:
    v = np.random.default_rng(6).normal(size=(5, 3))  # (N, d_v) values
    x = np.random.default_rng(60).normal(size=(5, 4))  # (N, d_k) queries and keys
    out = attention(x, x, v, scale=0.0)  # scale 0: every score 0, so weights exactly 1/N
    gap = float(np.abs(out - v.mean(axis=0)).max())
    return (
        "Weights of exactly 1/N make every query's output the same vector: the mean of all the "
        f"value rows. (attnlab, scale 0 on random data: the largest gap between an output row "
        f"and the mean of V is {gap:.1e}.) Far from a waste: every position gets one digest of "
        "the entire sequence, a background average to build on, and trained heads do drift "
        "towards nearly even weights when nothing in particular stands out (attention sinks, "
        "§16.6, are a cousin of this habit)."
    )


def _exercise_7() -> str:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(6, 4))  # (N, d) token vectors
    order = rng.permutation(6)  # P·X = X[order]
    gap = float(np.abs(attention(x[order], x[order], x[order]) - attention(x, x, x)[order]).max())
    return (
        "Let π be the reordering, so row i of the shuffled input is row π(i) of X. The "
        "projections act row by row, so the shuffled queries, keys and values are the old ones "
        "with their rows moved by π. Then score (i, j) of the shuffled table is q_π(i)·k_π(j), "
        "the old score (π(i), π(j)). Row i of the new table therefore holds the same numbers as "
        "old row π(i), merely listed in another column order, and softmax does not care about "
        "order within a row: weight (i, j) is the old weight (π(i), π(j)). The new output row i "
        "sums weight (i, j) times value row π(j) over j, which runs over every key exactly once, "
        "so it equals the old output row π(i). In matrix form: Attention(PX) = P·Attention(X). "
        f"(attnlab on random 6 x 4 data: max |Attention(PX) - P·Attention(X)| = {gap:.1e}, "
        "rounding only.)"
    )


def _build() -> tuple[Exercise, ...]:
    answer_2, solution_2 = _exercise_2()
    n = crossover_length(4096)
    at = breakdown(n, 4096)
    return (
        Exercise(1, "check",
                 "Give a one-sentence job description for a token's query, for its key and for "
                 "its value.", None, None,
                 "Query: what this token is searching for among the others. Key: how this "
                 "token presents itself, the thing queries are matched against. Value: the "
                 "content this token passes on to whoever attends to it."),
        Exercise(2, "apply",
                 "One query has already-scaled scores [2, 0, 0] against three keys whose values "
                 "are the single numbers 1, 4 and 7. What number does attention output?",
                 answer_2, 0.01, solution_2),
        Exercise(3, "apply",
                 "z is the sum of d_k independent terms, each with mean 0 and variance 1. With "
                 "the variance rules of §3.2, show that z/√d_k has variance 1.", None, None,
                 "Independent terms: their variances add, so Var(z) = d_k · 1 = d_k. "
                 "Multiplying a variable by c multiplies its variance by c²; with c = 1/√d_k "
                 "that is 1/d_k, so Var(z/√d_k) = d_k/d_k = 1 at every width. "
                 "(`attnlab lab variance` measures both sides.)"),
        Exercise(4, "apply",
                 "Build the 3 x 3 causal mask. Then argue what the first row of attention "
                 "weights has to be, no matter which scores come in.", None, None, _exercise_4()),
        Exercise(5, "apply",
                 "Multi-head attention costs 4·N·d_model² + 2·N²·d_model multiply-adds. With "
                 "d_model = 4096, how long must the sequence get before the N² term is the "
                 "bigger one?",
                 float(n), 0.0,
                 f"2N²d > 4Nd² once N > 2d = {n}. At N = {n} the two terms tie at "
                 f"{at.quadratic:.3e} multiply-adds each (attnlab.cost.breakdown); any longer "
                 "sequence and the N² score work dominates."),
        Exercise(6, "extend",
                 "A head ends up giving every one of the N tokens the same weight, 1/N. What "
                 "does each query receive, and why could such a head still earn its place?", None, None,
                 _exercise_6()),
        Exercise(7, "extend",
                 "Take self-attention with no mask and no position vectors, and feed it PX "
                 "instead of X, where P is a permutation matrix. Show that what comes out is P "
                 "times the original output (permutation equivariance).", None, None, _exercise_7()),
    )  # fmt: skip


EXERCISES: tuple[Exercise, ...] = _build()


def get(number) -> Exercise:
    """The exercise numbered ``number`` (1..7)."""
    if isinstance(number, bool) or not isinstance(number, int | np.integer):
        raise AttnlabError(f"expected an exercise number from 1 to 7, but got {number!r} instead")
    if not 1 <= number <= len(EXERCISES):
        raise AttnlabError(
            f"expected an exercise number from 1 to {len(EXERCISES)}, but got {number} instead"
        )
    return EXERCISES[int(number) - 1]


# A plain decimal number: ASCII digits with an optional point, sign and exponent. Stricter
# than float(), which also reads "1_959" (as 1959), "nan", "inf", "infinity" and other
# scripts' digits ("١٩٥٩" as 1959), which a grader should not guess at.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def _as_number(number: int, answer) -> float:
    if isinstance(answer, str) and _NUMBER.fullmatch(answer.strip()):
        value = float(answer.strip())
    elif isinstance(answer, int | float | np.integer | np.floating) and not isinstance(
        answer, bool | np.bool_
    ):
        value = float(answer)
    else:
        raise AttnlabError(
            f"expected a number such as 1.96 as the answer to exercise {number}, but got "
            f"{answer!r} instead"
        )
    if not math.isfinite(value):
        raise AttnlabError(
            f"expected a finite number as the answer to exercise {number}, but got {answer!r}"
        )
    return value


def _shown(value: float) -> str:
    """The expected value as the messages print it: 4 significant digits (1.959, 8192)."""
    return f"{value:.4g}"


def check(number, answer) -> Verdict:
    """Grade ``answer`` (a number, or text holding one) against exercise ``number``.

    Numeric exercises: correct when the answer is within the tolerance of the expected value
    as the message prints it (1.959 for exercise 2, so 1.969 and 1.949 pass, as "expected
    1.959 (within 0.01)" says). Written exercises: ``correct`` is None and the verdict carries
    the worked solution; ``answer`` is not read.
    """
    ex = get(number)
    if ex.answer is None:
        return Verdict(ex.number, None, None, None,
                       f"Exercise {ex.number} has a written answer: compare yours with the "
                       "worked solution.", ex.solution)  # fmt: skip
    value, tol = _as_number(ex.number, answer), ex.tolerance or 0.0
    shown = _shown(ex.answer)
    # A hair of slack for binary rounding: 1.969 - 1.959 is 0.010000000000000009 in floats.
    correct = abs(value - float(shown)) <= tol + 1e-9 * max(1.0, abs(value))
    within = "exactly" if tol == 0 else f"within {tol:g}"
    if correct:
        message = f"Correct: {value:g} matches {shown} ({within})."
    else:
        message = f"Not quite: expected {shown} ({within}), but got {value:g}."
    return Verdict(ex.number, correct, ex.answer, ex.tolerance, message, ex.solution)
