"""`attnlab bench verify`: the command's report shape (no timing is asserted)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnlab.cli import app


def test_bench_verify_reports_attnlabs_side():
    result = CliRunner().invoke(
        app, ["bench", "verify", "--n", "32", "--heads", "1", "--d", "8", "--no-torch", "--json"]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["case"]["N"] == 32 and got["attnlab"]["seconds"] > 0, got
    assert got["attnlab"]["peak_mib"] > 0 and "torch" not in got
    # the random case fails, so its diagnosis runs, timed on its own within the call
    mine = got["attnlab"]
    assert 0 < mine["diagnosis_seconds"] < mine["seconds"]
    assert mine["verdict_seconds"] + mine["diagnosis_seconds"] == pytest.approx(mine["seconds"])
    text = CliRunner().invoke(
        app, ["bench", "verify", "--n", "32", "--heads", "1", "--d", "8", "--no-torch"]
    )
    assert "of which diagnosis" in text.stdout


def test_bench_verify_refuses_an_unknown_dtype():
    bad = CliRunner().invoke(app, ["bench", "verify", "--dtype", "int8"])
    assert bad.exit_code == 2 and "--dtype" in bad.stderr


def test_bench_verify_on_a_cluster_times_verify_there():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=":0"
    )
    try:
        args = ["bench", "verify", "--n", "32", "--heads", "2", "--d", "8", "--no-torch", "--json"]
        result = CliRunner().invoke(app, [*args, "--scheduler", cluster.scheduler_address])
        ran = set(cluster.scheduler.task_prefixes)  # the kinds of task the cluster was given
    finally:
        cluster.close()
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["case"]["scheduler"] == cluster.scheduler_address and got["attnlab"]["seconds"] > 0
    assert ran, "the timed verify sent no task to the cluster"


def test_bench_verify_names_a_scheduler_that_does_not_answer():
    bad = CliRunner().invoke(app, ["bench", "verify", "--scheduler", "tcp://127.0.0.1:9"])
    assert bad.exit_code == 2 and "--scheduler" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
