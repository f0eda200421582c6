"""The explorer's model routes (``attnlab serve --model``) on tiny GPT-2 folders written here: the
list with each model's state (loading, ready, failed), every head's weights and scores on a text
or ids, one head's row as the stepper takes it (replayed through /api/trace), the refusals
(422 naming the field, 503 while loading or after a failed load), and ``serve`` refusing a bad
folder before it starts."""

from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import attnlab as al
from attnlab.figures import stepper
from attnlab.models import head_scores, load, write_tiny_gpt2
from attnlab.web import create_app, realmodels

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

TEXT = "the cat sat on the mat . the cat sat"


def _client(*folders) -> TestClient:
    app = create_app(models=folders)
    app.state.models.wait()
    return TestClient(app, base_url="http://127.0.0.1")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("m") / "tiny", layers=2, d_model=32, heads=4)


@pytest.fixture(scope="module")
def client(tiny):
    with _client(tiny) as c:
        yield c


def _run(client, **params):
    r = client.get("/api/models/run", params={"model": "tiny", **params})
    assert r.status_code == 200, r.text
    return r.json()


def test_without_models_the_list_is_empty_and_a_run_names_the_field():
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        assert c.get("/api/models").json() == {"models": []}
        r = c.get("/api/models/run", params={"model": "gpt2", "text": "hi"})
    assert r.status_code == 422
    assert r.json()["message"].startswith("model: ") and "without --model" in r.json()["message"]


def test_the_list_says_ready_with_the_models_shape(client, tiny):
    (m,) = client.get("/api/models").json()["models"]
    assert (m["name"], m["status"], m["architecture"], m["message"]) == (
        "tiny",
        "ready",
        "gpt2",
        None,
    )
    assert m["shape"]["layers"] == 2 and m["shape"]["heads"] == 4 and m["shape"]["head_dim"] == 8
    assert m["path"] == str(tiny) and m["max_tokens"] == realmodels.MAX_TOKENS


def test_a_run_gives_every_heads_weights_and_scores(client, tiny):
    data = _run(client, text=TEXT)
    model = load(tiny)
    ids = model.tokenize(TEXT)
    assert data["ids"] == ids.tolist() and data["tokens"] == TEXT.split()
    run = model.run(ids)
    weights = np.array(data["weights"])  # (L, h, N, N)
    assert weights.shape == (2, 4, 10, 10)
    np.testing.assert_allclose(weights, np.stack([w[0] for w in run.attention]), atol=5.1e-5)
    np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-3)  # each row a softmax
    assert np.all(np.triu(weights, 1) == 0)  # causal: no query looks ahead
    expected = head_scores(run).scores
    for kind in data["score_kinds"]:
        np.testing.assert_allclose(data["scores"][kind], expected[kind], atol=5.1e-5)
    # Compressed once, by the route (the app's middleware leaves an encoded answer alone).
    packed = client.get("/api/models/run", params={"model": "tiny", "text": TEXT},
                        headers={"Accept-Encoding": "gzip"})  # fmt: skip
    assert packed.headers["content-encoding"] == "gzip" and packed.json() == data
    plain = client.get("/api/models/run", params={"model": "tiny", "text": TEXT},
                       headers={"Accept-Encoding": "identity"})  # fmt: skip
    assert "content-encoding" not in plain.headers and plain.json() == data
    # The same tokens as ids give the same answer.
    assert _run(client, ids=" ".join(map(str, ids)))["weights"] == data["weights"]


def test_a_heads_row_replayed_by_the_stepper_gives_the_models_weights(client, tiny):
    layer, head, query = 1, 2, 8
    r = client.get("/api/models/head", params={"model": "tiny", "text": TEXT, "layer": layer,
                                               "head": head, "query": query})  # fmt: skip
    assert r.status_code == 200, r.text
    row = r.json()
    assert row["keys"] == list(range(query + 1)) and row["scaled"] is True
    assert np.array(row["q"]).shape == (1, 8) and np.array(row["k"]).shape == (query + 1, 8)
    model = load(tiny, dtype="float64")
    exact = model.run(model.tokenize(TEXT)).attention[layer][0, head, query, : query + 1]
    np.testing.assert_allclose(row["weights"], exact, atol=1e-6)  # float32 against float64
    # What the stepper does with these numbers (its own mask off, scaled by 1/√d_k).
    body = {"q": row["q"], "k": row["k"], "v": row["v"], "causal": False, "scaled": True}
    trace = client.post("/api/trace", json=body)
    assert trace.status_code == 200, trace.text
    np.testing.assert_allclose(trace.json()["tables"]["weights"]["values"][0], exact, atol=1e-6)


def test_a_head_as_wide_as_gpt2s_opens_in_the_stepper(tmp_path):
    """GPT-2 small's heads are 64 wide: such a row is served and the stepper replays it."""
    folder = write_tiny_gpt2(tmp_path / "gpt2wide", layers=1, d_model=128, heads=2)  # width 64
    with _client(folder) as c:
        row = c.get("/api/models/head", params={"model": "gpt2wide", "ids": "5 9 2 7", "layer": 0,
                                                "head": 1, "query": 3}).json()  # fmt: skip
        body = {"q": row["q"], "k": row["k"], "v": row["v"], "causal": False, "scaled": True}
        trace = c.post("/api/trace", json=body)
    assert np.array(row["q"]).shape == (1, 64) and np.array(row["v"]).shape == (4, 64)
    model = load(folder, dtype="float64")
    exact = model.run(np.array([5, 9, 2, 7])).attention[0][0, 1, 3]
    assert trace.status_code == 200, trace.text
    np.testing.assert_allclose(trace.json()["tables"]["weights"]["values"][0], exact, atol=1e-6)


def test_a_scale_other_than_one_over_root_d_goes_into_q(tmp_path):
    folder = write_tiny_gpt2(tmp_path / "unscaled", layers=2, d_model=16, heads=2)
    cfg = json.loads((folder / "config.json").read_text())
    # GPT-2's option to divide layer i's scores by i + 1 as well: layer 1 scales by 1/(2√d).
    (folder / "config.json").write_text(json.dumps(cfg | {"scale_attn_by_inverse_layer_idx": True}))
    with _client(folder) as c:
        row = c.get("/api/models/head", params={"model": "unscaled", "ids": "1 2 3 1 2",
                                                "layer": 1, "head": 1, "query": 4}).json()  # fmt: skip
    assert row["scaled"] is False and row["scale"] == pytest.approx(8**-0.5 / 2)
    q, k = np.array(row["q"]), np.array(row["k"])
    weights = al.softmax(q @ k.T)[0]  # the stepper with scaling off
    np.testing.assert_allclose(weights, row["weights"], atol=1e-6)


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"model": "nope"}, "model", "expected one of the server's models (tiny)"),
        ({"ids": "1 2 999"}, "ids", "from 0 to 10, but got 999 at position 2"),
        ({"ids": "1 x 2"}, "ids", "digits 0-9"),
        ({"ids": "1 " * 65}, "ids", "expected 1 to 64 tokens, but got 65"),
        ({"ids": "1", "text": "the"}, "ids", "text or ids, but got both"),
        ({"text": "the " * 65}, "text", "expected 1 to 64 tokens, but got 65"),
    ],
)
def test_bad_input_gets_422_naming_the_field(client, params, field, words):
    r = client.get("/api/models/run", params={"model": "tiny", **params})
    assert r.status_code == 422
    assert r.json()["message"].startswith(f"{field}: ") and words in r.json()["message"]


@pytest.mark.parametrize(
    ("where", "field", "words"),
    [
        ({"layer": 2, "head": 0, "query": 0}, "layer", "from 0 to 1, but got 2"),
        ({"layer": 0, "head": 4, "query": 0}, "head", "from 0 to 3, but got 4"),
        ({"layer": 0, "head": 0, "query": 40}, "query", "from 0 to 39, but got 40"),
        ({"layer": 0, "head": 0, "query": 32}, "query", "sees at most 32 keys"),
    ],
)
def test_a_head_outside_the_model_or_the_stepper_gets_422(client, where, field, words):
    r = client.get("/api/models/head", params={"model": "tiny", "ids": "1 " * 40, **where})
    assert r.status_code == 422
    assert r.json()["message"].startswith(f"{field}: ") and words in r.json()["message"]


def test_heads_wider_than_the_stepper_are_refused_naming_head(tmp_path, monkeypatch):
    monkeypatch.setattr(stepper, "MAX_WIDTH", 16)  # the limit, made smaller than a real model's
    folder = write_tiny_gpt2(tmp_path / "wide", layers=1, d_model=64, heads=2)  # width 32
    with _client(folder) as c:
        r = c.get("/api/models/head", params={"model": "wide", "ids": "1 2", "layer": 0,
                                              "head": 0, "query": 1})  # fmt: skip
        assert c.get("/api/models/run", params={"model": "wide", "ids": "1 2"}).status_code == 200
    assert r.status_code == 422 and "at most 16 wide" in r.json()["message"]
    assert r.json()["message"].startswith("head: ")


def test_a_loading_model_gets_503_then_its_answer(tiny, monkeypatch):
    gate = threading.Event()

    def slow_load(path):
        gate.wait(10)
        return load(path)

    monkeypatch.setattr(realmodels, "load", slow_load)
    app = create_app(models=[tiny, tiny])  # the same folder twice: two names
    with TestClient(app, base_url="http://127.0.0.1") as c:
        listed = c.get("/api/models").json()["models"]
        assert [(m["name"], m["status"]) for m in listed] == [
            ("tiny", "loading"),
            ("tiny-2", "loading"),
        ]
        r = c.get("/api/models/run", params={"model": "tiny", "text": TEXT})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert "still loading" in r.json()["message"]
        gate.set()
        app.state.models.wait()
        assert [m["status"] for m in c.get("/api/models").json()["models"]] == ["ready"] * 2
        assert c.get("/api/models/run", params={"model": "tiny-2", "text": TEXT}).status_code == 200


def _broken(tmp_path):
    """A folder whose headers are fine but whose embedding has the wrong shape."""
    folder = write_tiny_gpt2(tmp_path / "broken", layers=1, d_model=16, heads=2)
    weights = load_file(folder / "model.safetensors")
    weights["transformer.wte.weight"] = weights["transformer.wte.weight"][:, :8].copy()
    save_file(weights, str(folder / "model.safetensors"))
    return folder


def test_a_model_that_fails_to_load_says_why(tmp_path):
    with _client(_broken(tmp_path)) as c:
        (m,) = c.get("/api/models").json()["models"]
        r = c.get("/api/models/run", params={"model": "broken", "ids": "1"})
    assert m["status"] == "failed" and "transformer.wte.weight" in m["message"]
    assert r.status_code == 503 and "failed to load" in r.json()["message"]


def tiny_config(tmp_path):
    return write_tiny_gpt2(tmp_path / "source", layers=1, d_model=16, heads=2)


def _serve(*args: str):
    from typer.testing import CliRunner

    from attnlab.cli import app

    return CliRunner().invoke(app, ["serve", *args])


def test_serve_refuses_a_folder_it_cannot_load_before_starting(tmp_path, monkeypatch):
    import uvicorn

    started = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: started.append(1))
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    (tmp_path / "empty").mkdir()
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    weightless = tmp_path / "weightless"  # a GPT-2 config and no safetensors file
    weightless.mkdir()
    (weightless / "config.json").write_text((tiny_config(tmp_path) / "config.json").read_text())
    for folder, words in [(tmp_path / "missing", "not a directory"),
                          (tmp_path / "empty", "config.json"), (bert, "bert"),
                          (weightless, "model.safetensors")]:  # fmt: skip
        result = _serve("--model", str(folder), "--port", "1")
        assert result.exit_code == 2, result.output
        line = " ".join(result.output.split())
        assert line.startswith(f"error: --model {folder}: ") and words in line
        assert len(result.output.strip().splitlines()) <= 3  # one line (rich may wrap it)
    assert started == []


def test_serve_starts_with_a_good_folder(tiny, monkeypatch):
    import uvicorn

    apps = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self, sockets=None: apps.append(self.config.app)
    )
    monkeypatch.setattr("attnlab.cli.serve._check_port", lambda host, port: None)
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    result = _serve("--model", str(tiny), "--model", str(tiny))
    assert result.exit_code == 0, result.output
    assert "loading in the background: tiny, tiny-2" in " ".join(result.output.split())
    (app,) = apps
    app.state.models.wait()
    assert list(app.state.models.entries) == ["tiny", "tiny-2"]


def test_a_heads_rows_are_named_by_position_and_visible_token(client, tiny):
    r = client.get("/api/models/head", params={"model": "tiny", "text": TEXT, "layer": 0,
                                               "head": 1, "query": 4})  # fmt: skip
    row = r.json()
    words = TEXT.split()
    assert row["query_labels"] == [f"4 {words[4]}"]
    assert row["key_labels"] == [f"{p} {w}" for p, w in enumerate(words[:5])]
    assert row["softcap"] is None and row["sink"] is None  # GPT-2 has neither


@pytest.mark.parametrize(("piece", "shown"), [(" cat", "␣cat"), ("\n", "⏎"), ("a\tb", "a⇥b"),
                                              ("", "∅"), ("  x", "␣␣x")])  # fmt: skip
def test_a_tokens_spaces_are_made_visible(piece, shown):
    assert realmodels.visible(piece) == shown
    assert realmodels.position_label(12, piece) == f"12 {shown}"


def _with_bos(folder):
    """``folder``'s tokenizer with "<s>" put before every text (as Llama's does): a special
    token that decodes to nothing alone."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens(["<s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tok.save(str(folder / "tokenizer.json"))
    return bos


def test_long_input_sends_one_layer_as_bytes_and_bos_is_named(tmp_path):
    import base64

    folder = write_tiny_gpt2(tmp_path / "long", layers=2, d_model=16, heads=2, positions=600)
    config = json.loads((folder / "config.json").read_text())
    bos = _with_bos(folder)
    weights = load_file(str(folder / "model.safetensors"))
    grown = np.zeros((bos + 1, 16), np.float32)
    grown[: len(weights["transformer.wte.weight"])] = weights["transformer.wte.weight"]
    weights["transformer.wte.weight"] = grown
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config | {"vocab_size": bos + 1}))
    text = " ".join(["the cat sat on the mat ."] * 30)  # 210 words, 211 tokens with <s>
    with _client(folder) as c:
        r = c.get("/api/models/run", params={"model": "long", "text": text, "layer": 1})
        assert r.status_code == 200, r.text
        data = r.json()
        too_long = c.get("/api/models/run", params={"model": "long", "ids": "1 " * 513})
        bad_layer = c.get("/api/models/run", params={"model": "long", "text": text, "layer": 2})
    model = load(folder, dtype="float64")
    ids = model.tokenize(text)
    assert len(ids) == 211 and data["ids"] == ids.tolist()
    assert data["tokens"][0] == "<s>"  # decoded alone it is "": the label was blank
    assert data["tokens"][1] == "the" and "weights" not in data and data["layer"] == 1
    exact = model.run(ids).attention[1][0]  # (h, N, N)
    for h, b64 in enumerate(data["weights_u8"]):
        got = np.frombuffer(base64.b64decode(b64), np.uint8).reshape(211, 211) / 255
        np.testing.assert_allclose(got, exact[h], atol=0.5 / 255 + 1e-9)
    assert too_long.status_code == 422 and "expected 1 to 512 tokens" in too_long.json()["message"]
    assert bad_layer.status_code == 422 and bad_layer.json()["message"].startswith("layer: ")


def test_kept_runs_are_bounded_in_bytes(client, monkeypatch):
    shelf = client.app.state.models
    first = _run(client, ids="1 2 3 4 5 6")
    held = realmodels._held(shelf.run("tiny", tuple(first["ids"])))
    q_k_v_w = sum(
        layer.q.nbytes + layer.k.nbytes + layer.v.nbytes + 4 * 6 * 6 * layer.q.shape[1]
        for layer in shelf.run("tiny", tuple(first["ids"])).layers
    )  # the weights (1, h, 6, 6) as float32, counted by hand
    assert held == q_k_v_w
    monkeypatch.setattr(realmodels, "KEPT_BYTES", held + 1)  # room for one such run, not two
    _run(client, ids="2 3 4 5 6 7")
    assert list(shelf.runs) == [("tiny", (2, 3, 4, 5, 6, 7))]
