"""The explorer's model routes against transformers: a small random Mistral (grouped-query heads,
a sliding window of 4) saved by transformers and served as ``attnlab serve --model`` serves it.
Every head's weights from /api/models/run are transformers' ``output_attentions``, and a head's
row from /api/models/head, replayed by the stepper's own route (/api/trace), gives transformers'
weights on the keys the window lets the query see. A Gemma 2 layer (softcapped scores) and a
gpt-oss layer (a sink per head) open in the stepper too: its capped step is c · tanh(s / c) of
its scaled table, its sink's share is what the row's weights fall short of 1 by, and its weights
are transformers' row."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from attnlab.web import create_app
from conftest import require_or_skip

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.oracle

IDS = [3, 17, 5, 9, 3, 17, 5, 42, 0, 8, 3]
SMALL = dict(
    vocab_size=50, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (folder, the transformers model) for a Mistral and a Gemma 2."""
    torch = require_or_skip("torch", "ATTNLAB_REQUIRE_ORACLE", "the model oracle tests need it")
    transformers = require_or_skip(
        "transformers", "ATTNLAB_REQUIRE_ORACLE", "the model oracle tests need transformers"
    )
    torch.set_num_threads(1)
    out = {}
    for name, config in [
        ("mistral", transformers.MistralConfig(**SMALL, sliding_window=4)),
        ("gemma2", transformers.Gemma2Config(**SMALL, head_dim=8, attn_logit_softcapping=2.0,
                                             query_pre_attn_scalar=12)),
        ("gpt_oss", transformers.GptOssConfig(**SMALL, head_dim=8, sliding_window=4,
                                              num_local_experts=4, num_experts_per_tok=2)),
    ]:  # fmt: skip
        config._attn_implementation = "eager"
        config._experts_implementation = "eager"
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():  # away from the init, so that every weight counts
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
        folder = tmp_path_factory.mktemp("served") / name
        model.save_pretrained(folder)
        with torch.no_grad():
            attentions = model(torch.tensor([IDS]), output_attentions=True).attentions
        out[name] = (folder, [a[0].double().numpy() for a in attentions])  # L x (h, N, N)
    return out


@pytest.fixture(scope="module")
def client(saved):
    app = create_app(models=[saved[name][0] for name in ("mistral", "gemma2", "gpt_oss")])
    app.state.models.wait()
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


IDS_TEXT = " ".join(map(str, IDS))


def test_every_heads_weights_are_transformers(client, saved):
    r = client.get("/api/models/run", params={"model": "mistral", "ids": IDS_TEXT})
    assert r.status_code == 200, r.text
    ours = np.array(r.json()["weights"])  # (L, h, N, N), 4 places, float32
    np.testing.assert_allclose(ours, np.stack(saved["mistral"][1]), atol=1e-4)
    assert r.json()["kinds"] == ["sliding 4", "sliding 4"]


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 1, 2), (1, 3, 9), (1, 2, 10)])
def test_a_heads_row_in_the_stepper_is_transformers_row(client, saved, layer, head, query):
    params = {"model": "mistral", "ids": IDS_TEXT, "layer": layer, "head": head, "query": query}
    row = client.get("/api/models/head", params=params).json()
    keys = list(range(max(0, query - 3), query + 1))  # the window: this key and 3 before
    assert row["keys"] == keys and row["scaled"] is True
    body = {"q": row["q"], "k": row["k"], "v": row["v"], "causal": False, "scaled": True}
    trace = client.post("/api/trace", json=body).json()
    theirs = saved["mistral"][1][layer][head, query, keys]
    np.testing.assert_allclose(trace["tables"]["weights"]["values"][0], theirs, atol=1e-5)
    np.testing.assert_allclose(row["weights"], theirs, atol=1e-5)


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 0, 3), (1, 3, 10)])
def test_a_softcapped_heads_row_in_the_stepper_is_transformers_row(client, saved, layer, head,
                                                                   query):  # fmt: skip
    params = {"model": "gemma2", "ids": IDS_TEXT, "layer": layer, "head": head, "query": query}
    row = client.get("/api/models/head", params=params).json()
    assert row["softcap"] == 2.0 and row["sink"] is None
    keys = row["keys"]
    body = {"q": row["q"], "k": row["k"], "v": row["v"], "causal": False,
            "scaled": row["scaled"], "softcap": row["softcap"]}  # fmt: skip
    fig = client.post("/api/trace", json=body).json()
    tables = fig["tables"]
    scaled = np.array(tables["scaled"]["values"])
    np.testing.assert_allclose(tables["capped"]["values"], 2.0 * np.tanh(scaled / 2.0), atol=1e-12)
    steps = [s["id"] for s in fig["steps"]]
    assert steps[steps.index("scaled") + 1] == "capped"
    assert "capped" in next(s for s in fig["steps"] if s["id"] == "masked")["inputs"]
    theirs = saved["gemma2"][1][layer][head, query, keys]
    np.testing.assert_allclose(tables["weights"]["values"][0], theirs, atol=1e-5)


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 1, 2), (1, 3, 10)])
def test_a_heads_sink_in_the_stepper_takes_transformers_missing_share(client, saved, layer, head,
                                                                      query):  # fmt: skip
    params = {"model": "gpt_oss", "ids": IDS_TEXT, "layer": layer, "head": head, "query": query}
    row = client.get("/api/models/head", params=params).json()
    assert row["sink"] is not None and row["softcap"] is None
    body = {"q": row["q"], "k": row["k"], "v": row["v"], "causal": False,
            "scaled": row["scaled"], "sink": row["sink"]}  # fmt: skip
    fig = client.post("/api/trace", json=body).json()
    theirs = saved["gpt_oss"][1][layer][head, query]  # the whole row: 0 outside the window
    weights = np.array(fig["tables"]["weights"]["values"][0])
    np.testing.assert_allclose(weights, theirs[row["keys"]], atol=1e-5)
    logit, share = fig["tables"]["sink"]["values"][0]
    assert logit == row["sink"]
    # The sink's share is what transformers' row falls short of 1 by (its sink column dropped).
    np.testing.assert_allclose(share, 1 - theirs.sum(), atol=1e-5)
    assert "sink" in next(s for s in fig["steps"] if s["id"] == "weights")["inputs"]
