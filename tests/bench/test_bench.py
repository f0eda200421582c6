"""The benchmark's plumbing on tiny sizes: its table, its JSON, its targets. Never its timings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import attnlab as al
from attnlab import bench
from attnlab.bench._measure import measure_isolated
from attnlab.cli import app
from attnlab.core.masks import Causal
from tolerances import F32

runner = CliRunner()
TINY = ["--n", "16", "--heads", "1", "--d", "4", "--repeats", "1", "--no-isolate"]


def test_cli_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = runner.invoke(app, ["bench", "attention", *TINY, "--no-torch", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for heading in ("time ms", "GFLOP/s", "x torch", "x GEMM", "peak MiB", "targets:"):
        assert heading in result.output
    assert "GEMM ceiling" in result.output and "blockwise" in result.output
    data = json.loads(out.read_text())
    assert set(data) == {"machine", "settings", "gemm_gflops", "results", "checks", "targets"}
    rows = {(r["config"]["method"], r["config"]["mask"]) for r in data["results"]}
    assert rows == {(m, k) for m in ("dense", "blockwise") for k in ("none", "causal")}
    for r in data["results"]:
        assert r["error"] is None and r["seconds"] > 0 and r["gflops"] > 0
        assert r["useful_flops"] == 4 * 16 * 16 * 4 // (2 if r["config"]["mask"] == "causal" else 1)
    assert all(t["passed"] is None for t in data["targets"])  # nothing at the targets' sizes


def test_cli_with_torch_adds_its_column(torch):
    result = runner.invoke(app, ["bench", "attention", *TINY, "--causal"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:1] == ["torch"] for line in lines)
    blockwise_row = next(line for line in lines if "blockwise" in line)
    assert blockwise_row.split()[5] != "-"  # the ratio to torch is filled in
    assert " none " not in result.output  # --causal: causal rows only


def test_cli_window_rows():
    result = runner.invoke(app, ["bench", "attention", *TINY, "--no-torch", "--window", "4"])
    assert result.exit_code == 0, result.output
    assert "window 4" in result.output


def test_cli_refuses_bad_lengths():
    result = runner.invoke(app, ["bench", "attention", "--n", "12,abc"])
    assert result.exit_code == 2
    assert "expected whole numbers" in result.output


def test_one_configuration_in_its_own_process():
    result = measure_isolated(bench.Config("blockwise", 32, heads=1, d=4, mask="causal", repeats=1))
    assert result.error is None, result.error
    assert result.seconds > 0 and result.peak_mib is not None and result.threads >= 1


def test_a_failed_configuration_is_reported_not_raised():
    result = bench.measure(bench.Config("dense", 8, heads=1, d=4, mask="window", window=0))
    assert result.seconds is None and "expected size" in result.error


def _result(method, n, seconds, mask="none", heads=8, window=None, peak=1.0):
    cfg = bench.Config(method, n, heads=heads, mask=mask, window=window)
    return bench.Result(cfg, seconds=seconds, runs=[seconds], first_s=seconds, peak_mib=peak)


def test_targets_from_measured_numbers():
    report = bench.Report(machine=bench.machine_info(), settings={"heads": 8}, gemm_gflops=300.0)
    for n in (2048, 4096, 8192):
        report.results += [_result("blockwise", n, 1.0), _result("torch", n, 1.1)]
        report.results += [
            _result("blockwise", n, 0.5, "causal"),
            _result("torch", n, 0.35, "causal"),
        ]
    report.results += [_result("blockwise", 16384, 10.0), _result("dense", 2048, 0.1)]
    report.checks += [
        _result("blockwise", 16384, 2.0, "window", window=512),
        _result("textbook", 2048, 0.5),
        _result("blockwise", 65536, 6.0, heads=1, peak=40.0),
    ]
    by_name = {t.name: t for t in bench._suite.targets(report)}
    assert by_name["blockwise >= 0.8x torch SDPA, N=2048, no mask"].passed is True  # 1.1x
    assert by_name["blockwise >= 0.8x torch SDPA, N=2048, causal"].passed is False  # 0.7x
    assert by_name["causal >= 1.7x faster than no mask, N=8192"].value == pytest.approx(2.0)
    assert by_name["sliding window 512 >= 3.5x faster than no mask, N=16384"].value == 5.0
    assert by_name["peak memory < 512 MiB, blockwise N=65536, h=1"].passed is True
    assert by_name["dense >= 3x the textbook expression, N=2048"].value == pytest.approx(5.0)
    report.settings.update(d=64, repeats=5, isolated=True)
    report.targets = list(by_name.values())
    text = report.format()
    assert "PASS  blockwise >= 0.8x torch SDPA, N=2048, no mask: 1.100x" in text
    assert "FAIL  blockwise >= 0.8x torch SDPA, N=2048, causal: 0.700x" in text
    assert "PASS  peak memory < 512 MiB, blockwise N=65536, h=1: 40 MiB" in text


def test_useful_flops_count_allowed_pairs():
    assert bench.Config("torch", 8, heads=2, d=4).useful_flops == 4 * 2 * 64 * 4
    assert bench.Config("torch", 8, heads=2, d=4, mask="causal").useful_flops == 4 * 2 * 32 * 4
    window = bench.Config("torch", 8, heads=1, d=1, mask="window", window=3).useful_flops
    assert window == 4 * int(Causal().allowed(8).sum() - np.tril(np.ones((8, 8)), -3).sum())


def test_the_textbook_baseline_computes_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 9, 4)).astype(np.float32) for _ in range(3))
    mask = Causal().additive(9, dtype=np.float32)
    np.testing.assert_allclose(
        bench.textbook_attention(q, k, v, mask), al.attention(q, k, v, Causal()), **F32
    )


def test_bench_labs_reports_each_lab_against_its_target(monkeypatch):
    # Stand-in labs keep this a test of the plumbing, not of the machine's speed.
    from attnlab import labs

    calls = []
    monkeypatch.setitem(labs.LABS, "variance", lambda: calls.append("variance"))
    monkeypatch.setitem(labs.LABS, "saturation", lambda: calls.append("saturation"))
    result = runner.invoke(app, ["bench", "labs", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert calls == ["variance"] * 2 + ["saturation"] * 2
    rows = {r["lab"]: r for r in data["rows"]}
    assert rows["variance"]["target_s"] == 2.0 and rows["variance"]["meets_target"] is True
    assert rows["saturation"]["target_s"] is None and rows["saturation"]["runs"] == 2


def test_bench_labs_refuses_an_unknown_lab():
    result = runner.invoke(app, ["bench", "labs", "--lab", "nope"])
    assert result.exit_code == 2
    assert "expected lab names" in result.stderr


# -- attnlab bench backward -----------------------------------------------------------------------


@pytest.fixture
def no_gemm(monkeypatch):
    # The ceiling's ten 2048³ matmuls are the slowest part of a tiny run; its number is not
    # what these tests check.
    monkeypatch.setattr(bench._suite, "gemm_ceiling", lambda: 100.0)  # both suites sweep there


def test_cli_backward_prints_the_table_and_writes_json(tmp_path, no_gemm):
    out = tmp_path / "backward.json"
    result = runner.invoke(app, ["bench", "backward", *TINY, "--no-torch", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "attention backward" in result.output and "14·B·h·N·M·d" in result.output
    assert "kernel" in result.output  # the BLAS kernel in the header
    data = json.loads(out.read_text())
    rows = {(r["config"]["method"], r["config"]["mask"]) for r in data["results"]}
    assert rows == {(m, k) for m in ("dense", "blockwise") for k in ("none", "causal")}
    for r in data["results"]:
        assert r["error"] is None and r["config"]["backward"] is True
        assert r["useful_flops"] == 14 * 16 * 16 * 4 // (
            2 if r["config"]["mask"] == "causal" else 1
        )
    assert all(t["passed"] is None for t in data["targets"])  # nothing at the targets' sizes


def test_cli_backward_with_torch_fills_the_ratio(torch, no_gemm):
    result = runner.invoke(app, ["bench", "backward", *TINY, "--causal"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:1] == ["torch"] for line in lines)
    assert next(line for line in lines if "blockwise" in line).split()[5] != "-"


def test_backward_targets_from_measured_numbers():
    report = bench.Report(machine=bench.machine_info(), settings={"heads": 8}, gemm_gflops=300.0)
    for n in (2048, 4096):
        report.results += [_result("blockwise", n, 1.0), _result("torch", n, 1.2)]
        report.results += [
            _result("blockwise", n, 0.6, "causal"),
            _result("torch", n, 0.5, "causal"),
        ]
    report.results += [_result("blockwise", 8192, 4.0), _result("blockwise", 8192, 2.5, "causal")]
    report.checks += [_result("blockwise", 16384, 9.0, heads=1, peak=300.0)]
    by_name = {t.name: t for t in bench._backward.targets(report)}
    assert by_name["blockwise backward >= 1.0x torch, N=2048, no mask"].passed is True  # 1.2x
    assert by_name["blockwise backward >= 1.0x torch, N=4096, causal"].passed is False  # 0.83x
    assert by_name["causal >= 1.7x faster than no mask, N=8192"].value == pytest.approx(1.6)
    memory = by_name["peak memory < 256 MiB, blockwise backward N=16384, h=1"]
    assert memory.passed is False and memory.value == 300.0


def test_backward_configuration_in_its_own_process():
    cfg = bench.Config("blockwise", 32, heads=1, d=4, mask="causal", repeats=1, backward=True)
    result = measure_isolated(cfg)
    assert result.error is None, result.error
    assert result.seconds > 0 and result.config.useful_flops == 14 * (32 * 32 // 2) * 4


@pytest.mark.parametrize("value", ["99999999999999999999999", "1_000", "0", "+5", "2048,x"])
def test_bench_lengths_are_refused_before_any_run(value):
    # A 23-digit N used to start a run that never ended; "1_000" was read as 1000.
    result = CliRunner().invoke(app, ["bench", "attention", "--n", value, "--quick"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --n:")
