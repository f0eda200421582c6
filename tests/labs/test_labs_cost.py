"""The cost lab (§6.6): structure and model numbers only; its timings are never asserted.

Besides the crossover, each row sets the run's h heads of width d_model/h beside one head of
width d_model: the model's counts are checked exactly (integers), the timings only for being
reported."""

from __future__ import annotations

import pytest

from attnlab.cost import breakdown
from attnlab.errors import AttnlabError
from attnlab.labs import cost_timing
from attnlab.labs.measured_cost import CostRow, _crossover


@pytest.fixture(scope="module")
def small():
    return cost_timing(d_model=32, lengths=(32, 16, 64), heads=2, repeats=1)


def test_rows_carry_the_cost_model(small):
    assert [r.n for r in small.rows] == [16, 32, 64]  # sorted
    assert small.model_crossover == 64  # 2 · d_model
    for r in small.rows:
        assert r.model_share == breakdown(r.n, 32).quadratic_share == r.n / (r.n + 64)
        assert min(r.projection_s, r.core_s, r.matmul_s, r.total_s) > 0
        assert 0 < r.measured_share < 1 and 0 < r.matmul_share < 1
        # Projections + core, timed apart, compute what multi_head_attention computes.
        assert r.max_abs_diff < 1e-5


def test_heads_against_one_head_count_the_same_multiply_adds(small):
    # d_model = 32, h = 2: two heads of width 16 against one head of width 32.
    for r in small.rows:
        n = r.n
        assert r.heads_madds == 2 * (2 * n * n * 16)  # h · (Q Kᵀ + A V) of one d_k = 16 head
        assert r.one_head_madds == 2 * n * n * 32  # Q Kᵀ + A V at width d_model
        assert r.heads_madds == r.one_head_madds == breakdown(n, 32).quadratic
        assert isinstance(r.heads_madds, int) and isinstance(r.one_head_madds, int)
    assert [r.heads_madds for r in small.rows] == [16_384, 65_536, 262_144]  # 64 N²


def test_heads_against_one_head_at_the_issue_sizes():
    # Eight heads of width 64 against one head of width 512, at N = 64: the model's integers.
    r = cost_timing(d_model=512, lengths=(64,), heads=8, repeats=1).rows[0]
    assert r.heads_madds == 8 * 2 * 64 * 64 * 64 == 4_194_304
    assert r.one_head_madds == 2 * 64 * 64 * 512 == 4_194_304


def test_the_measured_ratio_is_reported(small):
    columns, rows = small.table()
    for key in ("heads_core_ratio", "heads_matmul_ratio", "heads_madds", "one_head_madds"):
        assert key in columns
    for r, row in zip(small.rows, rows, strict=True):
        assert r.one_head_core_s > 0 and r.one_head_matmul_s > 0
        assert r.heads_core_ratio == pytest.approx(r.core_s / r.one_head_core_s, rel=1e-12)
        assert r.heads_matmul_ratio == pytest.approx(r.matmul_s / r.one_head_matmul_s, rel=1e-12)
        assert row[columns.index("heads_core_ratio")] == r.heads_core_ratio
    last = small.rows[-1]
    sentence = small.summary()[-1]
    assert "2 heads of width 16 against one head of width 32" in sentence
    assert f"{last.heads_madds:,}" in sentence and f"{last.heads_core_ratio:.2f}" in sentence


def test_the_plot_sets_the_model_ratio_beside_the_measured_one(small):
    from attnlab.labs import LABS

    series = {s.name: s for s in LABS["cost"].plot(small).series}
    measured = series["measured: 2 heads ÷ one head, core time"]
    assert measured.y == [r.heads_core_ratio for r in small.rows]
    model = next(s for name, s in series.items() if name.startswith("cost model: 2 heads"))
    assert model.y == [1.0] * len(small.rows) and model.dash


def test_float64_agrees_to_rounding():
    r = cost_timing(d_model=16, lengths=(8,), heads=4, repeats=1, dtype="float64")
    assert r.dtype == "float64" and r.rows[0].max_abs_diff < 1e-12


def _row(n: int, share: float) -> CostRow:
    return CostRow(n, 1.0, 1.0, 1.0, 1.0, share, share, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0, 2, 2)


def test_crossover_interpolates_in_log_n():
    rows = [_row(32, 0.1), _row(64, 0.25), _row(256, 0.75), _row(512, 0.9)]
    assert _crossover(rows, "measured_share") == pytest.approx(128.0)
    assert _crossover(rows[2:], "measured_share") is None  # above one half throughout
    assert _crossover(rows[:2], "matmul_share") is None  # below it throughout


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 30, "heads": 4}, "divide"),
        ({"lengths": (100_000,)}, "GiB"),
        ({"lengths": (0,)}, "lengths"),
        ({"repeats": 0}, "repeats"),
        ({"dtype": "float16"}, "dtype"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        cost_timing(**kwargs)
