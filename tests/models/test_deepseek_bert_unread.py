"""The loader refuses a tensor no family reads; DeepSeek-V3's and BERT's exports carry a few
that are no such thing: DeepSeek's multi-token-prediction layers past ``num_hidden_layers``
(transformers ignores them too), and older BERT exports' position ids, tied decoder copy and
second bias. Those load and run the same; anything else is still refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_deepseek_bert_oracle as oracle

pytestmark = pytest.mark.oracle
IDS = oracle.IDS
hf, saved = oracle.hf, oracle.saved  # the oracle tests' fixtures: the same tiny models


def _rewrite(folder, tmp_path, change, config=None):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    out = tmp_path / "older"
    out.mkdir(exist_ok=True)
    data = json.loads((folder / "config.json").read_text()) | (config or {})
    (out / "config.json").write_text(json.dumps(data))
    save_file(tensors, str(out / "model.safetensors"))
    return out, tensors


def test_deepseeks_next_token_layers_are_skipped_not_refused(saved, tmp_path):
    from attnlab.errors import AttnlabError
    from attnlab.models import load

    folder, _ = saved("deepseek", "q_lora")
    want = load(folder, dtype="float64").run(IDS).logits

    def mtp(tensors):  # layer 3 of 3: DeepSeek-V3's next-token module
        tensors["model.layers.3.eh_proj.weight"] = np.ones((32, 64))
        tensors["model.layers.3.self_attn.o_proj.weight"] = np.ones((32, 24))

    older, _ = _rewrite(folder, tmp_path, mtp, {"num_nextn_predict_layers": 1})
    np.testing.assert_array_equal(load(older, dtype="float64").run(IDS).logits, want)
    older, _ = _rewrite(folder, tmp_path, mtp, {"num_nextn_predict_layers": 0})
    refused = r"'deepseek_v3' family reads, but got 'model\.layers\.3"
    with pytest.raises(AttnlabError, match=refused):
        load(older)


def test_older_bert_exports_load_and_run_the_same(saved, tmp_path):
    from attnlab.errors import AttnlabError
    from attnlab.models import load

    folder, _ = saved("bert", "BertForMaskedLM")
    want = load(folder, dtype="float64").run(IDS).logits

    def older(tensors):
        tensors["bert.embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
        embed = tensors["bert.embeddings.word_embeddings.weight"]
        tensors["cls.predictions.decoder.weight"] = embed  # the tied copy
        tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]

    path, tensors = _rewrite(folder, tmp_path, older)
    np.testing.assert_array_equal(load(path, dtype="float64").run(IDS).logits, want)
    tensors["bert.encoder.layer.0.attention.self.rotation.weight"] = np.ones(2)
    path, _ = _rewrite(folder, tmp_path, lambda t: t.update(tensors))
    with pytest.raises(AttnlabError, match=r"'bert' family reads, but got 'bert\.encoder"):
        load(path)
