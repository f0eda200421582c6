"""`attnlab lab ...` and `attnlab exercises ...`: outputs, JSON schema, CSV headers, exit codes."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.labs import LABS, saturation, variance_scaling
from conftest import SMALL_LABS

runner = CliRunner()

SMALL_VARIANCE = ["lab", "variance", "--width", "16", "--width", "32", "--draws", "2000"]
# The CSV header each lab prints.
HEADERS = {
    "variance": "width,raw_var,var_ratio,var_ratio_se,scaled_var,scaled_var_se",
    "saturation": "case,trials,saturated,share,share_se,mean_p_max,gradient_term,"
                  "gradient_term_se,jacobian_fro",
    "sweep": "width,sqrt_width,unscaled_std,scaled_std,unscaled_share,scaled_share,gradient_term",
    "permutation": "token,position,shuffled_position,change_without_positions,"
                   "change_with_positions",
    "cost": "n,projection_s,core_s,matmul_s,total_s,measured_share,matmul_share,model_share,"
            "heads_core_ratio,heads_matmul_ratio,heads_madds,one_head_madds",
}  # fmt: skip


def small_args(name: str) -> list[str]:
    """The lab tests' small run of lab ``name`` (``SMALL_LABS``) as the CLI's options."""
    small, args = SMALL_LABS[name], []
    params = [p for p in LABS[name].params if p.name in small]
    assert {p.name for p in params} == set(small)  # every argument has its option
    for p in params:
        for value in small[p.name] if p.many else (small[p.name],):
            args += [p.option, str(value)]
    return args


def run(*args: str):
    return runner.invoke(app, list(args))


def test_variance_prints_a_table_and_the_summary():
    result = run(*SMALL_VARIANCE)
    assert result.exit_code == 0, result.output
    assert "Var(q·k)/d_k" in result.stdout and "Divided by d_k it stays at 1" in result.stdout


def test_json_is_the_lab_result_itself():
    result = run(*SMALL_VARIANCE, "--seed", "3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == variance_scaling(widths=(16, 32), draws=2000, seed=3).as_dict()
    assert set(data) == {"lab", "widths", "draws", "seed", "rows"}
    assert set(data["rows"][0]) == {
        "width", "raw_var", "var_ratio", "scaled_var", "var_ratio_se", "scaled_var_se"
    }  # fmt: skip


def test_saturation_json_schema():
    data = json.loads(run("lab", "saturation", "--trials", "30", "--seed", "2", "--json").stdout)
    assert data == saturation(trials=30, seed=2).as_dict()
    for key in ("unscaled_share", "scaled_share", "gradient_term", "jacobian_saturated"):
        assert key in data


@pytest.mark.parametrize("name", list(HEADERS))
def test_every_lab_csv_header_and_json(name):
    args, header = small_args(name), HEADERS[name]
    result = run("lab", name, *args, "--csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert ",".join(rows[0]) == header
    assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows)
    data = json.loads(run("lab", name, *args, "--json").stdout)
    assert data["lab"] == name


def test_plot_writes_an_offline_page(tmp_path):
    page = tmp_path / "variance.html"
    result = run(*SMALL_VARIANCE, "--plot", str(page))
    assert result.exit_code == 0, result.output
    html = page.read_text(encoding="utf-8")
    assert "Plotly.newPlot" in html
    assert len(html) > 1_000_000  # plotly.js itself is inside the page
    assert 'src="https://' not in html  # nothing loaded from the network


@pytest.mark.parametrize(
    "args",
    [
        ["lab", "variance", "--width", "0"],
        ["lab", "variance", "--draws", "1"],
        ["lab", "saturation", "--threshold", "1.5"],
        ["lab", "saturation", "--threshold", "1"],
        ["lab", "saturation", "--threshold", "0"],
        ["lab", "sweep", "--keys", "1"],
        ["lab", "cost", "--d-model", "10", "--heads", "4"],
        ["lab", "permutation", "--shuffled", "a b c"],
        ["lab", "nonsense"],
        ["lab", "variance", "--seed", "-1"],
        ["lab", "variance", "--json", "--csv"],
        ["lab", "variance", "--plot", "figure.png"],
        ["exercises", "show", "9"],
        ["exercises", "check", "2", "abc"],
        ["exercises", "check", "2", "1_959"],  # float() would read 1959
        ["exercises", "check", "2"],
    ],
)
def test_bad_input_is_one_red_line_and_exit_2(args):
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert result.stdout == ""


def test_unknown_lab_names_the_labs():
    assert "variance, saturation, sweep, permutation, cost" in run("lab", "foo").stderr


def test_exercises_list_and_show():
    listing = run("exercises")
    assert listing.exit_code == 0
    assert all(f"│ {n} " in listing.stdout for n in range(1, 8))
    assert len(json.loads(run("exercises", "--json").stdout)) == 7
    shown = run("exercises", "show", "2")
    assert shown.exit_code == 0 and "[2, 0, 0]" in shown.stdout and "1.9586" not in shown.stdout
    assert "1.9586" in run("exercises", "show", "2", "--solution").stdout


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["2", "1.959"], 0, "Correct"),
        (["2", "1.969"], 0, "Correct"),  # within 0.01 of the 1.959 it prints
        (["2", "3"], 1, "Not quite"),
        (["5", "8192"], 0, "Correct"),
        (["5", "8000"], 1, "Not quite"),
        (["4", "row one is [1, 0, 0]"], 0, "written"),
    ],
)
def test_exercises_check_exit_codes(args, code, text):
    result = run("exercises", "check", *args)
    assert result.exit_code == code, result.output
    assert text in result.stdout


def test_exercises_check_json():
    data = json.loads(run("exercises", "check", "2", "1.96", "--json").stdout)
    assert data["correct"] is True and data["number"] == 2 and data["tolerance"] == 0.01


@pytest.mark.parametrize(
    "args",
    [["lab", "permutation", "--plot"], ["bench", "attention", "--n", "8", "--no-torch", "--json"]],
)
def test_an_unwritable_output_path_fails_before_any_work(args, tmp_path):
    from typer.testing import CliRunner

    from attnlab.cli import app

    target = str(tmp_path / "no-such-folder" / ("out.html" if "--plot" in args else "out.json"))
    result = CliRunner().invoke(app, [*args, target])
    assert result.exit_code == 2, result.output
    assert "existing folder" in result.stderr and "Traceback" not in result.output


def test_a_fully_saturated_trial_prints_its_summary():
    # This run was a ZeroDivisionError traceback (the Jacobian norm cancelled to 0).
    result = run("lab", "saturation", "--d-k", "128", "--keys", "2", "--trials", "1", "--seed", "2")
    assert result.exit_code == 0, result.output
    assert "times smaller" in result.stdout and "Traceback" not in result.output


def test_words_that_look_like_rich_markup_are_printed_as_text():
    # "[/x]" used to reach Rich as a closing tag and crash the table with MarkupError.
    result = runner.invoke(
        app, ["lab", "permutation", "--sentence", "[/x] y", "--shuffled", "y [/x]", "--word", "y"]
    )
    assert result.exit_code == 0, result.output
    assert "[/x]" in result.stdout
