"""`attnlab verify CASE`: exit codes, the table, --json, --plot, and case files both ways.

Cases are written with numpy's savez and safetensors' numpy API, their outputs from the
independent reference in tests/verify_reference.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file
from typer.testing import CliRunner

from attnlab.cli import app
from verify_reference import inputs, reference

SRC = Path(__file__).resolve().parents[2] / "src"


def run(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def one_error_line(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


def _case(seed=0, dtype=np.float32, causal=True, m=24, **extra):
    q, k, v = inputs(np.random.default_rng(seed), m=m, dtype=dtype)
    out = reference(q, k, v, causal=causal)["out"].astype(dtype)
    return {"q": q, "k": k, "v": v, "out": out, "causal": np.array(causal), **extra}


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "good.npz"
    np.savez(path, **_case())
    return path


@pytest.fixture
def bad(tmp_path) -> Path:
    case = _case()
    case["out"][1, 7, 2] += np.float32(1e-2)
    path = tmp_path / "bad.npz"
    np.savez(path, **case)
    return path


def test_pass_exits_0_with_a_table(good):
    result = run(good)
    assert result.exit_code == 0, result.output
    assert "pass" in result.stdout and "baseline error" in result.stdout


def test_fail_exits_1_naming_batch_head_and_row(bad):
    result = run(bad)
    assert result.exit_code == 1, result.output
    assert "batch 1, head 2, row 7" in result.stdout and "FAIL" in result.stdout
    assert run(bad, "--atol", "0.02").exit_code == 0  # an allowance past the 1e-2 error
    one_error_line(run(bad, "--factor", "-1"), "--factor")


def test_json_schema(bad):
    result = run(bad, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "fail" and list(report["tensors"]) == ["out"]
    out = report["tensors"]["out"]
    for key in ("max_abs_error", "mean_abs_error", "baseline_error", "ratio", "pass"):
        assert key in out
    assert out["pass"] is False and out["max_abs_error"] > out["baseline_error"] > 0
    assert out["ratio"] == pytest.approx(out["max_abs_error"] / out["baseline_error"])
    assert {k: out["worst"][k] for k in ("batch", "head", "row")} == {
        "batch": 1,
        "head": 2,
        "row": 7,
    }
    assert json.loads(run(bad.with_name("bad.npz"), "--json", "--factor", "1e9").stdout)[
        "verdict"
    ] == ("pass")


def test_missing_v_exits_2_with_one_line(tmp_path):
    case = _case()
    del case["v"]
    np.savez(tmp_path / "no_v.npz", **case)
    one_error_line(run(tmp_path / "no_v.npz"), "v: missing array")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda c: c.update(bias=np.zeros(3)), ["bias", "unknown entry"]),
        (lambda c: c.update(q=c["q"].astype(np.int32)), ["q:", "int32"]),
        (lambda c: c.update(k=c["k"][:, :5, :1]), ["v:", "shape"]),
        (lambda c: c.update(out=c["out"][:, :, :, :3]), ["out:", "shape"]),
        (lambda c: c.update(window_size=np.array([1.5, 0.0])), ["window_size"]),
        (lambda c: c.update(causal=np.array([1, 0, 1])), ["causal"]),
        (lambda c: c.update(dq=c["q"]), ["do:", "dq"]),
        (lambda c: c.update(softmax_scale=np.array(-1.0)), ["softmax_scale"]),
        (lambda c: c.update(cu_seqlens_q=np.array([0, 3])), ["cu_seqlens_k"]),
        (lambda c: c.update(softmax_scale=None), ["softmax_scale", "pickle"]),
    ],
)
def test_bad_cases_exit_2_naming_the_entry(tmp_path, change, words):
    case = _case()
    change(case)
    np.savez(tmp_path / "case.npz", **case)
    one_error_line(run(tmp_path / "case.npz"), *words)


def test_unreadable_files_exit_2(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    one_error_line(run(garbage), "garbage.npz", "cannot read")
    torn = tmp_path / "torn.safetensors"
    torn.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    one_error_line(run(torn), "torn.safetensors")
    one_error_line(run(tmp_path / "absent.npz"), "no such file")
    one_error_line(run(tmp_path / "case.pt"), ".npz or .safetensors")
    one_error_line(run(garbage, "--layout", "sbhd"), "--layout")


def test_safetensors_round_trip_with_bfloat16(tmp_path):
    case = _case(dtype=ml_dtypes.bfloat16)
    case["window_size"] = np.array([5, 0], dtype=np.int32)
    case["out"] = reference(case["q"], case["k"], case["v"], causal=True, window_size=(5, 0))[
        "out"
    ].astype(ml_dtypes.bfloat16)
    save_file(case, str(tmp_path / "case.safetensors"))
    result = run(tmp_path / "case.safetensors", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dtype"] == "bfloat16" and report["options"]["window_size"] == [5, 0]


def test_npz_round_trip_with_bfloat16_and_float16(tmp_path):
    for dtype in (ml_dtypes.bfloat16, np.float16):
        np.savez(tmp_path / "case.npz", **_case(dtype=dtype))  # bfloat16 is stored as V2
        result = run(tmp_path / "case.npz", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["dtype"] == np.dtype(dtype).name


def test_bhsd_layout(tmp_path):
    case = _case(m=30)
    for name in ("q", "k", "v", "out"):
        case[name] = case[name].transpose(0, 2, 1, 3)  # (B, h, N, d)
    np.savez(tmp_path / "sdpa.npz", **case)
    assert run(tmp_path / "sdpa.npz", "--layout", "bhsd").exit_code == 0
    one_error_line(run(tmp_path / "sdpa.npz"), "h_kv")  # read as bshd, the heads disagree


def test_plot_written_offline_and_kept_without_force(bad, tmp_path):
    page = tmp_path / "where.html"
    result = run(bad, "--plot", page)
    assert result.exit_code == 1 and page.exists()
    text = page.read_text()
    assert len(text) > 1_000_000 and '<script src="http' not in text  # plotly.js inside
    assert '"type":"heatmap"' in text.replace(" ", "")
    before = page.stat().st_mtime_ns, text
    one_error_line(run(bad, "--plot", page), "already exists", "--force")
    assert (page.stat().st_mtime_ns, page.read_text()) == before
    assert run(bad, "--plot", page, "--force").exit_code == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    one_error_line(run(bad, "--plot", tmp_path / "where.png"), "--plot", ".html")
    one_error_line(run(bad, "--plot", tmp_path / "nowhere" / "x.html"), "--plot", "folder")


def test_the_installed_command_in_a_subprocess(tmp_path):
    # A fresh process: nothing (ml_dtypes included) imported beforehand by the tests.
    save_file(_case(dtype=ml_dtypes.bfloat16), str(tmp_path / "bf16.safetensors"))
    case = _case()
    del case["v"]
    np.savez(tmp_path / "no_v.npz", **case)
    env = {**os.environ, "PYTHONPATH": str(SRC)}

    def attnlab_verify(name: str):
        return subprocess.run(
            [sys.executable, "-c", "from attnlab.cli import main; main()", "verify",
             str(tmp_path / name)],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip

    assert attnlab_verify("bf16.safetensors").returncode == 0
    done = attnlab_verify("no_v.npz")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: v: missing array; a case needs q, k, v and out"
    ]


def test_bench_verify_reports_both_sides_shape(tmp_path):
    # The command's shape only (no timing asserted): one small case, attnlab's side alone.
    result = CliRunner().invoke(
        app, ["bench", "verify", "--n", "32", "--heads", "1", "--d", "8", "--no-torch", "--json"]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["case"]["N"] == 32 and got["attnlab"]["seconds"] > 0
    assert got["attnlab"]["peak_mib"] > 0 and "torch" not in got
    bad = CliRunner().invoke(app, ["bench", "verify", "--dtype", "int8"])
    assert bad.exit_code == 2 and "--dtype" in bad.stderr
