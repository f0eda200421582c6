"""The explorer's routes for the inside of a real model (``attnlab serve --model``), on a tiny
GPT-2 folder written here: the logit lens, attribution, heads knocked out and streamed generation
give the Python API's numbers (a float32 load, as the server loads; the oracle is attnlab's own
library API, which tests/models check against transformers), and bad input is one 422 naming the
field."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from attnlab.models import ablate, load, write_tiny_gpt2
from attnlab.web import create_app, inside

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

TEXT = "the cat sat on the mat . the cat sat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("m") / "tiny", layers=2, d_model=32, heads=4)


@pytest.fixture(scope="module")
def client(tiny):
    app = create_app(models=[tiny])
    app.state.models.wait()
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="module")
def model(tiny):
    return load(tiny)


def _get(client, path, **params):
    r = client.get(f"/api/models/{path}", params={"model": "tiny", "text": TEXT, **params})
    assert r.status_code == 200, r.text
    return r.json()


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_the_lens_grid_is_each_layers_top_token_and_probability(client, model):
    data = _get(client, "lens")
    run = model.run(model.tokenize(TEXT))
    for layer in range(2):
        p = _softmax(run.logit_lens(layer)[0])  # (N, V)
        assert data["top"][layer] == p.argmax(-1).tolist()
        np.testing.assert_allclose(data["p"][layer], p.max(-1), rtol=1e-5)
        assert data["top_tokens"][layer] == [model.detokenize([i]) for i in p.argmax(-1)]
    # The last layer's lens is the model's own prediction.
    assert data["top"][-1] == run.logits[0].argmax(-1).tolist()


def test_attribution_gives_every_heads_share_and_they_add_up_to_the_logit(client, model):
    data = _get(client, "attribution", position=5)
    run = model.run(model.tokenize(TEXT))
    token = int(run.logits[0, 5].argmax())
    assert data["token"] == token and data["position"] == 5
    parts = run.logit_attribution(5, token)
    for layer in range(2):
        for head in range(4):
            assert data["heads"][layer][head] == pytest.approx(parts[f"L{layer}H{head}"], abs=1e-6)
    assert data["parts"]["L1.mlp"] == pytest.approx(parts["L1.mlp"], abs=1e-6)
    total = sum(sum(row) for row in data["heads"]) + sum(data["parts"].values())
    assert total == pytest.approx(float(run.logits[0, 5, token]), abs=1e-4)
    other = _get(client, "attribution", position=5, token=3)
    assert other["logit"] == pytest.approx(float(run.logits[0, 5, 3]), abs=1e-6)


def test_ablation_gives_the_prediction_before_and_after(client, model):
    data = _get(client, "ablate", position=9, heads="1.2,0.1", top=4)
    ids = model.tokenize(TEXT)
    before = _softmax(model.run(ids).logits[0, 9])
    after = _softmax(ablate(model, ids, heads=[(0, 1), (1, 2)]).logits[0, 9])
    assert data["heads"] == [[0, 1], [1, 2]]
    assert [t["id"] for t in data["before"]] == np.argsort(-before, kind="stable")[:4].tolist()
    assert [t["id"] for t in data["after"]] == np.argsort(-after, kind="stable")[:4].tolist()
    np.testing.assert_allclose([t["p"] for t in data["after"]], np.sort(after)[::-1][:4], rtol=1e-5)
    ids_before = [t["id"] for t in data["before"]]
    np.testing.assert_allclose(data["after_of_before"], after[ids_before], rtol=1e-5)


def _events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines.get("event", "message"), json.loads(lines["data"])))
    return out


def test_generation_streams_the_greedy_tokens(client, model):
    r = client.get("/api/models/generate", params={"model": "tiny", "text": TEXT, "new": 6})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    ids = model.tokenize(TEXT)
    expected = model.generate(ids, 6)[0, len(ids) :].tolist()
    assert [e[1]["id"] for e in events if e[0] == "message"] == expected
    assert events[0] == ("prompt", {"text": model.detokenize(ids.tolist())})
    assert [e[1]["token"] for e in events[1:-1]] == [model.detokenize([i]) for i in expected]
    whole = events[0][1]["text"] + "".join(e[1]["text"] for e in events[1:-1])
    assert whole == model.detokenize(ids.tolist() + expected)
    assert events[-1] == ("done", {"why": "done"})


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("lens", {"ids": "1 2 999"}, "ids"),
        ("attribution", {"position": 10}, "position"),
        ("attribution", {"position": -1}, "position"),
        ("attribution", {"position": 1, "token": 10**6}, "token"),
        ("ablate", {"position": 1, "heads": "2.0"}, "heads"),
        ("ablate", {"position": 1, "heads": "1.4"}, "heads"),
        ("ablate", {"position": 1, "heads": "1-0"}, "heads"),
        ("ablate", {"position": 1}, "heads"),
        ("ablate", {"position": 1, "heads": "0.0", "top": inside.MAX_TOP + 1}, "top"),
        ("generate", {"new": inside.MAX_NEW + 1}, "new"),
        ("generate", {"new": 0}, "new"),
        ("generate", {"new": 60}, "new"),  # 10 tokens + 60 pass the tiny model's 64 positions
        ("lens", {"model": "gpt9"}, "model"),
    ],
)
def test_bad_input_is_one_422_naming_the_field(client, path, params, field):
    r = client.get(f"/api/models/{path}", params={"model": "tiny", "text": TEXT, **params})
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(f"{field}: "), r.json()["message"]
    assert "Traceback" not in r.text


@pytest.mark.parametrize("path", ["lens", "attribution", "ablate", "generate"])
def test_more_tokens_than_the_inside_views_take_is_422(client, monkeypatch, path):
    monkeypatch.setattr(inside, "MAX_TOKENS", 9)  # TEXT is 10 tokens
    params = {"model": "tiny", "position": 0, "heads": "0.0"}
    r = client.get(f"/api/models/{path}", params={**params, "text": TEXT})
    assert r.status_code == 422
    assert r.json()["message"] == "text: expected at most 9 tokens for the inside views, but got 10"
    r = client.get(f"/api/models/{path}", params={**params, "ids": "1 2 3"})
    assert r.status_code == 200


def test_a_cross_site_request_is_refused(client):
    r = client.get(
        "/api/models/generate",
        params={"model": "tiny", "text": TEXT, "new": 2},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert r.status_code == 403
