"""verify on a Dask cluster (client= and --scheduler): the verdict and errors of a local run.

A two-worker LocalCluster in this process (processes=False) runs the parts; kernel outputs
come from tests/verify_reference.py (independent float64 numpy).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.verifier import verify
from verify_reference import inputs, reference

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def _same(local, remote):
    assert local.passed == remote.passed and local.summary() == remote.summary()
    for name, t in local.tensors.items():
        r = remote.tensors[name]
        for field in ("max_abs_error", "mean_abs_error", "baseline_error", "baseline_mean_error"):
            a, b = getattr(t, field), getattr(r, field)
            assert abs(a - b) <= 1e-12 * max(abs(a), 1e-300), (name, field, a, b)
        assert t.worst == r.worst, name


def test_a_backward_case_with_gqa_and_alibi_matches_the_local_run(client):
    rng = np.random.default_rng(0)
    q, k, v = inputs(rng, b=2, n=40, m=40, h=4, h_kv=2, dtype=ml_dtypes.bfloat16)
    do = rng.standard_normal(q.shape).astype(ml_dtypes.bfloat16)
    slopes = rng.random(4)
    got = reference(q, k, v, do, causal=True, alibi_slopes=slopes)
    case = {name: x.astype(ml_dtypes.bfloat16) for name, x in got.items() if name != "lse"}
    case.update(q=q, k=k, v=v, do=do, lse=got["lse"].astype(np.float32), causal=True,
                alibi_slopes=slopes)  # fmt: skip
    case["dk"][1, 7, 0, 3] += 1  # one wrong entry: the verdict must fail in the same place
    local = verify(**case, memory_budget=2**16)
    with distributed.get_task_stream(client=client) as stream:
        remote = verify(**case, memory_budget=2**16, client=client)
    assert len(stream.data) >= 4  # 2 sequences x 2 key/value heads: tasks on the workers
    assert not remote.passed and remote.tensors["dk"].worst["row"] == 7
    _same(local, remote)


def test_a_passing_case_with_sinks_and_a_window_matches(client):
    rng = np.random.default_rng(1)
    q, k, v = inputs(rng, b=1, n=64, m=48, h=6, h_kv=3, dtype=np.float16)
    sinks = rng.standard_normal(6)
    out = reference(q, k, v, window_size=(8, 2), sinks=sinks)["out"].astype(np.float16)
    local = verify(q=q, k=k, v=v, out=out, window_size=(8, 2), sinks=sinks)
    remote = verify(q=q, k=k, v=v, out=out, window_size=(8, 2), sinks=sinks, client=client)
    assert local.passed
    _same(local, remote)


def test_a_malformed_case_is_the_same_error_before_any_task(client):
    q, k, v = inputs(np.random.default_rng(2))
    with pytest.raises(AttnlabError, match="out: missing array"):
        verify(q=q, k=k, v=v, client=client)
    with pytest.raises(AttnlabError, match="client"):
        verify(q=q, k=k, v=v, out=q, client="tcp://nowhere:1")


def test_the_cli_takes_a_scheduler(client, tmp_path):
    from typer.testing import CliRunner

    from attnlab.cli import app

    q, k, v = inputs(np.random.default_rng(3))
    out = reference(q, k, v, causal=True)["out"].astype(np.float32)
    path = tmp_path / "case.npz"
    np.savez(path, q=q, k=k, v=v, out=out, causal=True)
    address = client.scheduler.address
    result = CliRunner().invoke(app, ["verify", str(path), "--scheduler", address, "--json"])
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, ["verify", str(path), "--scheduler", "tcp://127.0.0.1:9"])
    assert bad.exit_code == 2 and "--scheduler" in bad.stderr
