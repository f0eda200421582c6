"""The cost lab (§6.6): structure and model numbers only; its timings are never asserted."""

from __future__ import annotations

import pytest

from attnlab.cost import breakdown
from attnlab.errors import AttnlabError
from attnlab.labs import cost_timing
from attnlab.labs.cost import CostRow, _crossover


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


def test_float64_agrees_to_rounding():
    r = cost_timing(d_model=16, lengths=(8,), heads=4, repeats=1, dtype="float64")
    assert r.dtype == "float64" and r.rows[0].max_abs_diff < 1e-12


def _row(n: int, share: float) -> CostRow:
    return CostRow(n, 1.0, 1.0, 1.0, 1.0, share, share, 0.5, 0.0)


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
