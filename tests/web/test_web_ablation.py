"""Heads knocked out over HTTP (/api/learned/ablation) and a trained run's heads
(/api/runs/{id}/learned), checked against the model called directly."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from attnlab.labs._common import rng_for
from attnlab.labs.induction import induction_sequences
from attnlab.transformer import pretrained
from attnlab.web import create_app
from attnlab.web.trained import _TAG, FRESH

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), base_url=LOCAL)


def _accuracy(model, ablate) -> float:
    cfg = model.config
    n = cfg["context"]
    tokens, lengths = induction_sequences(rng_for(0, _TAG), FRESH, n, cfg["vocab_size"])
    predicted = model.predict(tokens, ablate=ablate)
    hits = [predicted[s, i] == tokens[s, i + 1]
            for s, t in enumerate(lengths) for i in range(n - t, n - 1)]  # fmt: skip
    return float(np.mean(hits))


def test_knocking_out_the_previous_token_head_is_measured_as_the_model_says(client):
    body = client.get("/api/learned/ablation", params={"ablate": "0.2", "seed": 4}).json()
    model = pretrained("induction")
    assert body["ablate"] == [[0, 2]] and body["fresh"] == FRESH
    assert body["intact"]["accuracy"] == pytest.approx(_accuracy(model, ()), abs=1e-4)
    assert body["ablated"]["accuracy"] == pytest.approx(_accuracy(model, [(0, 2)]), abs=1e-4)
    assert body["ablated"]["accuracy"] < body["intact"]["accuracy"] - 0.3
    assert body["ablated"]["second_mean"] > body["intact"]["second_mean"] + 1.0
    batch = np.array([body["tokens"]])
    assert body["ablated_predictions"] == model.predict(batch, ablate=[(0, 2)])[0].tolist()
    assert body["predictions"] == model.predict(batch)[0].tolist()


def test_no_heads_knocked_out_is_the_intact_model(client):
    body = client.get("/api/learned/ablation", params={"ablate": ""}).json()
    assert body["ablate"] == [] and body["ablated"] == body["intact"]
    assert body["ablated_predictions"] == body["predictions"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"ablate": "2.0"}, "ablate"), ({"ablate": "0.4"}, "ablate"), ({"ablate": "x"}, "ablate"),
     ({"ablate": "0.1.1"}, "ablate"), ({"ablate": "0.1 " * 9}, "ablate"),
     ({"ablation": "resample"}, "ablation"), ({"run": "abc"}, "run"),
     ({"tokens": "1 2 999"}, "tokens")],
)  # fmt: skip
def test_bad_input_is_422_naming_the_field(client, params, field):
    r = client.get("/api/learned/ablation", params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field


def _finished(client, body) -> str:
    run_id = client.post("/api/runs", json=body).json()["id"]
    deadline = time.monotonic() + 60
    while client.get(f"/api/runs/{run_id}").json()["state"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return run_id


def test_a_trained_run_opens_in_the_learned_view_and_can_be_knocked_out(client):
    run_id = _finished(client, {"lab": "train-induction", "params": {"steps": 8, "fresh": 20}})
    assert client.get(f"/api/runs/{run_id}").json()["learned"] is True
    body = client.get(f"/api/runs/{run_id}/learned", params={"tokens": "3 1 4 1 5 9"}).json()
    model = client.app.state.runs.get(run_id)[0].model
    weights = model.attention_weights(np.array([[3, 1, 4, 1, 5, 9]]))[0]
    np.testing.assert_allclose(body["weights"], weights, atol=1e-4)
    assert body["checkpoints"] == [8] and body["run"] == run_id
    assert not np.allclose(weights, pretrained("induction").attention_weights(
        np.array([[3, 1, 4, 1, 5, 9]]))[0], atol=1e-2)  # fmt: skip  # not the shipped model
    knocked = client.get("/api/learned/ablation", params={"ablate": "1.3", "run": run_id}).json()
    assert knocked["ablated"]["accuracy"] == pytest.approx(_accuracy(model, [(1, 3)]), abs=1e-4)


def test_only_a_finished_induction_run_has_heads_to_show(client):
    tiny = {"steps": 3, "batch": 4, "context": 4, "d_model": 8, "vocab_size": 8, "fresh": 8}
    run_id = _finished(client, {"lab": "train-positions", "params": tiny})
    r = client.get(f"/api/runs/{run_id}/learned")
    assert r.status_code == 422 and "train-positions" in r.json()["message"]
    assert client.get("/api/runs/ffff/learned").status_code == 422


@pytest.mark.parametrize("ablate", ["0.²", "１.0", "0.١", "①.1", "0.2,,1.1x"])
def test_heads_to_knock_out_are_ascii_digits_or_a_422_naming_ablate(client, ablate):
    # str.isdigit passes "²" (which int refuses: a 500) and reads "１" as 1: neither is taken.
    r = client.get("/api/learned/ablation", params={"ablate": ablate})
    assert r.status_code == 422, r.text
    assert "ablate" in r.text
