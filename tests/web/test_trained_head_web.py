"""GET /api/runs/{id}/learned/head: one head of a model trained on the page, for one query, as
the stepper opens it (``stepper.run``). The oracle is the trained TinyTransformer's own
``attention_weights`` for that row, and a softmax of q kᵀ / √d_k written out here from the
route's q and k; the stepper's trace of the route's arrays must give the same weights. A run the
server does not keep (unknown, unfinished, another lab, its model let go) is a 422 naming it."""

from __future__ import annotations

import json
import re
import time
import warnings

import numpy as np
import pytest

from attnlab.transformer import pretrained
from attnlab.web import create_app, runs

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 3, 1, 4]
SMALL = {"steps": 6, "fresh": 20}  # a few steps: the weights differ from the shipped model's


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _finished(client, body) -> str:
    run_id = client.post("/api/runs", json=body).json()["id"]
    deadline = time.monotonic() + 60
    while client.get(f"/api/runs/{run_id}").json()["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return run_id


@pytest.fixture(scope="module")
def trained(client):
    run_id = _finished(client, {"lab": "train-induction", "params": SMALL})
    return run_id, client.app.state.runs.get(run_id)[0].model


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 2, 0), (0, 1, 5), (1, 3, 10)])
def test_a_trained_heads_row_is_the_trained_models_attention(client, trained, layer, head, query):
    run_id, model = trained
    params = {"tokens": " ".join(map(str, TOKENS)), "layer": layer, "head": head, "query": query}
    r = client.get(f"/api/runs/{run_id}/learned/head", params=params)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["run"] == run_id and data["tokens"] == TOKENS and data["step"] == SMALL["steps"]
    d_k = model.config["d_model"] // model.config["heads"]
    assert np.shape(data["q"]) == (1, d_k) and np.shape(data["k"]) == (query + 1, d_k)
    assert np.shape(data["v"]) == (query + 1, d_k)
    want = model.attention_weights(np.array([TOKENS]))[0, layer, head, query, : query + 1]
    np.testing.assert_allclose(data["weights"], want, atol=1e-6)
    # The route's q and k give those weights by the plain formula, in float64 here.
    s = np.asarray(data["q"]) @ np.asarray(data["k"]).T * data["scale"]  # (1, query + 1)
    a = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    np.testing.assert_allclose(a[0], want, atol=1e-5)
    # And so does the stepper, given the arrays as the page sends them (its own mask off).
    assert data["scaled"] is True
    body = {"q": data["q"], "k": data["k"], "v": data["v"], "causal": False, "scaled": True}
    trace = client.post("/api/trace", json=body).json()
    np.testing.assert_allclose(trace["tables"]["weights"]["values"][0], want, atol=1e-6)
    # The trained model, not the shipped one.
    shipped = pretrained("induction").attention_weights(np.array([TOKENS]))[0, layer, head, query]
    assert not np.allclose(shipped[: query + 1], want, atol=1e-3) or query == 0


def test_a_generated_sequence_is_the_one_the_learned_view_shows(client, trained):
    run_id = trained[0]
    view = client.get(f"/api/runs/{run_id}/learned", params={"seed": 3}).json()
    query = len(view["tokens"]) - 1
    data = client.get(f"/api/runs/{run_id}/learned/head",
                      params={"seed": 3, "layer": 1, "head": 0, "query": query}).json()  # fmt: skip
    assert data["tokens"] == view["tokens"]
    np.testing.assert_allclose(data["weights"], view["weights"][1][0][query], atol=1e-4)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"layer": 2, "head": 0, "query": 0}, "layer"), ({"layer": 0, "head": 4, "query": 0}, "head"),
     ({"layer": 0, "head": 0, "query": 11}, "query"), ({"layer": 0, "head": 0}, "query")],
)  # fmt: skip
def test_a_head_outside_the_model_is_a_422_naming_it(client, trained, params, field):
    r = client.get(f"/api/runs/{trained[0]}/learned/head",
                   params={"tokens": " ".join(map(str, TOKENS)), **params})  # fmt: skip
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, r.text


def test_a_run_the_server_does_not_keep_is_a_422_naming_the_run(client):
    head = {"layer": 0, "head": 0, "query": 0, "tokens": "1 2 3"}
    r = client.get("/api/runs/abcdef/learned/head", params=head)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "run"
    assert "'abcdef'" in r.json()["message"] and "unknown" in r.json()["message"]
    tiny = {"steps": 3, "batch": 4, "context": 4, "d_model": 8, "vocab_size": 8, "fresh": 8}
    other = _finished(client, {"lab": "train-positions", "params": tiny})
    r = client.get(f"/api/runs/{other}/learned/head", params=head)
    assert r.status_code == 422 and "train-positions" in r.json()["message"]


def test_a_run_whose_model_was_let_go_is_a_422_saying_so():
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:  # its own runs
        _let_go(client)


def _let_go(client):
    first = _finished(client, {"lab": "train-induction", "params": {"steps": 1, "fresh": 8}})
    head = {"layer": 0, "head": 0, "query": 0, "tokens": "1 2 3"}
    assert client.get(f"/api/runs/{first}/learned/head", params=head).status_code == 200
    for _ in range(runs.MAX_MODELS):  # newer trained models push the first one out
        _finished(client, {"lab": "train-induction", "params": {"steps": 1, "fresh": 8}})
    r = client.get(f"/api/runs/{first}/learned/head", params=head)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "run"
    assert first in r.json()["message"] and "let go" in r.json()["message"]


def test_a_saved_page_holds_the_trained_head_the_stepper_shows(client, trained):
    # GET /snapshot (the page's "Save this page as one file") at a state naming a run's head.
    run_id, model = trained
    state = (
        f"stepper.learned=1,3,5&stepper.tokens={','.join(map(str, TOKENS))}&stepper.run={run_id}"
    )
    page = client.get("/snapshot", params={"state": state}).text
    inlined = re.search(r'id="attnlab-first">(.*?)</script>', page, re.S)[1]
    answers = json.loads(inlined)
    path = next(a["path"] for a in answers if "/learned/head?" in a["path"])
    assert path.startswith(f"/api/runs/{run_id}/learned/head?")
    want = model.attention_weights(np.array([TOKENS]))[0, 1, 3, 5, :6]
    traced = [
        a["answer"] for a in answers if a["path"] == "/api/trace" and a["body"]["causal"] is False
    ]
    np.testing.assert_allclose(traced[0]["tables"]["weights"]["values"][0], want, atol=1e-6)
