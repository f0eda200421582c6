"""The `attnlab` command through Typer's CliRunner: the example, any trace, the cost model, errors."""

from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

import attnlab
from attnlab.cli import app

CHAPTER_Q, CHAPTER_K, CHAPTER_V = "[[3,-3],[1,1]]", "[[-3,3],[1,1]]", "[[0,-1],[1,2]]"


MINUS_INF_CELL = re.compile(r"-inf\s*│")  # a table cell, not the caption that mentions -inf


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def in_order(text: str, pieces) -> bool:
    at = 0
    for piece in pieces:
        at = text.find(piece, at)
        if at < 0:
            return False
    return True


def test_example_walks_the_chapter():
    out = ok("example")
    steps = ["Queries Q", "Keys K", "Values V", "1. scores", "2. scaled", "3. masked"]
    assert in_order(out, steps + ["4. weights", "5. output"])
    # Each step's numbers, in the order the chapter gives them.
    assert in_order(out, ["-18", "-12.73", "1.414", "-12.73", "-inf", "0.1956", "0.8044"])
    assert in_order(out, ["5. output", "0", "-1", "0.8044", "1.413"])
    assert "0.707107" in out  # the scale, 1/√2


def test_example_without_the_mask():
    out = ok("example", "--no-mask")
    assert not MINUS_INF_CELL.search(out)
    assert MINUS_INF_CELL.search(ok("example"))
    tiny = 1 / (1 + math.exp(18 / math.sqrt(2)))  # token 1's weight on itself
    assert f"{tiny:.3e}" in out


def test_example_without_scaling():
    out = ok("example", "--no-scale")
    w = 1 / (1 + math.exp(2))  # row 2's unscaled scores are 0 and 2
    assert f"{w:.4f}" in out and f"{1 - w:.4f}" in out
    assert "-12.73" not in out


def _trace_json(*extra: str) -> dict:
    return json.loads(ok("attention", "--q", CHAPTER_Q, "--k", CHAPTER_K, "--v", CHAPTER_V, *extra))


def test_attention_json_with_the_causal_mask():
    data = _trace_json("--causal", "--json")
    assert data["scores"] == [[-18, 0], [0, 2]]
    assert data["masked"][0][1] is None  # -inf travels as null
    assert data["masked"][0][0] == pytest.approx(-18 / math.sqrt(2))
    assert data["weights"][0] == [1, 0]
    assert data["weights"][1] == pytest.approx([0.196, 0.804], abs=5e-4)
    assert data["output"][0] == [0, -1]
    assert data["output"][1] == pytest.approx([0.804, 1.413], abs=5e-4)
    assert data["scale"] == pytest.approx(1 / math.sqrt(2))
    assert data["mask"] == "Causal()"


def test_attention_json_unscaled_and_unmasked():
    data = _trace_json("--no-scale", "--json")
    assert data["scale"] == 1.0 and data["mask"] is None
    assert data["scaled"] == data["scores"] == data["masked"]
    assert data["weights"][0][1] == pytest.approx(1 / (1 + math.exp(-18)), abs=1e-12)


def test_attention_tables_for_a_cross_attention_case():
    out = ok("attention", "--q", "[[1,0,2]]", "--k", "[[1,1,1],[0,0,1]]", "--v", "[[5],[7]]")
    # Scores 3 and 2, scaled by 1/√3: the first key wins by a gap of 1/√3.
    w = 1 / (1 + math.exp(-1 / math.sqrt(3)))
    assert in_order(
        out, ["4. weights", f"{w:.4f}", f"{1 - w:.4f}", "5. output", f"{5 * w + 7 * (1 - w):.4g}"]
    )
    assert "key 2" in out and "dim 3" in out and not MINUS_INF_CELL.search(out)


def test_cost_table():
    n, d = 1024, 4096
    out = ok("cost", "--d-model", str(d), "--n", str(n))
    for term in (3 * n * d * d, n * n * d, n * d * d, 4 * n * d * d + 2 * n * n * d):
        assert f"{term:.3e}" in out  # every term, untruncated
    assert f"{n / (n + 2 * d):.1%}" in out
    assert "4.0 MiB" in out  # 1024² float32 scores
    assert "8192" in out


def test_cost_json():
    data = json.loads(ok("cost", "--d-model", "4096", "--n", "1024", "--n", "8192", "--json"))
    assert data["crossover_length"] == 8192
    assert [r["n"] for r in data["rows"]] == [1024, 8192]
    assert data["rows"][0]["total"] == 4 * 1024 * 4096**2 + 2 * 1024**2 * 4096
    assert data["rows"][1]["quadratic"] == data["rows"][1]["linear"]  # N = 2·d_model
    flops = json.loads(ok("cost", "--d-model", "64", "--n", "10", "--flops", "--json"))
    assert flops["rows"][0]["total"] == 2 * (4 * 10 * 64**2 + 2 * 10**2 * 64)


def test_version_and_help():
    assert ok("--version").strip() == f"attnlab {attnlab.__version__}"
    out = ok("--help")
    for command in ("example", "attention", "cost"):
        assert command in out


BAD = {
    "ragged": ("[[1,2],[3]]", CHAPTER_K, CHAPTER_V, "same, non-zero width"),
    "non-numeric": ('[[1,"x"],[3,4]]', CHAPTER_K, CHAPTER_V, "expected numbers"),
    "not JSON": ("[[1,2],", CHAPTER_K, CHAPTER_V, "JSON matrix"),
    "not a matrix": ("[1,2]", CHAPTER_K, CHAPTER_V, "list of rows"),
    "d_k differs": ("[[1,2,3]]", CHAPTER_K, CHAPTER_V, "d_k"),
    "k and v rows differ": (CHAPTER_Q, CHAPTER_K, "[[1,2]]", "rows M"),
    "NaN": ("[[NaN,1],[1,1]]", CHAPTER_K, CHAPTER_V, "finite"),
    # Scores that overflow leave a row with no finite entry: the one way to empty a row here.
    "row with no finite score": ("[[1e300,1e300]]", "[[-1e300,-1e300]]", "[[1]]", "overflowed"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_one_line_and_exit_2(name):
    q, k, v, words = BAD[name]
    result = run("attention", "--q", q, "--k", k, "--v", v, "--causal")
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # no traceback
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert words in lines[0]
    assert "Traceback" not in result.output


def test_out_of_range_option_is_a_usage_error():
    assert run("cost", "--d-model", "0").exit_code == 2
