"""--repeat: two dumps of one run must be bitwise equal; and the mean-error columns.

Kernel outputs come from tests/verify_reference.py (independent float64 numpy).
"""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import verify
from verify_reference import inputs, reference


def run(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def _case(seed=0):
    q, k, v = inputs(np.random.default_rng(seed))
    return {"q": q, "k": k, "v": v, "out": reference(q, k, v)["out"].astype(np.float32)}


def test_equal_repeats_pass(tmp_path):
    case = _case()
    np.savez(tmp_path / "a.npz", **case)
    np.savez(tmp_path / "b.npz", **case)
    result = run(tmp_path / "a.npz", "--repeat", tmp_path / "b.npz", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["repeat"] == {"equal": True, "differs": {}}


def test_one_bit_off_in_the_repeat_fails_naming_the_entry(tmp_path):
    case = _case(1)
    again = {name: x.copy() for name, x in case.items()}
    again["out"][1, 5, 2, 3] = np.nextafter(again["out"][1, 5, 2, 3], np.float32(np.inf))
    np.savez(tmp_path / "a.npz", **case)
    np.savez(tmp_path / "b.npz", **again)
    result = run(tmp_path / "a.npz", "--repeat", tmp_path / "b.npz")
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    assert "repeat not bitwise equal: out in 1 entries, first at (1, 5, 2, 3)" in text
    report = verify(**case, repeat=again)
    assert all(t.passed for t in report.tensors.values()) and not report.passed


def test_signed_zero_is_a_difference():
    case = _case(2)
    again = {name: x.copy() for name, x in case.items()}
    case["out"][0, 0, 0, 0], again["out"][0, 0, 0, 0] = 0.0, -0.0
    assert not verify(**case, repeat=again).repeat["equal"]


def test_a_repeat_without_an_array_is_one_line(tmp_path):
    case = _case(3)
    np.savez(tmp_path / "a.npz", **case)
    np.savez(tmp_path / "b.npz", **{n: x for n, x in case.items() if n != "out"})
    result = run(tmp_path / "a.npz", "--repeat", tmp_path / "b.npz")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "out" in lines[0] and "--repeat" in lines[0]


def test_mean_errors_against_the_baselines_mean():
    case = _case(4)
    case["out"] = case["out"] + np.float32(1e-6)  # a small error in every entry
    report = verify(**case)
    t = report.tensors["out"]
    assert t.baseline_mean_error > 0
    assert abs(t.mean_ratio - t.mean_abs_error / t.baseline_mean_error) < 1e-12
    d = report.as_dict()["tensors"]["out"]
    assert d["baseline_mean_error"] == t.baseline_mean_error and d["mean_ratio"] == t.mean_ratio
    assert "baseline mean" in report.COLUMNS
    assert report.rows()[0][report.COLUMNS.index("baseline mean")] == f"{t.baseline_mean_error:.3g}"
