"""The direct road of distributed attention (``distributed/_placed.py``): numpy chunks scattered
straight to the workers that read them, pairs dealt out by cost, the embedded graph as the
fallback; and ``bench distributed``'s verdict against a running cluster.

Speed is the benchmark's business (docs/bench.md); these tests check where the work goes and
that the answer is the same as ``attnlab.attention``.
"""

from __future__ import annotations

from concurrent.futures import CancelledError

import numpy as np
import pytest
from typer.testing import CliRunner

import attnlab as al
from attnlab.core._validate import validate
from attnlab.masks import Causal
from tolerances import BLOCKWISE_F64

distributed = pytest.importorskip("distributed")
dist = pytest.importorskip("attnlab.distributed")
from attnlab.distributed import _placed  # noqa: E402
from attnlab.distributed._plan import make_plan  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


def _qkv(n=64, m=64, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((2, n, 8)),
        rng.standard_normal((2, m, 8)),
        rng.standard_normal((2, m, 8)),
    )


def test_pairs_are_dealt_out_evenly_and_each_once():
    q, k, v = _qkv()
    x = validate(q, k, v)
    plan = make_plan(x, 2, 2, 2, None)
    where = _placed.deal(x, plan, ["a", "b"])
    assert sorted(where) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted(where.values()) == ["a", "a", "b", "b"]
    # A causal mask: the diagonal pairs are half the work of the full one below them.
    xc = validate(q, k, v, Causal())
    plan = make_plan(xc, 4, 4, 2, None)
    where = _placed.deal(xc, plan, ["a", "b"])
    assert len(where) == 10  # 4 diagonal (half) + 6 below it (full)
    load = {"a": 0.0, "b": 0.0}
    for (i, j), w in where.items():
        load[w] += 0.5 if i == j else 1.0
    assert load == {"a": 4.0, "b": 4.0}


def test_numpy_inputs_take_the_direct_road_and_equal_attention(client):
    q, k, v = _qkv(n=48, m=40)
    with distributed.get_task_stream(client) as stream:
        out = dist.attention(q, k, v, Causal(), client=client, q_chunks=2, kv_chunks=2)
    keys = [str(t["key"]) for t in stream.data]
    assert any(key.startswith("attnlab-partial-") for key in keys)
    assert not any(key.startswith(("attnlab-q-", "attnlab-k-", "attnlab-v-")) for key in keys)
    np.testing.assert_allclose(out, al.attention(q, k, v, Causal()), **BLOCKWISE_F64)


@pytest.mark.parametrize(
    "error",
    [CancelledError("a worker holding chunks died"), OSError("a worker left: comm closed")],
)
def test_lost_chunks_fall_back_to_the_embedded_graph(client, monkeypatch, error):
    def lost(*args):
        raise error

    monkeypatch.setattr(_placed, "_scatter", lost)
    q, k, v = _qkv()
    with distributed.get_task_stream(client) as stream:
        out = dist.attention(q, k, v, client=client, q_chunks=2, kv_chunks=2)
    keys = [str(t["key"]) for t in stream.data]
    assert any(key.startswith("attnlab-q-") for key in keys)  # the graph carried the chunks
    np.testing.assert_allclose(out, al.attention(q, k, v), **BLOCKWISE_F64)


def test_bench_against_a_scheduler_compares_with_blockwise_and_gives_a_verdict(client):
    from attnlab.cli import app

    address = client.scheduler.address
    result = CliRunner().invoke(
        app,
        ["bench", "distributed", "--n", "256", "--heads", "1", "--d", "8", "--repeats", "1",
         "--scheduler", address],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = result.output
    assert f"cluster {address}" in text
    assert "target: the cluster at most 25% over blockwise with threads=2" in text
    assert "PASS" in text or "FAIL" in text
    # These workers keep Dask's default profiler on: the run says how to start quieter ones.
    assert "its workers run Dask's profiler" in text


def test_the_quiet_settings_spelled_as_environment_variables_read_back_the_same():
    import dask

    from attnlab.cli.distributed import QUIET_DASK, QUIET_ENV

    env = dict(pair.split("=", 1) for pair in QUIET_ENV.split())
    with dask.config.set(dask.config.collect_env(env)):
        for key, value in QUIET_DASK.items():
            assert dask.config.get(key) == value
