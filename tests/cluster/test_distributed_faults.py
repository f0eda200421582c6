"""Distributed attention when things go wrong: no worker left (an error naming the scheduler
after a deadline, not a hang), chunk counts that would make thousands of tiny tasks (a floor
on a task's size), and NaN advice that names only what this function takes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from attnlab.core._validate import validate
from attnlab.errors import AttnlabError, NonFiniteInputError

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dist = pytest.importorskip("attnlab.distributed")
from attnlab.distributed import _graph  # noqa: E402
from attnlab.distributed._plan import MIN_TASK_SCORES, make_plan  # noqa: E402

JOIN_S = 60.0  # a call that has not returned by then is the hang this file is about


def _in_thread(fn):
    """fn() on a daemon thread, joined for at most JOIN_S: (result, error)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed back to the test
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(JOIN_S)
    assert not worker.is_alive(), f"the call was still running after {JOIN_S:g} s"
    return box.get("result"), box.get("error")


def test_a_cluster_with_no_worker_left_is_an_error_naming_the_scheduler(monkeypatch):
    monkeypatch.setattr(_graph, "WORKERLESS_S", 1.0)
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        cluster.scale(0)  # every worker gone, as when they are killed
        deadline = time.monotonic() + 30
        while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        q = np.random.default_rng(0).standard_normal((2, 16, 4))
        _, error = _in_thread(lambda: dist.attention(q, q, q, client=client, kv_chunks=1))
        assert isinstance(error, AttnlabError), error
        assert cluster.scheduler_address in str(error) and "no worker" in str(error)
    finally:
        client.close()
        cluster.close()


def test_tiny_chunks_are_merged_into_a_few_tasks():
    q = np.random.default_rng(0).standard_normal((2, 64, 8))
    x = validate(q, q, q)
    plan = make_plan(x, 64, 64, threads=2, budget=None)
    assert plan.tasks <= 16  # not 4,096 tasks of two scores each
    assert plan.tasks < 64 * 64
    out = dist.attention(q, q, q, q_chunks=64, kv_chunks=64)
    np.testing.assert_allclose(out, dist.attention(q, q, q, q_chunks=1, kv_chunks=1), atol=1e-12)


def test_counts_given_for_big_tasks_are_kept():
    # 2 x 512 x 512 scores in 8 x 8 tasks: 8,192 scores each... under the floor, so merged;
    # 2 x 2048 x 2048 in 8 x 8: 131,072 each, over it, so kept as asked.
    big = validate(np.zeros((2, 2048, 1)), np.zeros((2, 2048, 1)), np.zeros((2, 2048, 1)))
    assert make_plan(big, 8, 8, threads=2, budget=None).tasks == 64
    assert 2 * 256 * 256 >= MIN_TASK_SCORES


def test_nan_advice_names_no_argument_the_function_lacks():
    q = np.ones((2, 8, 4))
    bad = q.copy()
    bad[0, 3, 1] = np.nan
    with pytest.raises(NonFiniteInputError, match="nan_to_num") as info:
        dist.attention(bad, q, q)
    assert "check_finite" not in str(info.value)
    with pytest.raises(NonFiniteInputError, match="nan_to_num") as info:
        dist.attention(da.from_array(bad), q, q, q_chunks=2)
    assert "check_finite" not in str(info.value)
