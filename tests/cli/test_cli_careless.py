"""Careless input to every command: exit code 2, one line on stderr starting with ``error:``.

No traceback, no Typer/Rich box, no hang. The whole list runs in one child process (one import
of the CLI, a timeout over all of it) through Typer's CliRunner, which goes through the same
``main`` as the installed command; a sample also runs as real ``attnlab`` processes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TOO_DEEP = "[" * 50_000
HUGE_INT = "1" + "0" * 4000  # 10^4000 written out: an int Python parses, no float can hold

# (command line, words the one line must contain); each fails before any work or binding.
CARELESS: list[tuple[list[str], str]] = [
    # the root app
    (["nosuch"], "'nosuch'"),
    (["--bogus"], "--bogus"),
    (["example", "--bogus"], "--bogus"),
    (["example", "extra"], "extra"),
    (["example", "--no-mask=yes"], "--no-mask"),
    # attention
    (["attention"], "--q"),
    (["attention", "--q", "[[1]]", "--k", "[[1]]"], "--v"),
    (["attention", "--q", "[[1]]", "--k", "[[1]]", "--v"], "--v"),
    (["attention", "--q", "[[1,2],", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "{}", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "[[]]", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "[[true]]", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "[[1,[2]]]", "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "[/x]", "--k", "[[1]]", "--v", "[[1]]"], "[/x]"),  # Rich markup
    (["attention", "--q", "[[1]]", "--k", TOO_DEEP, "--v", "[[1]]"], "--k"),
    (["attention", "--q", "[[1]]", "--k", "[[1]]", "--v", f"[[{HUGE_INT}]]"], "--v"),
    (["attention", "--q", "[[1]]", "--k", "[[1]]", "--v", "[[1e400]]"], "finite"),
    (["attention", "--q", "[[1,2]]", "--k", "[[1]]", "--v", "[[1]]"], "d_k"),
    (["attention", "--q", json.dumps([[1]] * 5000), "--k", "[[1]]", "--v", "[[1]]"], "--q"),
    (["attention", "--q", "[[1]]", "--k", "[[1]]", "--v", "[[1]]", "--causal=no"], "--causal"),
    # cost: every option, absurd values
    (["cost", "--n", "0"], "--n"),
    (["cost", "--n", "-5"], "--n"),
    (["cost", "--n", "abc"], "--n"),
    (["cost", "--n", "1.5"], "--n"),
    (["cost", "--n", "1e400"], "--n"),
    (["cost", "--n", "10^4000"], "--n"),
    (["cost", "--n", HUGE_INT], "--n"),
    (["cost", "--n", "1" + "0" * 5000], "--n"),  # past Python's 4,300-digit conversion limit
    (["cost", "--n"], "--n"),
    (["cost", *("--n 8 " * 9).split()], "--n"),
    (["cost", "--d-model", "0"], "--d-model"),
    (["cost", "--d-model", "-1"], "--d-model"),
    (["cost", "--d-model", "1e400"], "--d-model"),
    (["cost", "--d-model", HUGE_INT], "--d-model"),
    (["cost", "--d-model", "wide"], "--d-model"),
    (["cost", "--flops=3"], "--flops"),
    (["cost", "--json", "--bogus"], "--bogus"),
    # serve: all refused before a socket is bound
    (["serve", "--port", "0"], "--port"),
    (["serve", "--port", "70000"], "--port"),
    (["serve", "--port", "abc"], "--port"),
    (["serve", "--host", ""], "--host"),
    (["serve", "--bogus"], "--bogus"),
    # exercises
    (["exercises", "nosuch"], "'nosuch'"),
    (["exercises", "--bogus"], "--bogus"),
    (["exercises", "show", "8"], "number"),
    (["exercises", "show", "x"], "number"),
    (["exercises", "check"], "number"),
    (["exercises", "check", "2"], "answer"),
    (["exercises", "check", "2", "1_959"], "1_959"),  # not read as 1959
    (["exercises", "check", "2", "abc"], "abc"),
    # lab
    (["lab", "nosuch"], "'nosuch'"),
    (["lab", "variance", "--width", "0"], "--width"),
    (["lab", "variance", "--width", "abc"], "--width"),
    (["lab", "variance", "--seed", "-1"], "--seed"),
    (["lab", "variance", "--json", "--csv"], "--csv"),
    (["lab", "variance", "--plot", "out.txt"], "--plot"),
    (["lab", "variance", "--plot", "/nonexistent/folder/x.html"], "--plot"),
    (["lab", "saturation", "--threshold", "2"], "--threshold"),
    (["lab", "variance", "--bogus"], "--bogus"),
    # bench
    (["bench", "nosuch"], "'nosuch'"),
    (["bench", "attention", "--n", "abc"], "--n"),
    (["bench", "attention", "--n", "0"], "--n"),
    (["bench", "attention", "--heads", "0"], "--heads"),
    (["bench", "attention", "--json", "/nonexistent/folder/x.json"], "--json"),
    (["bench", "labs", "--repeats", "0"], "--repeats"),
    # files a lab writes: checked before the work, never over a file without --force
    (["lab", "train-induction", "--save", "keep.npz"], "--save"),
    (["lab", "train-induction", "--save", "."], "--save"),
    (["lab", "train-induction", "--save", "model.txt"], "--save"),
    (["lab", "train-induction", "--save", "/proc/attnlab.npz"], "--save"),
    (["lab", "train-induction", "--save", "/nonexistent/folder/m.npz"], "--save"),
    (["lab", "train-induction", "--snapshots", "3"], "--snapshots"),
    (["lab", "variance", "--plot", "keep.html"], "--plot"),
    (["lab", "variance", "--plot", "/proc/attnlab.html"], "--plot"),
    (["verify", "missing.npz", "--plot", "/proc/attnlab.html"], "--plot"),
    (["verify", "missing.npz", "--plot", "keep.html"], "--plot"),
    # bench small: hours of blocks ask for --yes; shapes checked
    (["bench", "small", "--rounds", "1000", "--block-ms", "10000"], "--yes"),
    (["bench", "small", "--shape", "1,1,4"], "--shape"),
    (["bench", "small", "--shape", "1,1,4,２"], "--shape"),
    (["bench", "small", "--shape", "0,1,4,2"], "--shape"),
    # the training labs: a table past half the memory, a vocabulary past the cap
    (["lab", "train-positions", "--vocab-size", "4097"], "--vocab-size"),
    (["lab", "train-induction", "--vocab-size", "4096", "--steps", "100000"], "--yes"),
]

# Files in the sweep's working folder before it runs: no case may change or remove them.
KEPT = {"keep.npz": b"KEEP-MODEL", "keep.html": b"KEEP-PAGE"}

# One child process runs every case: it prints, per case, the exit code, stderr, the type of an
# exception that escaped (None for a clean exit) and the seconds it took.
CHILD = """
import json, sys, time
from typer.testing import CliRunner
from attnlab.cli import app

out = []
for args in json.load(sys.stdin):
    start = time.perf_counter()
    result = CliRunner().invoke(app, args)
    escaped = None if isinstance(result.exception, SystemExit) else type(result.exception).__name__
    out.append([result.exit_code, result.stderr, escaped, time.perf_counter() - start])
json.dump(out, sys.stdout)
"""

SECONDS_EACH = 10  # a case that runs a lab or binds a port would take longer (or forever)


def _label(args: list[str]) -> str:
    text = shlex.join(args)
    return text if len(text) <= 60 else f"{text[:57]}..."


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> list[list]:
    # A scratch folder as the working directory: no case may leave a file behind there.
    cwd = tmp_path_factory.mktemp("careless")
    for name, data in KEPT.items():
        (cwd / name).write_bytes(data)
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps([args for args, _ in CARELESS]),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert sorted(p.name for p in cwd.iterdir()) == sorted(KEPT)  # nothing new, nothing lost
    assert all((cwd / name).read_bytes() == data for name, data in KEPT.items())
    got = json.loads(child.stdout)
    assert len(got) == len(CARELESS)
    return got


def test_the_list_covers_every_command():
    assert len(CARELESS) >= 40
    firsts = {args[0] for args, _ in CARELESS}
    assert {"example", "attention", "cost", "serve", "exercises", "lab", "bench"} <= firsts


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize("case", range(len(CARELESS)), ids=[_label(a) for a, _ in CARELESS])
def test_careless_input_is_one_line_and_exit_2(outcomes, case):
    words = CARELESS[case][1]
    code, stderr, escaped, seconds = outcomes[case]
    assert escaped is None, f"{escaped} escaped: {stderr}"
    assert code == 2, stderr
    line = one_error_line(stderr)
    assert words in line
    assert "Traceback" not in stderr and "╭" not in stderr  # no Rich error box
    assert len(line) < 600  # the user's text is echoed clipped, not whole
    assert seconds < SECONDS_EACH


def test_the_one_line_check_can_fail():
    with pytest.raises(AssertionError):
        one_error_line("Usage: attnlab cost [OPTIONS]\nTry 'attnlab cost --help' for help.\n")
    with pytest.raises(AssertionError):
        one_error_line("╭─ Error ─╮\n│ Invalid value │\n╰───╯")


ATTNLAB = Path(sys.executable).with_name("attnlab")

# The same promise through the installed entry point, a case per command group.
REAL = [
    ["nosuch"],
    ["example", "--bogus"],
    ["attention", "--q", TOO_DEEP, "--k", "[[1]]", "--v", "[[1]]"],
    ["cost", "--n", HUGE_INT],
    ["serve", "--port", "70000"],
    ["exercises", "check", "2", "1_959"],
    ["lab", "variance", "--width", "0"],
    ["bench", "attention", "--heads", "0"],
]


@pytest.mark.skipif(not ATTNLAB.exists(), reason="the attnlab entry point is not installed")
def test_the_installed_command_prints_one_line_too(tmp_path):
    def run(args):
        return subprocess.run(
            [str(ATTNLAB), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, REAL))
    for args, done in zip(REAL, results, strict=True):
        assert done.returncode == 2, (_label(args), done.stderr)
        one_error_line(done.stderr)
        assert "Traceback" not in done.stderr and "╭" not in done.stderr
