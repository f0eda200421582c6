"""The small language model shipped in the package: trained by attnlab, saved as a GPT-2 folder.

The export is exact: a tiny transformer with GPT-2's block, written out and read back by
``attnlab.models.load`` (and by transformers), gives the logits the tiny transformer gives. The
shipped copy still measures what its build recorded (held-out accuracy, every head's scores);
retraining it from scratch (slow, ATTNLAB_SLOW=1) reproduces the accuracy.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import attnlab.models as m
from attnlab.errors import AttnlabError
from attnlab.transformer import TinyTransformer, corpus
from attnlab.transformer.export import save_hugging_face
from attnlab.transformer.tiny_lm import accuracies, build, head_scores


def _random_gpt2_block(dtype=np.float64, vocab=11, seed=3):
    model = TinyTransformer(vocab_size=vocab, context=9, layers=2, heads=2, d_model=8,
                            mlp=True, dtype=dtype, seed=seed)  # fmt: skip
    rng = np.random.default_rng(seed)
    for _name, p in model.params.items():  # biases and gains away from their 0 and 1
        p += rng.normal(0, 0.3, p.shape).astype(p.dtype)
    return model


def test_an_exported_tiny_transformer_is_read_back_with_the_same_logits(tmp_path):
    model = _random_gpt2_block()
    words = tuple(f"w{i}" for i in range(11))
    folder = save_hugging_face(model, tmp_path / "lm", words, unknown="w0", bos="w1")
    ids = np.random.default_rng(0).integers(0, 11, (3, 9))
    run = m.load(folder, dtype="float64").run(ids)
    np.testing.assert_allclose(run.logits, model.logits(ids), rtol=0, atol=1e-5)
    assert m.load(folder).tokenize("w3 w4 w9").tolist() == [3, 4, 9]


@pytest.mark.oracle
def test_transformers_reads_the_export_as_gpt2(torch, tmp_path):
    from transformers import GPT2LMHeadModel

    model = _random_gpt2_block()
    folder = save_hugging_face(model, tmp_path / "lm", tuple(f"w{i}" for i in range(11)),
                               unknown="w0", bos="w1")  # fmt: skip
    ids = np.random.default_rng(1).integers(0, 11, (2, 9))
    hf = GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float64).eval()
    with torch.no_grad():
        want = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(model.logits(ids), want, rtol=0, atol=1e-5)


def test_only_gpt2s_block_can_be_exported(tmp_path):
    attention_only = TinyTransformer(vocab_size=4, context=4, layers=1, heads=1, d_model=4)
    with pytest.raises(AttnlabError, match="mlp=True"):
        save_hugging_face(attention_only, tmp_path, ("a", "b", "c", "d"))


@pytest.fixture(scope="module")
def shipped():
    folder = m.shipped()
    record = json.loads((folder / "config.json").read_text())["attnlab"]
    return folder, record


def test_the_shipped_model_measures_what_its_build_recorded(shipped):
    folder, record = shipped
    model = m.load(folder, dtype="float64")
    ev = corpus.evaluation(context=record["settings"]["context"])
    got = accuracies(model.run(ev.tokens).logits, ev)
    for task, want in record["accuracy"].items():  # argmax ties may flip between dtypes
        assert abs(got[task] - want) <= 2 / max(len(getattr(ev, task)), 1), task
    assert got["giving"] > 0.5 and got["repeat"] > 0.5  # far above chance (1/8, about 1/18)
    scores = head_scores(folder)
    for kind, want in record["head_scores"].items():
        np.testing.assert_allclose(scores[kind], want, atol=2e-6, equal_nan=True)


def test_the_shipped_model_has_the_heads_its_corpus_teaches(shipped):
    """On a phrase said twice (16 keys a query at most), layer 0 holds a head that looks at
    the previous token and layer 1 one that looks at what followed the current token's last
    occurrence, each several times what attention spread evenly would give them."""
    _, record = shipped
    scores = {k: np.array(v, dtype=float) for k, v in record["head_scores"].items()}
    assert np.nanmax(scores["previous_token"][0]) > 0.3
    assert np.nanmax(scores["induction"][1]) > 0.25
    model = m.load(m.shipped())
    text = "<bos> when John and Mary went to the park , John gave a cake to"
    logits = model.run(model.tokenize(text)).logits
    assert model.detokenize([int(logits[0, -1].argmax())]) == "Mary"


def test_the_shipped_model_reads_words(shipped):
    folder, _ = shipped
    model = m.load(folder)
    ids = model.tokenize("when John and Mary went to the park , John gave a cake to")
    assert model.detokenize(ids).split()[-1] == "to"
    assert len(ids) == 14


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ATTNLAB_SLOW") != "1", reason="retrains: ATTNLAB_SLOW=1")
def test_rebuilding_the_shipped_model_reproduces_its_accuracy(shipped, tmp_path):
    _, record = shipped
    again = build(tmp_path / "tiny-lm")
    assert again["accuracy"] == record["accuracy"]


def test_serve_shows_the_shipped_model_when_given_no_folder(monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from attnlab.cli import app

    seen = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.append(self))
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    result = CliRunner().invoke(app, ["serve", "--port", "8765"])
    assert result.exit_code == 0, result.output
    shelf = seen[0].config.app.state.models if hasattr(seen[0].config.app, "state") else None
    text = " ".join(result.output.split())
    assert "tiny-lm" in text and "--model ~/models/gpt2" in text
    assert shelf is None or any("tiny-lm" in str(name) for name in shelf.entries)
