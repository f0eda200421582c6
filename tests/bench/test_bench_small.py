"""``attnlab bench small``'s plumbing on a tiny shape: its table, its targets. Never its timings."""

from __future__ import annotations

from typer.testing import CliRunner

from attnlab.bench import _small as small_bench
from attnlab.cli import app

runner = CliRunner()
TINY = ["--shape", "2,2,8,4", "--rounds", "1", "--block-ms", "1", "--no-isolate"]


def test_cli_prints_both_tables_and_the_targets():
    result = runner.invoke(app, ["bench", "small", *TINY, "--no-torch"])
    assert result.exit_code == 0, result.output
    for text in ("forward", "forward + backward", "kernel", "attnlab", "general", "targets:"):
        assert text in result.output
    assert "2, 2, 8, 4" in result.output
    assert "----  forward >= 0.5x torch, 2x2x8x4 causal: not run" in result.output


def test_cli_with_torch_fills_the_ratio(torch):
    result = runner.invoke(app, ["bench", "small", *TINY])
    assert result.exit_code == 0, result.output
    assert "threads" in result.output and "not run" not in result.output


def test_cli_refuses_a_bad_shape():
    result = runner.invoke(app, ["bench", "small", "--shape", "2,2,8"])
    assert result.exit_code == 2
    assert "B,h,N,d" in result.output


def test_one_shape_in_its_own_process():
    job = {
        "shape": [1, 1, 4, 2],
        "rounds": 1,
        "torch": False,
        "isolated": True,
        "block_s": 0.001,
        "gap_s": 0.0,
    }
    row = small_bench._isolated(job)
    assert row.error is None and row.shape == (1, 1, 4, 2)
    assert row.seconds["forward"] > 0 and row.seconds["step_general"] > 0


def test_targets_from_measured_numbers():
    fast = small_bench.Row((1, 1, 4, 2), {"forward": 20e-6, "torch_forward": 5e-6})
    fast.seconds.update(step=100e-6, torch_step=90e-6)
    slow = small_bench.Row((64, 4, 32, 16), {"forward": 1e-3, "torch_forward": 0.4e-3})
    report = small_bench.SmallReport(machine={}, settings={}, rows=[fast, slow])
    verdicts = {
        t.name: (t.passed, round(t.value, 3))
        for t in small_bench.targets(report)
        if t.value is not None
    }
    assert "forward >= 0.5x torch, 1x1x4x2 causal" not in verdicts  # 5x is its target
    assert verdicts["forward + backward >= 0.8x torch, 1x1x4x2 causal"] == (True, 0.9)
    assert verdicts["forward within 5x of torch's time, 1x1x4x2 (the worked example)"] == (
        True,
        4.0,
    )
    assert verdicts["forward >= 0.5x torch, 64x4x32x16 causal"] == (False, 0.4)
    missing = [t for t in small_bench.targets(report) if t.value is None]
    assert [t.name for t in missing] == ["forward + backward >= 0.8x torch, 64x4x32x16 causal"]


def test_each_timed_block_starts_after_an_idle_pause(monkeypatch):
    pauses = []
    monkeypatch.setattr(small_bench.time, "sleep", pauses.append)
    job = {"shape": [1, 1, 4, 2], "rounds": 2, "torch": False, "block_s": 0.001, "gap_s": 0.03}
    row = small_bench.measure_shape(job)
    assert row.error is None and len(row.seconds) == 4  # attnlab's four calls, no torch
    assert pauses == [0.03] * (2 * 4)  # before every block of every round
    report = small_bench.small([(1, 1, 4, 2)], rounds=1, use_torch=False, isolate=False,
                               block_s=0.001, gap_s=0.02)  # fmt: skip
    assert "each after 20 ms idle" in report.format()
