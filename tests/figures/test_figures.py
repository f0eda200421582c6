"""The figure builders: their numbers against attnlab's core, their refusals, and their layering
(figures are data: they never import plotly, fastapi or rich)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab import labs
from attnlab.errors import AttnlabError, ShapeError
from attnlab.figures import (
    build_equation,
    build_histogram,
    build_multihead,
    build_permutation,
    build_stepper,
)
from attnlab.figures.multihead import SENTENCE
from attnlab.figures.permutation import EMBEDDINGS
from attnlab.figures.stepper import MAX_WIDTH
from attnlab.web.app import STATIC
from conftest import SMALL_LABS
from tolerances import CHAPTER, F64


def strict_json(fig) -> dict:
    return json.loads(json.dumps(fig.as_dict(), allow_nan=False))


# -- stepper -------------------------------------------------------------------------------------


def test_stepper_default_is_the_worked_example():
    fig = build_stepper()
    t = fig.tables
    assert t["scores"].values == [[-18, 0], [0, 2]]
    np.testing.assert_allclose(t["weights"].values, [[1, 0], [0.196, 0.804]], **CHAPTER)
    np.testing.assert_allclose(t["output"].values, [[0, -1], [0.804, 1.413]], **CHAPTER)
    assert t["masked"].values[0][1] == "-inf" and t["mask"].values == [[0, "-inf"], [0, 0]]
    assert fig.scale == pytest.approx(1 / np.sqrt(2)) and fig.d_k == 2
    strict_json(fig)


def test_stepper_steps_name_existing_tables():
    fig = build_stepper(causal=False, scaled=False)
    assert fig.scale == 1.0 and fig.tables["mask"].values == [[0, 0], [0, 0]]
    for step in fig.steps:
        assert all(name in fig.tables for name in step.inputs)
        assert step.result == "" or step.result in fig.tables
        assert step.feeds in ("", "qk", "cell", "row", "av", "ta")


def test_stepper_cross_attention_shapes():
    q, k, v = np.ones((3, 2)), np.arange(8.0).reshape(4, 2), np.arange(12.0).reshape(4, 3)
    fig = build_stepper(q, k, v, causal=False)
    np.testing.assert_allclose(fig.tables["output"].values, al.attention(q, k, v), **F64)
    assert fig.tables["output"].cols == ["dim 1", "dim 2", "dim 3"]


def test_stepper_rows_with_no_key_get_a_message():
    eye = np.eye(3)
    fig = build_stepper(eye, eye, eye, causal=False, blocked=[[1, 0], [1, 1], [1, 2]])
    assert fig.row_errors[0] is None and fig.row_errors[2] is None
    assert "query 2 may attend to no key" in fig.row_errors[1]
    assert "by hand" in fig.row_errors[1]
    assert fig.tables["weights"].values[1] == [None, None, None]
    assert fig.tables["masked"].values[1] == ["-inf"] * 3  # blocked, not missing
    np.testing.assert_allclose(
        [fig.tables["output"].values[i] for i in (0, 2)], al.attention(eye, eye, eye)[[0, 2]], **F64
    )
    strict_json(fig)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q": np.ones((33, 2))}, AttnlabError, r"1 to 32 rows"),
        ({"q": np.ones((1, MAX_WIDTH + 1))}, AttnlabError, rf"1 to {MAX_WIDTH} columns"),
        ({"q": [[1, 2], [3]]}, AttnlabError, "rectangular"),
        ({"q": [[2000.0, 0.0]]}, AttnlabError, "within ±1000"),
        ({"q": np.ones((2, 3))}, ShapeError, "d_k"),
        ({"blocked": [[2, 0]]}, AttnlabError, r"blocked\[0\]"),
        ({"blocked": [[0]]}, AttnlabError, r"blocked\[0\]"),
    ],
)
def test_stepper_refusals(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_stepper(**kwargs)


# -- equation ------------------------------------------------------------------------------------


def test_equation_symbols_point_at_parts_of_the_page():
    page = (STATIC / "index.html").read_text()
    steps = {s.id for s in build_stepper().steps}
    for symbol in build_equation().symbols:
        assert f'id="{symbol.target}"' in page
        assert f'data-symbol="{symbol.id}"' in page
        assert symbol.step in steps


# -- histogram -----------------------------------------------------------------------------------


def test_histogram_calls_the_labs():
    fig = build_histogram(128)
    sat = labs.saturation(d_k=128, keys=64, trials=500, threshold=0.99, seed=0)
    assert (fig.unscaled_share, fig.scaled_share, fig.gradient_term) == (
        sat.unscaled_share,
        sat.scaled_share,
        sat.gradient_term,
    )
    assert fig.predicted_std == pytest.approx(np.sqrt(128)) and fig.std == pytest.approx(
        np.sqrt(128), rel=0.05
    )
    scaled = build_histogram(128, scaled=True)
    assert scaled.saturated_share == sat.scaled_share == 0.0 and scaled.predicted_std == 1.0
    strict_json(fig)


@pytest.mark.parametrize("d_k", [15, 257, 64.0, True, "64"])
def test_histogram_refuses_widths_off_the_slider(d_k):
    with pytest.raises(AttnlabError, match="d_k"):
        build_histogram(d_k)


# -- permutation ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(order=st.permutations(range(5)))
def test_permutation_outputs_follow_their_tokens(order):
    fig = build_permutation(order)
    assert [row.id for row in fig.tokens] == list(order)
    assert max(row.max_change for row in fig.tokens) < 1e-12
    np.testing.assert_allclose(
        [row.output for row in fig.tokens],
        al.attention(EMBEDDINGS[list(order)], EMBEDDINGS[list(order)], EMBEDDINGS[list(order)]),
        **F64,
    )


def test_permutation_with_positions_depends_on_the_slot():
    assert max(r.max_change for r in build_permutation(positions=True).tokens) == 0.0
    moved = build_permutation([1, 0, 2, 3, 4], positions=True)
    assert max(r.max_change for r in moved.tokens) > 0.1


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [0, 0, 1, 2, 3], [1, 2, 3, 4, 5]])
def test_permutation_refuses_an_order_that_is_not_a_reordering(order):
    with pytest.raises(AttnlabError, match="order"):
        build_permutation(order)


# -- multi-head ----------------------------------------------------------------------------------


def test_multihead_heads_do_what_their_names_say():
    fig = build_multihead(SENTENCE.index("it"))
    weights = np.array([h.weights for h in fig.heads])  # (4, N, N)
    np.testing.assert_allclose(weights, al.softmax(np.array([h.scores for h in fig.heads])), **F64)
    np.testing.assert_allclose(weights.sum(-1), 1.0, **F64)
    top = weights.argmax(-1)  # (4, N)
    assert list(top[0, 1:]) == list(range(len(SENTENCE) - 1))  # previous word
    assert SENTENCE[top[1, SENTENCE.index("it")]] == "animal"
    assert SENTENCE[top[2, SENTENCE.index("cross")]] == "animal"
    assert SENTENCE[top[2, SENTENCE.index("was")]] == "it"
    assert {SENTENCE[j] for j in top[3]} <= {"The", "because"}
    assert fig.picked.top == list(top[:, SENTENCE.index("it")])
    strict_json(fig)


@pytest.mark.parametrize("query", [-1, 10, 2.0, True])
def test_multihead_refuses_a_query_outside_the_sentence(query):
    with pytest.raises(AttnlabError, match="query"):
        build_multihead(query)


# -- lab plots -----------------------------------------------------------------------------------


# Which column of each lab's table each plotted series is, written down here from the labs'
# docs (not read from the spec): a plot of the wrong column, or of a column misaligned with x,
# fails. (The saturation lab plots a histogram of its scores, and the proof plot's SEs are
# derived per row; those two are drawn, not tabulated.)
PLOTTED = {
    # The two ratios are equal by construction, so the plot draws them as one named line.
    "variance": (
        "width",
        {"Var(q·k) / d_k = Var(q·k / √d_k) (equal by construction)": ("var_ratio", "scaled_var")},
    ),
    "sweep": ("width", {"unscaled": "unscaled_share", "scaled by 1/√d_k": "scaled_share"}),
    "permutation": (
        None,
        {
            "without positions": "change_without_positions",
            "with position vectors": "change_with_positions",
        },
    ),
    "cost": (
        "n",
        {
            "measured: core with softmax": "measured_share",
            "measured: Q Kᵀ and A V only": "matmul_share",
            "cost model 2N²d / (4Nd² + 2N²d)": "model_share",
            "measured: 4 heads ÷ one head, core time": "heads_core_ratio",
        },
    ),
}


@pytest.mark.parametrize("name", list(PLOTTED))
def test_lab_plots_draw_the_columns_of_the_labs_own_table(name):
    result = labs.LABS[name](**SMALL_LABS[name])
    columns, rows = result.table()
    column = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
    plot = lab_plot(result)
    x_column, series = PLOTTED[name]
    if x_column is not None:
        assert plot.x == column[x_column]
    drawn = {s.name: s.y for s in plot.series}
    for label, keys in series.items():
        for key in (keys,) if isinstance(keys, str) else keys:
            assert drawn[label] == pytest.approx(column[key], rel=1e-12), (label, key)
    assert plot.words == result.summary()


# -- layering ------------------------------------------------------------------------------------


def lab_plot(result):
    return labs.LABS[result.lab].figure(result)


def test_figures_import_no_plotting_web_or_terminal_library():
    code = (
        "import sys, attnlab.figures, attnlab.labs._plotly;"
        "print(sorted(m for m in ('plotly', 'fastapi', 'rich', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_figure_sources_do_not_name_those_libraries():
    from attnlab import figures

    for path in figures.__path__:
        for source in Path(path).glob("*.py"):
            assert not re.search(
                r"^\s*(from|import) (plotly|fastapi|rich)", source.read_text(), re.M
            )


def test_histogram_gap_shares_match_the_normal_closed_form_at_a_wide_width():
    # q·k1 − q·k2 = q·(k1 − k2) has variance 2·d_k; at d_k = 256 it is close to normal (excess
    # kurtosis 3/d_k), so P(|gap| > g) ≈ 2(1 − Φ(g / √(2 d_k))), and after 1/√d_k, with √2.
    from math import erf, sqrt

    from attnlab.figures.histogram import GAP_PAIRS, GAPS, build_histogram

    def tail(z: float) -> float:
        return 1.0 - erf(z / sqrt(2.0))  # 2(1 − Φ(z))

    fig = build_histogram(256)
    assert [g.gap for g in fig.gaps] == list(GAPS)
    se = 0.5 / sqrt(GAP_PAIRS)  # the largest binomial standard error
    for g in fig.gaps:
        assert abs(g.unscaled_share - tail(g.gap / sqrt(2 * 256))) < 4 * se + 0.01
        assert abs(g.scaled_share - tail(g.gap / sqrt(2))) < 4 * se + 0.01
        assert g.ratio == pytest.approx(np.exp(g.gap))
    # §6.3: at d_k = 128 a gap of 20 is common unscaled, and never seen scaled.
    wide = {g.gap: g for g in build_histogram(128).gaps}[20.0]
    assert wide.unscaled_share > 0.15 and wide.scaled_share == 0.0
