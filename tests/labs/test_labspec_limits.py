"""Limits every lab keeps: an honest estimate, bounded memory at any size, refusal and Ctrl-C.

Memory is measured with tracemalloc, which sees numpy's buffers: a run ten times longer must
not need more memory. Estimates are checked against a measured run within a factor of 5, the
upper side against wall time and the lower side against CPU time spread over the cores, so a
busy machine (wall time up, CPU time not) does not fail the test.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import select
import signal
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab import labs
from attnlab.cli import app
from attnlab.labs import LABS
from attnlab.labs._scores import CHUNK_DRAWS
from attnlab.labs.softmax_saturation import KEPT_TRIALS

runner = CliRunner()
FACTOR = 5.0

MEASURED = {
    "variance": {"widths": (64,), "draws": 200_000},
    "saturation": {"d_k": 256, "keys": 64, "trials": 500},
    "sweep": {"widths": (32, 64), "trials": 100, "draws": 50_000},
    "proof": {"d_k": 64, "draws": 200_000},
    "gradient": {"widths": (16, 128, 512), "keys": 64, "trials": 300},
}


@pytest.mark.parametrize("name", list(MEASURED))
def test_the_estimate_is_within_a_factor_of_a_measured_run(name):
    spec, params = LABS[name], MEASURED[name]
    spec(**params)  # warm: imports and first calls are not the lab's cost
    wall, cpu = time.perf_counter(), time.process_time()
    spec(**params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    estimate = spec.cost(**params)
    assert estimate.seconds <= FACTOR * wall, (estimate, wall)
    assert estimate.seconds >= cpu / (FACTOR * (os.cpu_count() or 1)), (estimate, cpu)


@pytest.mark.parametrize(
    "args",
    [
        ["variance", "--draws", str(10**10)],
        ["saturation", "--trials", str(10**9)],
        ["sweep", "--draws", str(10**9)],
        ["cost", "--n", "60000", "--heads", "1"],
        ["proof", "--draws", str(10**10)],
        ["gradient", "--trials", str(10**6), "--width", "4096"],
        ["train-induction", "--steps", "100000", "--batch", "1024"],
        ["train-scaling", "--steps", "20000", "--width", "1024"],
    ],
)
def test_long_work_is_refused_at_once_naming_the_estimate_and_yes(args):
    start = time.monotonic()
    result = runner.invoke(app, ["lab", *args])
    assert time.monotonic() - start < 30  # a hang guard: the work itself would take hours
    assert result.exit_code == 2 and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "estimated at" in lines[0] and "--yes" in lines[0], lines


def test_yes_lets_long_work_run(monkeypatch):
    from attnlab.cli import labs as cli_labs

    monkeypatch.setattr(cli_labs, "LONG_S", 0.0)  # every run is now "long"
    refused = runner.invoke(app, ["lab", "permutation", "--csv"])
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    allowed = runner.invoke(app, ["lab", "permutation", "--csv", "--yes"])
    assert allowed.exit_code == 0 and allowed.stdout.startswith("token,")


def test_estimates_of_memory_do_not_grow_with_the_number_of_draws():
    pairs = (
        ("variance", "draws"),
        ("sweep", "draws"),
        ("saturation", "trials"),
        ("proof", "draws"),
    )
    for name, key in pairs:
        spec = LABS[name]
        assert spec.cost(**{key: 10**9}).bytes == spec.cost(**{key: 10**6}).bytes, name


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("name", "small", "big"),
    [
        # Eight chunks already fill the window of chunks in flight (two per worker thread).
        ("variance", {"widths": (16, 32), "draws": 8 * CHUNK_DRAWS, "workers": 2},
         {"draws": 80 * CHUNK_DRAWS}),
        ("sweep", {"widths": (8, 16), "draws": 8 * CHUNK_DRAWS, "trials": 5, "keys": 4},
         {"draws": 80 * CHUNK_DRAWS}),
        # 3,640 trials per chunk here: the small run already has several full chunks.
        ("saturation", {"d_k": 16, "keys": 8, "trials": 2 * KEPT_TRIALS},
         {"trials": 20 * KEPT_TRIALS}),
    ],
)  # fmt: skip
def test_ten_times_the_draws_need_no_more_memory(name, small, big):
    spec = LABS[name]
    spec(**small)  # warm caches and lazy imports outside the measurement
    peak_small = _peak(lambda: spec(**small))
    peak_big = _peak(lambda: spec(**{**small, **big}))
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big)


def test_saturation_keeps_p_max_per_trial_up_to_a_cap_and_counts_every_trial():
    full = labs.saturation(d_k=4, keys=4, trials=KEPT_TRIALS, threshold=0.5)
    p = np.array(full.unscaled_p_max)  # every trial kept: the running sums must agree with it
    assert len(p) == KEPT_TRIALS and full.unscaled_saturated == (p > 0.5).sum()
    assert full.unscaled_mean_p_max == pytest.approx(p.mean(), rel=1e-12)
    assert full.saturated_mean_p_max == pytest.approx(p[p > 0.5].mean(), rel=1e-12)
    longer = labs.saturation(d_k=4, keys=4, trials=KEPT_TRIALS + 500, threshold=0.5)
    assert longer.unscaled_p_max == full.unscaled_p_max  # the first KEPT_TRIALS only
    assert len(longer.scaled_p_max) == KEPT_TRIALS
    assert longer.unscaled_saturated > full.unscaled_saturated  # the 500 more are counted


def test_a_trial_bigger_than_a_chunk_draws_the_same_numbers_in_row_blocks(monkeypatch):
    whole = labs.saturation(d_k=32, keys=8, trials=6, seed=5)
    module = importlib.import_module("attnlab.labs.softmax_saturation")
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 64)  # (8 + 1) x 32 > 64: blocks
    blocked = labs.saturation(d_k=32, keys=8, trials=6, seed=5)
    assert blocked.unscaled_p_max == pytest.approx(whole.unscaled_p_max, rel=1e-12)
    assert blocked.jacobian_unscaled == pytest.approx(whole.jacobian_unscaled, rel=1e-12)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    spec = LABS["variance"]

    @functools.wraps(spec.run)
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(LABS, "variance", dataclasses.replace(spec, run=interrupted))
    result = runner.invoke(app, ["lab", "variance", "--draws", "100"])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n" and "Traceback" not in result.output


def test_sigint_stops_a_real_long_run_cleanly():
    # "ready" once the imports are done: a SIGINT during them would be a traceback, and on a
    # busy machine they can take longer than any fixed sleep.
    # The child restores SIGINT's default action itself, whatever this process inherited: run
    # in the background or under nohup, SIGINT is ignored, and a child that kept that would run
    # its 10^8 draws to the end. (Not preexec_fn: forking a process that has loaded JAX warns.)
    # The CLI itself keeps the shell's choice.
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from attnlab.cli import main; print('ready', file=sys.stderr, flush=True); main()"
    )
    command = [sys.executable, "-c", code]
    args = ["lab", "variance", "--draws", str(10**8), "--yes"]  # minutes of work
    with subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        try:
            assert select.select([run.stderr], [], [], 120)[0], "the child never got ready"
            assert run.stderr.readline() == "ready\n"
            time.sleep(2)  # into the draws
            assert run.poll() is None
            start = time.monotonic()
            run.send_signal(signal.SIGINT)
            out, err = run.communicate(timeout=30)
        finally:
            if run.poll() is None:  # failed or timed out: the child goes too, at once
                run.kill()
                run.communicate()
    assert run.returncode == 130, err
    assert err.strip() == "interrupted" and out == ""
    assert time.monotonic() - start < 10  # queued chunks are dropped, not finished
