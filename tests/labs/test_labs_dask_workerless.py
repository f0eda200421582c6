"""A lab on a Dask scheduler without workers answers within a bound, never waits for ever.

A scheduler with no worker keeps submitted tasks queued for ever. A lab given such a client
is refused at its start (the scheduler reports no worker), and a run whose workers all go away
midway stops once the scheduler has had none for ``WORKERLESS_S`` (the same bound as
``attnlab.distributed.attention``), its queued chunks cancelled.
"""

from __future__ import annotations

import threading
import time

import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import LABS

distributed = pytest.importorskip("distributed")

SMALL = {
    "variance": {"widths": (16,), "draws": 2000},
    "proof": {"d_k": 16, "draws": 2000},
    "saturation": {"d_k": 16, "keys": 8, "trials": 10},
    "gradient": {"widths": (16,), "keys": 8, "trials": 10, "d_v": 4},
    "sweep": {"widths": (16,), "keys": 8, "trials": 10, "draws": 1000},
}


@pytest.fixture(scope="module")
def scheduler_only():
    cluster = distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _bounded(fn, limit_s: float):
    """fn() in a thread; (its exception, seconds), or a failure if it runs past limit_s."""
    box = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # handed to the test to judge
            box["error"] = exc

    start = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"no answer within {limit_s} s"
    return box.get("error"), time.monotonic() - start


@pytest.mark.parametrize("lab", sorted(SMALL))
def test_a_lab_is_refused_at_once_by_a_scheduler_with_no_worker(scheduler_only, lab):
    spec = LABS[lab]
    error, seconds = _bounded(lambda: spec.run(**SMALL[lab], client=scheduler_only), 20)
    assert isinstance(error, AttnlabError), error
    assert "no worker" in str(error) and "client" in str(error)
    assert seconds < 10


def test_chunks_waiting_on_a_workerless_scheduler_stop_at_the_bound(scheduler_only, monkeypatch):
    from attnlab.distributed import _graph
    from attnlab.labs._chunks import in_order

    monkeypatch.setattr(_graph, "WORKERLESS_S", 1.0)
    error, seconds = _bounded(lambda: list(in_order(abs, 8, client=scheduler_only)), 30)
    assert isinstance(error, AttnlabError) and "no worker" in str(error), error
    assert seconds < 10
    assert not scheduler_only.processing() or not any(scheduler_only.processing().values())
