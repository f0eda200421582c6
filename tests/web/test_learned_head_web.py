"""GET /api/learned/head: one learned head's q, k and v for one query, as the stepper opens them.

The oracle is a plain numpy forward pass of the shipped model written out here (embeddings plus
positions, then per layer and head a causal softmax of q kᵀ / √d_k, the heads joined, W^O and the
residual), not the model's own code; the weights are checked against ``attention_weights``, and
the stepper's own trace of the route's arrays must give the same weights.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from attnlab.figures import stepper
from attnlab.transformer import checkpoints, pretrained
from attnlab.web import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

TOKENS = [5, 9, 12, 40, 7, 5, 9, 12, 40, 7, 3]
ATOL = 1e-6  # float32 numbers compared after the same float32 arithmetic, or float64 oracles


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _plain_qkv(params: dict, tokens: list[int], layers: int) -> list[tuple]:
    """Per layer (q, k, v), each (h, N, e), by a forward pass written out in float64."""
    p = {name: np.asarray(a, dtype=np.float64) for name, a in params.items()}
    n = len(tokens)
    x = p["embed"][tokens] + p["positions"][:n]  # (N, D)
    allowed = np.tril(np.ones((n, n), dtype=bool))  # (N, N): key j <= query i
    out = []
    for layer in range(layers):
        w = {name: p[f"layer{layer}.{name}"] for name in ("w_q", "w_k", "w_v", "w_o")}
        q, k, v = (np.einsum("nd,hde->hne", x, w[name]) for name in ("w_q", "w_k", "w_v"))
        out.append((q, k, v))
        s = np.where(allowed, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)
        a = np.exp(s - s.max(axis=-1, keepdims=True))  # (h, N, N)
        a /= a.sum(axis=-1, keepdims=True)
        joined = (a @ v).transpose(1, 0, 2).reshape(n, -1)  # (N, h·e)
        x = x + joined @ w["w_o"]  # (N, D)
    return out


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 1, 0), (0, 3, 4), (1, 2, 6), (1, 0, 10)])
def test_the_routes_arrays_are_the_models_own(client, layer, head, query):
    params = {"tokens": " ".join(map(str, TOKENS)), "layer": layer, "head": head, "query": query}
    data = client.get("/api/learned/head", params=params).json()
    model = pretrained("induction")
    q, k, v = _plain_qkv(model.params, TOKENS, model.config["layers"])[layer]
    assert np.shape(data["q"]) == (1, 16) and np.shape(data["k"]) == (query + 1, 16)
    np.testing.assert_allclose(data["q"], q[head, query : query + 1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(data["k"], k[head, : query + 1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(data["v"], v[head, : query + 1], atol=1e-5, rtol=1e-5)
    weights = model.attention_weights(np.array([TOKENS]))[0, layer, head, query]  # (N,)
    np.testing.assert_allclose(data["weights"], weights[: query + 1], atol=ATOL)
    assert np.all(weights[query + 1 :] == 0)  # the keys left out are the ones the mask blocks
    assert data["scaled"] is True and data["scale"] == 0.25  # 1/√16

    # The stepper, given these arrays with its own mask off, computes the same weights.
    body = {"q": data["q"], "k": data["k"], "v": data["v"], "causal": False, "scaled": True}
    trace = client.post("/api/trace", json=body).json()
    np.testing.assert_allclose(trace["tables"]["weights"]["values"][0], weights[: query + 1],
                               atol=ATOL)  # fmt: skip


def test_a_checkpoint_gives_that_snapshots_numbers(client):
    params = {"seed": 4, "layer": 1, "head": 0, "query": 20}
    data = client.get("/api/learned/head", params=params | {"checkpoint": 0}).json()
    step, model = checkpoints("induction")[0]
    assert data["step"] == step == 0 and data["checkpoint"] == 0
    weights = model.attention_weights(np.array([data["tokens"]]))[0, 1, 0, 20, :21]
    np.testing.assert_allclose(data["weights"], weights, atol=ATOL)
    trained = client.get("/api/learned/head", params=params).json()
    assert trained["tokens"] == data["tokens"] and trained["weights"] != data["weights"]


def test_the_stepper_takes_any_head_of_the_shipped_model():
    cfg = pretrained("induction").config
    assert stepper.MAX_TOKENS >= cfg["context"]
    assert stepper.MAX_WIDTH >= cfg["d_model"] // cfg["heads"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"layer": 2, "head": 0, "query": 0}, "layer"),
        ({"layer": 0, "head": 4, "query": 0}, "head"),
        ({"layer": 0, "head": 0, "query": 3, "tokens": "1 2 3"}, "query"),
        ({"layer": 0, "head": 0, "query": 0, "tokens": "1 256"}, "tokens"),
        ({"layer": 0, "head": 0, "query": 0, "tokens": " ".join(["1"] * 33)}, "tokens"),
        ({"layer": 0, "head": 0, "query": 0, "checkpoint": 99}, "checkpoint"),
        ({"layer": -1, "head": 0, "query": 0}, "layer"),
        ({"head": 0, "query": 0}, "layer"),
    ],
)
def test_out_of_bounds_is_a_422_naming_the_field(client, params, field):
    answer = client.get("/api/learned/head", params=params)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["field"] == field


def test_the_last_query_of_a_full_context_fits_the_stepper(client):
    params = {"seed": 7, "layer": 1, "head": 3, "query": 31}
    data = client.get("/api/learned/head", params=params).json()
    assert len(data["tokens"]) == 32 and np.shape(data["k"]) == (32, 16)
    body = {"q": data["q"], "k": data["k"], "v": data["v"], "causal": False, "scaled": True}
    trace = client.post("/api/trace", json=body)
    assert trace.status_code == 200, trace.text
    weights = pretrained("induction").attention_weights(np.array([data["tokens"]]))[0, 1, 3, 31]
    np.testing.assert_allclose(trace.json()["tables"]["weights"]["values"][0], weights, atol=ATOL)
