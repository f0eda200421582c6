"""The chapter's last "why"s: the projections behind the worked example, one gap copying a value,
several heads, W^O's second reason, causal against no mask, the spread from d_k = 16 to 256,
the two labs' saturation shares, and the cost lab's sentence about the softmax.

Oracles: the chapter's own table and matrices, closed forms (softmax of two scores, √ of a width
ratio), and sampling error.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import attnlab
from attnlab.core.example import EXAMPLE_W_V, EXAMPLE_X, example_projections
from attnlab.figures.equation import build_equations
from attnlab.figures.predict import build_prompts
from attnlab.labs.measured_cost import CostRow, CostTimingResult

# §6.2's table and its W^V, typed from the chapter.
CHAPTER_Q = [[3, -3], [1, 1]]
CHAPTER_K = [[-3, 3], [1, 1]]
CHAPTER_V = [[0, -1], [1, 2]]
CHAPTER_W_V = [[1, 0], [0, 1], [0, 0], [1, 1]]


@pytest.fixture(scope="module")
def equations():
    return {e.id: e for e in build_equations()}


def _meaning(eq, sym: str) -> str:
    return next(s.meaning for s in eq.symbols if s.id == sym)


def test_the_projections_give_the_chapters_q_k_v(equations):
    q, k, v = example_projections()
    assert np.array_equal(EXAMPLE_W_V, CHAPTER_W_V)
    assert np.array_equal(q, CHAPTER_Q) and np.array_equal(k, CHAPTER_K)
    assert np.array_equal(v, CHAPTER_V)
    eq = equations["projections"]
    assert [p.get("sym") for p in eq.parts if "sym" in p] == [
        "q", "x", "w_q", "k", "x", "w_k", "v", "x", "w_v",
    ]  # fmt: skip
    assert "[[3, −3], [1, 1]]" in _meaning(eq, "q")
    assert "[[−3, 3], [1, 1]]" in _meaning(eq, "k")
    assert "[[1, 0], [0, 1], [0, 0], [1, 1]]" in _meaning(eq, "w_v")
    rows = str(np.asarray(EXAMPLE_X).astype(int).tolist()).replace("-", "−")
    assert rows in _meaning(eq, "x")


def test_one_large_gap_copies_one_value(equations):
    gap = 18 / math.sqrt(2)  # token 1's scores, -18/√2 and 0, unmasked
    a2 = 1 / (1 + math.exp(-gap))
    out = (1 - a2) * np.array(CHAPTER_V[0]) + a2 * np.array(CHAPTER_V[1])
    eq = equations["copy"]
    assert f"{a2:.6f}" in _meaning(eq, "a")
    assert f"[{out[0]:.6f}, {out[1]:.6f}]" in _meaning(eq, "o")
    assert f"{np.abs(out - CHAPTER_V[1]).max():.1e}" in _meaning(eq, "v_b")
    assert f"{gap:.3f}" in eq.notes[0] and f"{math.exp(gap):,.0f}" in eq.notes[0]


def test_why_several_heads_and_w_os_second_reason(equations):
    several = " ".join(equations["head"].notes)
    # Two scores of 4 among ten words, the rest 0: each gets e^4 / (2e^4 + 8).
    assert f"{math.exp(4) / (2 * math.exp(4) + 8):.2f} of the weight" in several
    assert "one set of weights" in several and "average" in several
    joined = " ".join(equations["multihead"].notes)
    assert "residual stream" in joined and "any direction" in joined
    # The multi-head figure: 4 heads of d_v = 2 join into 8 columns, d_model = 4.
    assert "h·d_v ≠ d_model" in joined and "(8 × 4)" in joined


def test_why_causal_and_why_encoders_use_no_mask(equations):
    notes = " ".join(equations["causal"].notes)
    assert "token i + 1" in notes and "copy" in notes
    assert "encoder" in notes and "both sides" in notes


def test_a_predict_card_on_the_spread_from_16_to_256():
    card = next(p for p in build_prompts() if p.id == "histogram-spread")
    assert card.kind == "number" and card.figure == "figure-sqrt-dk-histogram"
    assert abs(card.answer - math.sqrt(256 / 16)) < 0.2  # sampling error of 10,000 draws
    assert card.tolerance < 1  # a guess of 16 (the width ratio) is wrong
    assert abs(16 - card.answer) > card.tolerance
    assert {(a.selector, a.value) for a in card.show} >= {("#hist-dk", "256")}


def test_the_gradient_and_saturation_labs_count_one_share():
    trials = 4_000
    a = attnlab.labs.saturation(d_k=128, trials=trials).unscaled_share
    b = attnlab.labs.gradient(widths=(128,), trials=trials).rows[0].unscaled_share
    se = math.sqrt(2 * a * (1 - a) / trials)  # of the difference of two independent shares
    assert abs(a - b) < 4 * se, (a, b)


def _cost(shares: list[tuple[float, float]], measured, matmul) -> CostTimingResult:
    zero = {f.name: 0 for f in dataclasses.fields(CostRow)}
    rows = tuple(
        CostRow(**{**zero, "n": 2 ** (i + 6), "measured_share": m, "matmul_share": p})
        for i, (m, p) in enumerate(shares)
    )
    settings = {"d_model": 64, "heads": 4, "repeats": 1, "dtype": "float32", "seed": 0}
    return CostTimingResult(
        settings, model_crossover=128, measured_crossover=measured, matmul_crossover=matmul,
        rows=rows,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("shares", "measured", "matmul", "earlier"),
    [
        ([(0.3, 0.2), (0.7, 0.6)], 90.0, 110.0, True),
        ([(0.3, 0.3), (0.7, 0.7)], 100.0, 100.0, False),
        ([(0.2, 0.1), (0.4, 0.3)], None, None, False),
        ([(0.6, 0.4), (0.8, 0.7)], None, 100.0, False),
    ],
)
def test_the_cost_summary_says_earlier_only_when_it_was(shares, measured, matmul, earlier):
    said = " ".join(_cost(shares, measured, matmul).summary())
    assert ("moves the timed crossover earlier" in said) is earlier, said
    if measured is None:
        assert "nowhere" in said
