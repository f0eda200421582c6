"""``attnlab bench small``'s measuring child dies with the CLI; long runs ask for ``--yes``; a
run in which every shape failed exits 1.

The process tests start the real CLI, wait for its measuring child, kill the CLI and watch the
child: it must be gone within seconds rather than spinning at full CPU for the rest of its
rounds. Every process is killed in a ``finally``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnlab.bench import _small as small_bench
from attnlab.cli import app

SRC = str(Path(__file__).resolve().parents[2] / "src")
# 200 rounds of 4 calls (no torch) of 50 ms blocks and 50 ms gaps: 80 s, under the --yes gate
LONG = ["--shape", "1,1,4,2", "--rounds", "200", "--block-ms", "50", "--no-torch"]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited; only its entry is left


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_measuring_child_exits_with_the_cli(sig):
    env = dict(os.environ, PYTHONPATH=SRC)
    code = "from attnlab.cli import app; app()"
    cli = subprocess.Popen([sys.executable, "-c", code, "bench", "small", *LONG], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    child = None
    try:
        deadline = time.monotonic() + 60
        while child is None and time.monotonic() < deadline:
            found = _children(cli.pid)
            child = found[0] if found else None
            time.sleep(0.1)
        assert child is not None, "the CLI started no measuring child"
        time.sleep(1.0)  # the child is past its imports and measuring
        cli.send_signal(sig)
        cli.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the measuring child outlived the CLI"
    finally:
        cli.kill()
        cli.wait(timeout=10)
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_hours_of_rounds_ask_for_yes(monkeypatch):
    monkeypatch.setattr(small_bench, "small", lambda *a, **k: pytest.fail("the bench ran"))
    result = CliRunner().invoke(app, ["bench", "small", "--rounds", "1000", "--block-ms", "10000"])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "--yes" in line and "--rounds" in line


def test_every_shape_failing_exits_1(monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 8.00 GiB")

    monkeypatch.setattr(small_bench, "_calls", no_memory)
    args = ["bench", "small", "--shape", "2,2,8,4", "--shape", "1,1,4,2", "--rounds", "1",
            "--block-ms", "1", "--no-isolate", "--no-torch"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "MemoryError" in result.output and "Traceback" not in result.output
