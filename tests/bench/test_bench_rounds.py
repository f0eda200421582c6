"""Benchmark rounds: every row measured again in turn, its time the median of all its runs.

The sweep is driven with a stand-in for the measuring function, so the order of measurement
and the pooling of runs are checked exactly, never a timing.
"""

from __future__ import annotations

import statistics

import pytest
from typer.testing import CliRunner

from attnlab import bench
from attnlab.bench._measure import merge_rounds
from attnlab.bench._suite import MAX_ROUNDS, check_rounds, sweep
from attnlab.cli import app

runner = CliRunner()
TINY = ["--n", "16", "--heads", "1", "--d", "4", "--repeats", "1", "--no-isolate", "--no-torch"]


@pytest.fixture
def no_gemm(monkeypatch):
    monkeypatch.setattr(bench._suite, "gemm_ceiling", lambda: 100.0)


def _stand_in():
    """A measuring function that returns made-up runs (1, 2, 3, ... in call order) and
    records which configuration each call measured."""
    calls: list = []

    def run(cfg):
        calls.append((cfg.method, cfg.n, cfg.mask))
        runs = [float(len(calls)), float(len(calls)) + 0.5]
        return bench.Result(cfg, seconds=statistics.median(runs), runs=runs, peak_mib=len(calls))

    return run, calls


def test_rows_take_turns_and_pool_their_runs(no_gemm):
    run, calls = _stand_in()
    seen = []
    settings = {"torch": True, "rounds": 3}
    report, _ = sweep((16, 32), 1, 4, ("none",), 2, run, seen.append, settings)
    rows = [("dense", 16, "none"), ("blockwise", 16, "none"), ("torch", 16, "none")]
    rows += [(m, 32, "none") for m in ("dense", "blockwise", "torch")]
    assert calls == rows * 3  # all rows, then all again: never one row three times in a row
    assert len(seen) == 18  # progress hears of every round's measurement
    assert [(r.config.method, r.config.n) for r in report.results] == [r[:2] for r in rows]
    for i, result in enumerate(report.results):
        own = [i + 1 + 6 * k for k in range(3)]  # the calls that measured this row
        want = sorted(x + dx for x in own for dx in (0.0, 0.5))
        assert sorted(result.runs) == want
        assert result.seconds == statistics.median(want)
        assert result.peak_mib == own[0]  # the first round's peak


def test_one_round_is_the_plain_sweep(no_gemm):
    run, calls = _stand_in()
    report, _ = sweep((16,), 1, 4, ("none", "causal"), 2, run, None, {"rounds": 1})
    assert len(calls) == 4 and [r.runs for r in report.results] == [
        [1.0, 1.5],
        [2.0, 2.5],
        [3.0, 3.5],
        [4.0, 4.5],
    ]


def test_an_error_in_any_round_is_kept():
    cfg = bench.Config("blockwise", 16)
    good = bench.Result(cfg, seconds=1.0, runs=[1.0])
    bad = bench.Result(cfg, error="worker died")
    assert merge_rounds(good, bad).error == "worker died"
    assert merge_rounds(bad, good).error == "worker died"
    both = merge_rounds(good, bench.Result(cfg, seconds=3.0, runs=[3.0, 5.0]))
    assert both.runs == [1.0, 3.0, 5.0] and both.seconds == 3.0 and both.error is None


@pytest.mark.parametrize("rounds", [0, -1, MAX_ROUNDS + 1, 1.5, True, "2"])
def test_bad_rounds_are_refused_by_name(rounds):
    with pytest.raises(ValueError, match="rounds"):
        check_rounds(rounds)
    with pytest.raises(ValueError, match="rounds"):
        bench.attention([16], heads=1, d=4, rounds=rounds, use_torch=False, isolate=False)


@pytest.mark.parametrize("command", ["attention", "backward"])
def test_cli_rounds(command, no_gemm):
    result = runner.invoke(app, ["bench", command, *TINY, "--rounds", "2"])
    assert result.exit_code == 0, result.output
    assert "in each of 2 rounds" in result.output
    once = runner.invoke(app, ["bench", command, *TINY])
    assert once.exit_code == 0 and "rounds" not in once.output
    refused = runner.invoke(app, ["bench", command, *TINY, "--rounds", "0"])
    assert refused.exit_code == 2 and "--rounds" in refused.output
