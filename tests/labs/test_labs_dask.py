"""The sampling labs on a Dask cluster: bitwise the local numbers, on two workers and on one.

One LocalCluster per module (two worker processes, one thread each, on 127.0.0.1), so every
chunk and every partial really crosses a process boundary. The reference is the same lab run
here without a client; equality is exact (``==`` on every float), never a tolerance.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import AttnlabError
from attnlab.labs import LABS
from attnlab.labs._common import VARIANCE
from attnlab.labs._scores import score_chunks, score_partials

distributed = pytest.importorskip("distributed")

runner = CliRunner()

# Each case spans several chunks, so the order of the combine matters.
CASES = {
    # 4 chunks of 16,384 pairs, 3 blocks of 16 coordinates, widths out of order
    "variance": ("variance", {"widths": (8, 40, 3), "draws": 50_000, "seed": 3}),
    # 31 trials per chunk: 4 chunks chained on one stream
    "saturation": ("saturation", {"d_k": 256, "keys": 64, "trials": 100, "seed": 2}),
    # a trial bigger than a chunk: its keys drawn in row blocks, one trial per chunk
    "saturation-big-trial": ("saturation", {"d_k": 8192, "keys": 80, "trials": 2, "seed": 1}),
    # 3 histogram chunks, and a saturation run per width
    "sweep": ("sweep", {"widths": (8, 32), "draws": 40_000, "trials": 60, "bins": 10, "seed": 4}),
    # 4,096 pairs per chunk: 5 chunks, the last one short
    "proof": ("proof", {"d_k": 64, "draws": 20_000, "seed": 5}),
    # 34 trials per chunk at d_k = 200 (3 chunks chained on its stream), 112 at d_k = 40 (1)
    "gradient": ("gradient", {"widths": (200, 40), "keys": 64, "trials": 100, "d_v": 32,
                              "seed": 6}),
}  # fmt: skip
CLI = {  # the same runs as options
    "variance": ["--width", "8", "--width", "40", "--width", "3", "--draws", "50000", "--seed", "3"],
    "saturation": ["--d-k", "256", "--keys", "64", "--trials", "100", "--seed", "2"],
    "sweep": ["--width", "8", "--width", "32", "--draws", "40000", "--trials", "60", "--bins",
              "10", "--seed", "4"],
    "proof": ["--d-k", "64", "--draws", "20000", "--seed", "5"],
    "gradient": ["--width", "200", "--width", "40", "--keys", "64", "--trials", "100", "--d-v",
                 "32", "--seed", "6"],
}  # fmt: skip
TASKS = {"variance": 4, "proof": 5, "gradient": 3 + 1}  # one task per chunk


@pytest.fixture(scope="module")
def cluster():
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # No dashboard, but the scheduler's HTTP routes still bind, by default to 8787: a
        # random loopback port instead, so another cluster on this machine cannot collide.
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        memory_limit="2GiB",
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def client(cluster):
    c = distributed.Client(cluster, set_as_default=False)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def two_workers(client):
    """The client, with both workers up (a test before may have scaled to one)."""
    if len(client.nthreads()) != 2:
        client.cluster.scale(2)
        client.wait_for_workers(2, timeout=120)
    return client


@pytest.fixture(scope="module")
def local():
    """Each case run here, without a client: the reference."""
    return {case: LABS[lab](**kwargs) for case, (lab, kwargs) in CASES.items()}


def _same(remote, here) -> None:
    assert remote.as_dict() == here.as_dict()
    assert remote == here  # every field, floats compared with ==


def test_every_lab_that_takes_a_client_is_checked_here():
    with_client = {name for name, spec in LABS.items() if "client" in {p.name for p in spec.params}}
    assert {"variance", "saturation", "sweep", "proof", "gradient"} <= with_client
    assert with_client <= {lab for lab, _ in CASES.values()}, "add a case for the new lab"
    for name in with_client:  # the CLI's --scheduler, never a web field
        param = LABS[name].param("client")
        assert param.option == "--scheduler" and not param.web and param.default is None


@pytest.mark.parametrize("case", list(CASES))
def test_two_workers_give_the_local_bits(case, two_workers, local):
    lab, kwargs = CASES[case]
    with distributed.get_task_stream(two_workers) as tasks:
        remote = LABS[lab](**kwargs, client=two_workers)
    _same(remote, local[case])
    assert tasks.data, "the run never reached the cluster"
    if case in TASKS:
        assert len(tasks.data) == TASKS[case]
    if lab in ("variance", "proof"):  # chunks keyed by their index: shared out over both workers
        assert len({t["worker"] for t in tasks.data}) == 2


def test_chunks_cross_the_process_boundary_unchanged(two_workers):
    here = list(score_chunks(7, VARIANCE, (24, 5), 40_000))
    there = list(score_partials(7, VARIANCE, (24, 5), 40_000, np.copy, client=two_workers))
    assert len(here) == len(there) == 3
    assert all(np.array_equal(a, b) for a, b in zip(here, there, strict=True))


def test_an_abandoned_run_cancels_its_chunks(two_workers):
    # What Ctrl-C does: the generator closes and the chunks not yet done are cancelled.
    chunks = score_partials(0, VARIANCE, (64,), 10**9, np.sum, client=two_workers)
    next(chunks)
    assert len(two_workers.futures) > 1  # more chunks were in flight
    chunks.close()
    deadline = time.monotonic() + 30
    while two_workers.futures and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not two_workers.futures


@pytest.mark.parametrize("lab", list(CLI))
def test_the_cli_on_the_cluster_prints_the_same_json(lab, cluster, two_workers):
    here = runner.invoke(app, ["lab", lab, *CLI[lab], "--json"])
    there = runner.invoke(
        app, ["lab", lab, *CLI[lab], "--json", "--scheduler", cluster.scheduler_address]
    )
    assert here.exit_code == 0 and there.exit_code == 0, there.output
    assert there.stdout == here.stdout
    assert json.loads(there.stdout)["lab"] == lab
    assert cluster.scheduler_address in there.stderr  # "on tcp://...: 2 worker thread(s)"


def test_the_estimate_still_refuses_long_runs_on_a_cluster(cluster, two_workers):
    address = cluster.scheduler_address
    result = runner.invoke(
        app, ["lab", "variance", "--draws", "1000000000", "--scheduler", address]
    )
    assert result.exit_code == 2 and "--yes" in result.stderr
    for name in ("variance", "proof"):  # chunks shared out: at most the time here, and a bit
        spec = LABS[name]
        on_cluster = spec.cost(draws=10**8, client=two_workers)
        assert 0 < on_cluster.seconds < 2 * spec.cost(draws=10**8).seconds
    for name in ("saturation", "gradient"):  # a chain of tasks, one at a time: no faster
        spec = LABS[name]
        assert spec.cost(trials=10**5, client=two_workers).seconds > spec.cost(trials=10**5).seconds


@pytest.mark.parametrize("lab", ["variance", "saturation", "sweep", "proof", "gradient"])
def test_bad_clients_are_refused_by_name(lab):
    with pytest.raises(AttnlabError, match="expected client"):
        LABS[lab](client="tcp://127.0.0.1:8786")  # an address is not a Client


@pytest.mark.parametrize("lab", ["variance", "proof"])
def test_threads_and_a_cluster_are_refused_together(lab, two_workers):
    with pytest.raises(AttnlabError, match="workers or client"):
        LABS[lab](draws=100, workers=2, client=two_workers)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """attnlab in a fresh interpreter: what a user sees, exit handlers included."""
    code = "import sys; from attnlab.cli import main; sys.argv[0] = 'attnlab'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout
    )


def test_an_unreachable_scheduler_is_one_line_and_exit_2():
    address = "tcp://127.0.0.1:9"  # the discard port: nothing listens there
    done = _cli("lab", "variance", "--scheduler", address, timeout=15 + 30)  # a hang guard
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") and address in lines[0]
    assert done.stdout == ""


def test_a_listener_that_is_no_scheduler_is_one_line_and_exit_2(monkeypatch):
    import attnlab.cli.labs as cli_labs

    monkeypatch.setattr(cli_labs, "CONNECT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        result = runner.invoke(app, ["lab", "saturation", "--scheduler", address])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and address in lines[0], result.output
    assert "Traceback" not in result.output


def test_importing_the_labs_does_not_import_dask():
    code = (
        "import sys, attnlab, attnlab.labs, attnlab.cli.labs; "
        "print([m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


def test_one_worker_gives_the_local_bits(client, local):
    # Last in the file, so that no later test pays for starting the second worker again.
    client.cluster.scale(1)
    deadline = time.monotonic() + 60
    while len(client.nthreads()) != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(client.nthreads()) == 1
    for case, (lab, kwargs) in CASES.items():
        _same(LABS[lab](**kwargs, client=client), local[case])
