"""Files the CLI writes (never over a file without --force, atomically, no empty file left by a
failure), the caps of `bench distributed`, the --yes gate past the explorer's limits, a
non-zero exit when no benchmark configuration ran, and numbers in other scripts' digits."""

from __future__ import annotations

import contextlib
import os

import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import AttnlabError
from attnlab.exercises import check

SMALL_VARIANCE = ["lab", "variance", "--width", "16", "--draws", "2000"]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_plot_refuses_to_overwrite_a_file_without_force(tmp_path):
    page = tmp_path / "x.html"
    page.write_text("KEEP\n")
    line = one_line_error(run(*SMALL_VARIANCE, "--plot", str(page)))
    assert "--force" in line and "already exists" in line
    assert page.read_text() == "KEEP\n"


def test_plot_with_force_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    page = tmp_path / "x.html"
    page.write_text("KEEP\n")
    result = run(*SMALL_VARIANCE, "--plot", str(page), "--force")
    assert result.exit_code == 0, result.output
    assert "Plotly.newPlot" in page.read_text(encoding="utf-8")
    assert sorted(os.listdir(tmp_path)) == ["x.html"]


def test_a_run_stopped_before_writing_leaves_no_empty_file(tmp_path, monkeypatch):
    import attnlab.cli.labs as labs_cli

    @contextlib.contextmanager
    def interrupted(label):  # Ctrl-C as the lab starts, after the output path was checked
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(labs_cli, "_progress", interrupted)
    page = tmp_path / "x.html"
    result = run(*SMALL_VARIANCE, "--plot", str(page))
    assert result.exit_code == 130, result.output
    assert os.listdir(tmp_path) == []  # the check before the run created nothing


def test_a_write_that_fails_keeps_the_old_file_and_leaves_nothing_else(tmp_path, monkeypatch):
    import attnlab.cli._files as files

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    page = tmp_path / "x.html"
    page.write_text("KEEP\n")
    line = one_line_error(run(*SMALL_VARIANCE, "--plot", str(page), "--force"))
    assert "No space left" in line
    assert page.read_text() == "KEEP\n" and os.listdir(tmp_path) == ["x.html"]


@pytest.mark.parametrize("command", ["attention", "backward"])
def test_bench_json_refuses_to_overwrite_before_any_work(tmp_path, command):
    out = tmp_path / "bench.json"
    out.write_text("{}\n")
    line = one_line_error(run("bench", command, "--n", "8", "--no-torch", "--json", str(out)))
    assert "--json" in line and "--force" in line
    assert out.read_text() == "{}\n"


def test_bench_exits_non_zero_when_every_configuration_failed(monkeypatch):
    # The GEMM ceiling takes seconds to measure and is not under test.
    monkeypatch.setattr("attnlab.bench._suite.gemm_ceiling", lambda *a, **k: 1.0)
    result = run(
        "bench", "backward", "--heads", "1000000000", "--n", "16", "--no-torch", "--no-isolate",
        "--quick",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "every configuration failed" in result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workers", "1000"], "from 1 to 64"),
        (["--workers", "0"], "from 1 to 64"),
        (["--workers", "1,x"], "comma list"),
        (["--workers", "١"], "ASCII"),
        (["--n", "1000000000", "--workers", "1"], "memory"),
        (["--scheduler", "bogus"], "--scheduler"),
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
    ],
)
def test_bench_distributed_refuses_in_one_line(args, words):
    pytest.importorskip("distributed")
    line = one_line_error(run("bench", "distributed", *args))
    assert words in line


def test_saturation_past_the_explorer_asks_for_yes():
    line = one_line_error(
        run("lab", "saturation", "--d-k", "65536", "--keys", "4096", "--trials", "1")
    )
    assert "--yes" in line and "--d-k <= 1024" in line


@pytest.mark.parametrize(
    "args",
    [
        ["exercises", "check", "2", "١٩٥٩"],  # Arabic-Indic digits: float() reads 1959
        ["exercises", "check", "٢", "1.959"],
        ["exercises", "check", "2", "１.９５９"],  # full-width digits
        ["lab", "variance", "--draws", "٢٠٠٠"],
        ["lab", "variance", "--draws=٢٠٠٠"],
        ["bench", "attention", "--n", "٥١٢", "--no-torch"],
    ],
)
def test_numbers_in_other_scripts_digits_are_refused(args):
    assert "ASCII" in one_line_error(run(*args))


def test_the_grader_refuses_other_scripts_digits_too():
    with pytest.raises(AttnlabError, match="number"):
        check(2, "١٩٥٩")
    assert check(2, "1.959").correct is True
