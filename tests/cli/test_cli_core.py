"""The `attnlab` command through Typer's CliRunner: the example, any trace, the cost model, errors."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

import attnlab
from attnlab.cli import app
from attnlab.cli._app import MAX_TEXT
from attnlab.cli.core import JSON_MAX_CELLS, MAX_D_MODEL, MAX_LENGTHS, MAX_N, PRINT_MAX
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V

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
    assert "(scale = 0.7071)" in out  # the scale, 1/√2, to 4 digits


def test_example_without_the_mask():
    out = ok("example", "--no-mask")
    assert not MINUS_INF_CELL.search(out)
    assert MINUS_INF_CELL.search(ok("example"))
    tiny = 1 / (1 + math.exp(18 / math.sqrt(2)))  # token 1's weight on itself
    assert f"{tiny:.3e}".replace("e-06", "e-6") in out  # 2.967e-6


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
    assert data["masked"][0][1] == "-inf"  # a blocked pair, spelled as the web API spells it
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


# -- only attnlab's own errors are usage errors (docs/style.md, "catch only what you raise") --------------------------


def _raise(exc):
    def boom(*args, **kwargs):
        raise exc

    return boom


CALLS = {  # a command, and the library call it makes
    "example": (["example"], "trace_attention"),
    "attention": (["attention", "--q", CHAPTER_Q, "--k", CHAPTER_K, "--v", CHAPTER_V], None),
    "cost": (["cost", "--n", "8"], "breakdown"),
}


@pytest.mark.parametrize("command", CALLS)
@pytest.mark.parametrize("exc", [ValueError("bug"), TypeError("bug"), OverflowError("bug")])
def test_a_bug_in_the_library_surfaces_as_itself(monkeypatch, command, exc):
    args, name = CALLS[command]
    owner = attnlab.cost if name == "breakdown" else attnlab
    monkeypatch.setattr(owner, name or "trace_attention", _raise(exc))
    result = run(*args)
    assert result.exit_code == 1
    assert result.exception is exc  # propagates: Typer prints its traceback
    assert "error:" not in result.stderr


@pytest.mark.parametrize("command", CALLS)
def test_an_attnlab_error_is_one_line_and_exit_2(monkeypatch, command):
    args, name = CALLS[command]
    owner = attnlab.cost if name == "breakdown" else attnlab
    message = "expected [bold]x[/bold], but got y instead"  # markup stays literal text
    monkeypatch.setattr(owner, name or "trace_attention", _raise(attnlab.ShapeError(message)))
    result = run(*args)
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines() == [f"error: {message}"]


def test_a_bug_prints_a_traceback_from_the_installed_command():
    # The real entry point, with trace_attention broken: the traceback names the bug.
    code = (
        "import sys, attnlab\n"
        "def boom(*a, **k): raise ValueError('bug in trace_attention')\n"
        "attnlab.trace_attention = boom\n"
        "sys.argv = ['attnlab', 'example']\n"
        "from attnlab.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert done.stderr.strip().endswith("ValueError: bug in trace_attention")


# -- attention refuses what it cannot usefully do, at once ---------------------------------------


def _rows(n: int, d: int = 1) -> str:
    return json.dumps([[1] * d] * n)


def _refused(*args: str, seconds: float = 30.0) -> str:
    start = time.perf_counter()
    result = run(*args)
    took = time.perf_counter() - start
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    # A hang guard, not a speed target (this machine is shared): 5,000 rows used to print for
    # minutes and 30,000 asked for 33 GiB; a refusal takes well under a second.
    assert took < seconds
    return lines[0]


@pytest.mark.parametrize("rows", [PRINT_MAX + 1, 5_000, 30_000])
def test_attention_refuses_tables_too_large_to_print(rows):
    line = _refused("attention", "--q", _rows(rows), "--k", _rows(rows), "--v", _rows(rows))
    assert f"--q: expected at most {PRINT_MAX} rows" in line and f"{rows:,} rows" in line
    assert "--json" in line


@pytest.mark.parametrize(
    ("q", "k", "v", "names"),
    [
        (5_000, 5_000, 5_000, "--q, --k"),
        (30_000, 30_000, 30_000, "--q, --k"),
        (JSON_MAX_CELLS + 1, 1, 1, "--q, --k"),
        (300, 1, 300, "--q, --v"),  # N x d_v: the output table
    ],
)
def test_attention_json_refuses_tables_past_the_budget(q, k, v, names):
    d_v = 300 if names == "--q, --v" else 1
    line = _refused("attention", "--q", _rows(q), "--k", _rows(k), "--v", _rows(k, d_v), "--json")
    assert line.startswith(f"error: {names}: expected tables of at most {JSON_MAX_CELLS:,}")


def test_attention_checks_sizes_before_entries():
    # 17 rows, one of them not a number: the size is what is wrong first, and found at once.
    q = json.dumps([[1]] * PRINT_MAX + [["x"]])
    line = _refused("attention", "--q", q, "--k", "[[1]]", "--v", "[[1]]")
    assert "rows" in line and "expected numbers" not in line


def test_attention_json_takes_more_than_it_prints():
    n = PRINT_MAX + 1
    data = json.loads(ok("attention", "--q", _rows(n), "--k", _rows(n), "--v", _rows(n), "--json"))
    assert len(data["weights"]) == n and data["weights"][0] == pytest.approx([1 / n] * n)
    side = math.isqrt(JSON_MAX_CELLS)
    big = ok("attention", "--q", _rows(side), "--k", _rows(side), "--v", _rows(side), "--json")
    assert len(json.loads(big)["scores"]) == side


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 50_000, "nested deeper"),  # a RecursionError inside json.loads
        ("[[1" + "0" * 5000 + "]]", "JSON matrix"),  # past Python's int-conversion limit
        ("[[1" + "0" * 400 + "]]", "integer of 401 digits"),  # parses, but no float holds it
        ("[[1]]" + " " * MAX_TEXT, "characters"),
        ("[/bold]", "[/bold]"),  # Rich markup in the echo stays text
        ("[[" + "1," * 10_000 + "]", "JSON matrix"),
    ],
)
def test_attention_text_it_cannot_parse(text, words):
    line = _refused("attention", "--q", text, "--k", "[[1]]", "--v", "[[1]]")
    assert line.startswith("error: --q: expected") and words in line
    assert len(line) < 300  # the text is echoed clipped


# -- cost: bounded options, so no count overflows a float -----------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--n", "0"),
        ("--n", "-1"),
        ("--n", str(MAX_N + 1)),
        ("--n", str(10**4000)),
        ("--n", "10^4000"),
        ("--n", "1e400"),
        ("--n", "many"),
        ("--d-model", "0"),
        ("--d-model", str(MAX_D_MODEL + 1)),
        ("--d-model", str(10**4000)),
        ("--d-model", "1e400"),
        ("--d-model", "wide"),
    ],
)
def test_cost_refuses_absurd_values_naming_the_option(option, value):
    for extra in ((), ("--json",), ("--flops",)):
        line = _refused("cost", option, value, *extra)
        assert f"'{option}'" in line


def test_cost_at_its_bounds_prints_every_term():
    out = ok("cost", "--n", str(MAX_N), "--d-model", str(MAX_D_MODEL), "--flops")
    assert f"{2 * (4 * MAX_N * MAX_D_MODEL**2 + 2 * MAX_N**2 * MAX_D_MODEL):.3e}" in out
    data = json.loads(ok("cost", "--n", str(MAX_N), "--d-model", str(MAX_D_MODEL), "--json"))
    assert data["rows"][0]["total"] == 4 * MAX_N * MAX_D_MODEL**2 + 2 * MAX_N**2 * MAX_D_MODEL


def test_cost_counts_its_lengths():
    lengths = [f"--n={n}" for n in range(1, MAX_LENGTHS + 2)]
    line = _refused("cost", *lengths)
    assert f"--n: expected at most {MAX_LENGTHS} lengths" in line
    assert f"but got {MAX_LENGTHS + 1} instead" in line
    assert len(json.loads(ok("cost", *lengths, "--json"))["rows"]) == MAX_LENGTHS + 1


def test_example_works_the_softmax_out():
    out = ok("example")
    trace = attnlab.trace_attention(
        EXAMPLE_Q,
        EXAMPLE_K,
        EXAMPLE_V,
        mask=attnlab.masks.Causal(),
    )
    assert "The softmax, worked row by row" in out
    # Row 2 by hand (§6.2): e^0 = 1, e^1.414 = 4.113, sum 5.113, weights 0.1956 and 0.8044.
    assert in_order(out, ["query 2", "e^0 = 1", "e^1.414 = 4.113", "sum 5.113", "0.1956", "0.8044"])
    # Row 1: the mask leaves one key; the gap it hid is 12.728, a ratio of e^12.728.
    gap = float(trace.scaled[0, 1] - trace.scaled[0, 0])
    assert f"{gap:.3f}" == "12.728"
    assert in_order(out, ["query 1", "e^-inf = 0", "one allowed key", f"{math.exp(gap):,.0f}"])
    assert 336_000 < math.exp(gap) < 338_000
    assert "by 1.414" in out and "4.113 times" in out


def test_example_without_the_mask_prints_the_big_ratio():
    out = ok("example", "--no-mask")
    assert in_order(
        out, ["query 1", "by 12.728", "337,0", "times the other", "query 2", "sum 5.113"]
    )


# -- the backward pass, traced -------------------------------------------------------------------


def test_example_backward_prints_the_chain_rule_tables():
    result = run("example", "--backward")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Backward" in out and "grad_v" in out and "grad_k" in out
    # dV = Pᵀ dO with dO all ones: key 1 collects 1 + 0.196, key 2 collects 0.804 (§6.2's P).
    assert "1.196" in out and "0.8044" in out and "-0.6293" in out


def test_attention_backward_json_equals_attention_backward():
    q, k, v = [[1.0, 2.0], [0.5, -1.0], [2.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [3.0]]
    d_o = [[1.0], [-2.0], [0.5]]
    result = run(
        "attention", "--q", json.dumps(q), "--k", json.dumps(k), "--v", json.dumps(v),
        "--grad-output", json.dumps(d_o), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    dq, dk, dv = attnlab.attention_backward(q, k, v, d_o)
    np.testing.assert_allclose(data["grad_q"], dq, rtol=0, atol=1e-12)
    np.testing.assert_allclose(data["grad_k"], dk, rtol=0, atol=1e-12)
    np.testing.assert_allclose(data["grad_v"], dv, rtol=0, atol=1e-12)


def test_a_grad_output_of_the_wrong_shape_is_one_line():
    result = run("example", "--grad-output", "[[1, 1, 1]]")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--grad-output" in lines[0] and "(2, 2)" in lines[0]


# -- attnlab why: the page's explainers, read from the same entries ------------------------------


def test_why_prints_the_entries_the_page_serves():
    from fastapi.testclient import TestClient

    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        with TestClient(create_app(), base_url="http://127.0.0.1") as client:
            served = client.get("/api/equations").json()["equations"]
    listing = ok("why")
    for e in served:
        assert e["id"] in listing
    for e in served[1:3]:  # a variance-chain equation: each symbol links to a named proof step
        out = " ".join(ok("why", e["id"]).split())
        for s in e["symbols"]:
            assert " ".join(s["meaning"].split()) in out and s["link"]["label"] in out


def test_why_names_an_unknown_equation_in_one_line():
    result = run("why", "nope")
    assert result.exit_code == 2 and "nope" in result.output and "score" in result.output
    assert "Traceback" not in result.output
