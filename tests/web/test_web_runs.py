"""Training runs as jobs over HTTP: start, follow, cancel, a bounded queue and memory.

Each run's result is compared with the lab called directly with the same parameters (same
seed, same numbers), and its losses with the lab's own smoothed curve.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from attnlab.labs import LABS, train_positions
from attnlab.labs._training import smoothed
from attnlab.web import create_app
from attnlab.web.runs import MAX_WAITING, Runs

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

LOCAL = "http://127.0.0.1"
FINISHED = ("done", "failed", "cancelled")
TINY = {"steps": 12, "batch": 4, "context": 5, "d_model": 8, "vocab_size": 6, "fresh": 20}
# long enough to be running when cancelled: about 50 s estimated, stopped in its first seconds
LONG = {"lab": "train-induction", "params": {"steps": 1400}}


@pytest.fixture
def client():
    return TestClient(create_app(), base_url=LOCAL)


def _wait(client, run_id, until=FINISHED, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
        if body["state"] in until:
            return body
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} still {body['state']} after {timeout} s")


def test_a_run_is_accepted_followed_and_gives_the_labs_own_result(client):
    r = client.post("/api/runs", json={"lab": "train-positions", "params": TINY})
    assert r.status_code == 202 and r.headers["location"] == f"/api/runs/{r.json()['id']}"
    body = _wait(client, r.json()["id"])
    assert body["state"] == "done" and body["error"] is None
    assert body["step"] == body["steps"] == 2 * TINY["steps"]  # two models, one after the other
    direct = train_positions(**TINY).as_dict()
    assert body["result"] == direct
    losses = np.array(body["losses"])  # raw per step: the lab reports them smoothed
    assert len(losses) == 24
    np.testing.assert_allclose(smoothed(losses[:12]), direct["losses_with"], rtol=1e-5)
    np.testing.assert_allclose(smoothed(losses[12:]), direct["losses_without"], rtol=1e-5)
    tail = client.get(f"/api/runs/{body['id']}", params={"since": 20}).json()
    assert tail["losses"] == body["losses"][20:] and tail["since"] == 20


def test_stop_cancels_a_running_run_within_a_second(client):
    run_id = client.post("/api/runs", json=LONG).json()["id"]
    body = _wait(client, run_id, until=("running",))
    deadline = time.monotonic() + 30
    while body["step"] < 2 and time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
    nxt = client.post("/api/runs", json={"lab": "train-positions", "params": TINY}).json()
    assert client.get(f"/api/runs/{nxt['id']}").json()["position"] == 1
    start = time.monotonic()
    gone = client.delete(f"/api/runs/{run_id}")
    assert gone.status_code == 200 and gone.json()["state"] == "cancelled"
    # the worker leaves the loop at its next step: the queued run then starts
    _wait(client, nxt["id"], until=("running", *FINISHED), timeout=5)
    assert time.monotonic() - start < 1.5
    after = client.get(f"/api/runs/{run_id}").json()
    assert after["state"] == "cancelled" and after["result"] is None
    assert after["step"] < LONG["params"]["steps"]
    time.sleep(0.3)
    assert client.get(f"/api/runs/{run_id}").json()["step"] == after["step"]  # stopped
    assert _wait(client, nxt["id"])["state"] == "done"


def test_one_run_at_a_time_the_rest_queued_in_order_then_429(client):
    first = client.post("/api/runs", json=LONG).json()["id"]
    _wait(client, first, until=("running",))
    queued = [client.post("/api/runs", json={"lab": "train-positions", "params": TINY}).json()
              for _ in range(MAX_WAITING)]  # fmt: skip
    assert [q["position"] for q in queued] == list(range(1, MAX_WAITING + 1))
    states = [client.get(f"/api/runs/{q['id']}").json()["state"] for q in queued]
    assert states == ["queued"] * MAX_WAITING
    full = client.post("/api/runs", json={"lab": "train-positions", "params": TINY})
    assert full.status_code == 429 and int(full.headers["retry-after"]) >= 1
    gone = client.delete(f"/api/runs/{queued[1]['id']}").json()
    assert gone["state"] == "cancelled"
    assert client.get(f"/api/runs/{queued[2]['id']}").json()["position"] == 2
    for q in (*(q["id"] for q in queued), first):  # the queue first: then nothing starts
        client.delete(f"/api/runs/{q}")
    assert all(client.get(f"/api/runs/{q['id']}").json()["state"] == "cancelled" for q in queued)


@pytest.mark.parametrize(
    ("body", "field"),
    [({"lab": "variance"}, "lab"),
     ({"lab": "train-positions", "params": {"steps": 0}}, "params.steps"),
     ({"lab": "train-positions", "params": {"steps": "ten"}}, "params.steps"),
     ({"lab": "train-positions", "params": {"lr": 5.0}}, "params.lr"),
     ({"lab": "train-positions", "params": {"save": "/tmp/x.npz"}}, "params.save"),
     ({"lab": "train-induction", "params": {"snapshots": 3}}, "params.snapshots"),
     ({"lab": "train-induction", "params": {"steps": 100_000}}, "params.steps"),
     ({"lab": "train-scaling", "params": {"widths": [0]}}, "params.widths[0]")],
)  # fmt: skip
def test_bad_parameters_are_422_naming_them(client, body, field):
    r = client.post("/api/runs", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_an_unknown_run_is_404(client):
    assert client.get("/api/runs/abc123").status_code == 404
    assert client.delete("/api/runs/abc123").status_code == 404
    assert client.get("/api/runs/not-hex").status_code == 422


def test_finished_runs_are_kept_up_to_a_bound():
    runs = Runs(waiting=8, kept=2)
    made = [runs.submit("train-positions", {**_defaults("train-positions"), **TINY}, 1.0)
            for _ in range(4)]  # fmt: skip
    deadline = time.monotonic() + 60
    while runs.get(made[-1].id)[0].state != "done" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runs.get(made[0].id) is None and runs.get(made[1].id) is None
    assert [r.id for r in runs.all()] == [made[3].id, made[2].id]


def test_only_the_newest_trained_models_are_kept(monkeypatch):
    import attnlab.web.runs as web_runs

    monkeypatch.setattr(web_runs, "MAX_MODELS", 2)
    runs = Runs(waiting=8, kept=10)
    params = {**_defaults("train-induction"), "steps": 2, "batch": 2, "context": 8,
              "d_model": 8, "heads": 2, "vocab_size": 8, "fresh": 4}  # fmt: skip
    made = [runs.submit("train-induction", params, 1.0) for _ in range(3)]
    deadline = time.monotonic() + 60
    while runs.get(made[-1].id)[0].state != "done" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.model is not None for r in made] == [False, True, True]
    assert all(r.state == "done" and r.result is not None for r in made)


def _defaults(name: str) -> dict:
    return LABS[name].defaults()
