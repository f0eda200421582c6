"""attnlab.models without an oracle: the loader's errors, the tokenizer, runs, traces and head
scores on a tiny random GPT-2 written by ``write_tiny_gpt2`` (and a hand-written Llama)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

import attnlab as al
from attnlab.errors import AttnlabError
from attnlab.models import FAMILIES, head_scores, load, write_tiny_gpt2
from attnlab.models.heads import patterns


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("tiny"), layers=2, d_model=16, heads=2)


@pytest.fixture(scope="module")
def model(tiny):
    return load(tiny, dtype="float64")


def _llama(folder, rope=None):
    """A 1-layer Llama folder written by hand (random weights)."""
    rng = np.random.default_rng(0)
    d, v, ff = 8, 10, 12
    config = {"model_type": "llama", "hidden_size": d, "num_attention_heads": 2, "num_key_value_heads": 1,
              "num_hidden_layers": 1, "intermediate_size": ff, "vocab_size": v, "rms_norm_eps": 1e-6,
              "rope_parameters": rope or {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
    shapes = {"model.embed_tokens.weight": (v, d), "lm_head.weight": (v, d), "model.norm.weight": (d,),
              "model.layers.0.input_layernorm.weight": (d,),
              "model.layers.0.post_attention_layernorm.weight": (d,),
              "model.layers.0.self_attn.q_proj.weight": (d, d),
              "model.layers.0.self_attn.k_proj.weight": (4, d),
              "model.layers.0.self_attn.v_proj.weight": (4, d),
              "model.layers.0.self_attn.o_proj.weight": (d, d),
              "model.layers.0.mlp.gate_proj.weight": (ff, d), "model.layers.0.mlp.up_proj.weight": (ff, d),
              "model.layers.0.mlp.down_proj.weight": (d, ff)}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()},
              str(folder / "model.safetensors"))  # fmt: skip
    return folder


def test_run_shapes_rows_and_trace(model):
    ids = model.tokenize("the cat sat on the mat . the cat")
    assert model.detokenize(ids) == "the cat sat on the mat . the cat"
    run = model.run(np.stack([ids, ids[::-1]]))
    b, n = 2, len(ids)
    assert run.logits.shape == (b, n, model.shape.vocab)
    for w in run.attention:
        assert w.shape == (b, 2, n, n)
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
        assert not np.triu(w, 1).any()  # causal
    trace = run.trace(1, 1, 4, batch=1)
    assert isinstance(trace, al.AttentionTrace)
    np.testing.assert_array_equal(trace.weights[0], run.attention[1][1, 1, 4])
    # The trace's scores are q kᵀ of the run's own q and k.
    layer = run.layers[1]
    np.testing.assert_allclose(trace.scores[0], layer.k[1, 1] @ layer.q[1, 1, 4], atol=1e-15)


def test_weights_on_demand_equal_weights_kept(model):
    ids = model.tokenize("the dog saw the cat")
    kept, later = model.run(ids), model.run(ids, weights=False)
    np.testing.assert_allclose(kept.logits, later.logits, atol=1e-13)
    for a, b in zip(kept.attention, later.attention, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-15)


def test_head_scores_against_hand_counted_patterns():
    ids = np.array([5, 6, 7, 5, 6, 7])
    p = patterns(ids)
    assert p["previous_token"][3, 2] and p["previous_token"].sum() == 5
    assert (
        p["duplicate_token"][3, 0]
        and p["duplicate_token"][5, 2]
        and p["duplicate_token"].sum() == 3
    )
    # Induction: at the second 5 (query 3) the target is what followed the first 5 (key 1).
    assert p["induction"][3, 1] and p["induction"][4, 2] and p["induction"].sum() == 3


def test_head_scores_on_a_perfect_previous_token_head():
    from types import SimpleNamespace

    # One layer, one head that puts all its weight on the previous token (query 0 on itself).
    weights = np.eye(4, k=-1)
    weights[0, 0] = 1.0
    run = SimpleNamespace(ids=np.array([[4, 1, 4, 1]]), attention=[weights[None, None]])
    scores = head_scores(run)
    assert scores.scores["previous_token"][0, 0] == 1.0
    assert scores.scores["first_token"][0, 0] == pytest.approx(1 / 3)  # only query 1's key 0
    # TransformerLens divides by the whole table (4 rows): 3 of 4 rows are previous-token rows.
    assert scores.transformer_lens["previous_token"][0, 0] == pytest.approx(3 / 4)
    assert scores.strongest("previous_token", 1) == [(0, 0, 1.0)]
    assert scores.as_dict()["attnlab"]["previous_token"] == [[1.0]]


def test_llama_by_hand_runs_and_groups_heads(tmp_path):
    model = load(_llama(tmp_path / "llama"), dtype="float64")
    run = model.run([1, 2, 3, 4])
    assert run.layers[0].k.shape == (1, 1, 4, 4)  # one key/value head, never copied per head
    assert run.attention[0].shape == (1, 2, 4, 4)
    assert run.kinds == ["full"]


def test_other_model_type_names_the_file_and_families(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(
        AttnlabError, match=r"config\.json.*gpt2, llama, mistral, qwen2, gemma2, gpt_oss.*'t5'"
    ):
        load(tmp_path)
    assert FAMILIES == (
        "gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss",
        "gpt_neox", "qwen3", "gemma3_text", "olmo2", "phi3", "llama4_text",
        "deepseek_v3", "bert",
    )  # fmt: skip


def test_truncated_shard(tmp_path, tiny):
    data = (tiny / "model.safetensors").read_bytes()
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "config.json").write_bytes((tiny / "config.json").read_bytes())
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(AttnlabError, match=r"model\.safetensors.*truncated or corrupt"):
        load(folder)


def test_missing_tensor_names_file_and_key(tmp_path):
    folder = _llama(tmp_path / "llama")
    from safetensors.numpy import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.0.self_attn.k_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        AttnlabError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' in .*model\.safetensors"
    ):
        load(folder)


def test_wrong_shape_is_refused(tmp_path):
    folder = _llama(tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 13
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(AttnlabError, match=r"gate_proj\.weight.*shape \(13, 8\).*\(12, 8\)"):
        load(folder)


def test_unknown_rope_type(tmp_path):
    folder = _llama(tmp_path / "llama", rope={"rope_type": "dynamic", "rope_theta": 1e4})
    with pytest.raises(AttnlabError, match=r"config\.json's rope_parameters.*'dynamic'"):
        load(folder)


@pytest.mark.parametrize(("change", "match"), [
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"hidden_act": "relu6"}, "hidden_act"),
    ({"hidden_size": "eight"}, "hidden_size"),
])  # fmt: skip
def test_bad_config_values(tmp_path, change, match):
    folder = _llama(tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text()) | change
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(AttnlabError, match=match):
        load(folder)


@pytest.mark.parametrize(("change", "match"), [
    ({"model_type": "llama4_text", "no_rope_layers": [1, 0]},
     r"'no_rope_layers' in .*config\.json to be a list of 1 entries 0 or 1"),
    ({"model_type": "llama4_text", "layer_types": ["sliding_attention"]},
     r"'layer_types' in .*'chunked_attention'"),
    ({"model_type": "gemma3_text", "rope_parameters": {"full_attention": 5}},
     r"rope_parameters\['sliding_attention'\] to be an object, but got None"),
    ({"model_type": "gemma3_text", "use_bidirectional_attention": True},
     r"'use_bidirectional_attention' in .*config\.json to be false"),
    ({"model_type": "phi3", "rope_parameters": {
        "rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0], "long_factor": [1.0] * 2,
        "original_max_position_embeddings": 4}, "max_position_embeddings": 8},
     r"rope_parameters\['short_factor'\] to be a list of 2 finite numbers .* but got \[1\.0\]"),
    ({"model_type": "gpt_neox", "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.3}},
     r"an even rotated width of at most 4 .* but got 1 instead"),
])  # fmt: skip
def test_bad_config_values_of_the_newer_families(tmp_path, change, match):
    """Options a family cannot run are refused before any tensor is read, naming the key."""
    folder = _llama(tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text()) | change
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(AttnlabError, match=match):
        load(folder)


def test_a_tensor_no_family_reads_is_refused_but_a_rotary_table_is_not(tmp_path):
    from safetensors.numpy import load_file

    folder = _llama(tmp_path / "llama")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2, np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    load(folder)  # an older export's rotary table is a buffer, not a weight
    tensors["model.layers.0.self_attn.q_norm.weight"] = np.ones(4, np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        AttnlabError,
        match=r"every tensor in .*llama to be one the 'llama' family reads, but got "
        r"'model\.layers\.0\.self_attn\.q_norm\.weight' instead",
    ):
        load(folder)


def test_missing_folder_files_and_tokenizer(tmp_path, model):
    with pytest.raises(AttnlabError, match="not a directory"):
        load(tmp_path / "nowhere")
    with pytest.raises(AttnlabError, match=r"config\.json"):
        load(tmp_path)
    llama = load(_llama(tmp_path / "llama"))
    with pytest.raises(AttnlabError, match=r"tokenizer\.json"):
        llama.tokenize("hello")
    with pytest.raises(AttnlabError, match="dtype"):
        load(tmp_path / "llama", dtype="float16")


@pytest.mark.parametrize(("ids", "match"), [
    ([], "N >= 1"), ([[1.5, 2]], "integer"), ([0, 99], r"\[0, "), ([1] * 70, "at most 64"),
])  # fmt: skip
def test_bad_ids(model, ids, match):
    with pytest.raises(AttnlabError, match=match):
        model.run(np.asarray(ids, dtype=float if "integer" in match else int))


@pytest.mark.parametrize(
    ("args", "match"), [((2, 0, 0), "layer"), ((0, 5, 0), "head"), ((0, 0, 9), "query")]
)
def test_bad_trace_row(model, args, match):
    run = model.run([1, 2, 3])
    with pytest.raises(AttnlabError, match=match):
        run.trace(*args)


def test_loading_holds_no_second_copy(tmp_path):
    """Peak Python-allocated memory while loading stays under 1.3x the weights (tracemalloc
    sees numpy's buffers)."""
    import tracemalloc

    folder = write_tiny_gpt2(tmp_path / "big", layers=4, d_model=256, heads=4, positions=512)
    tracemalloc.start()
    try:
        model = load(folder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weights = sum(a.nbytes for a in model.network.w.values())
    assert peak < 1.3 * weights


def test_run_and_scores_are_json_ready(model):
    run = model.run(model.tokenize("the cat sat . the cat"))
    data = json.loads(json.dumps(run.as_dict(weights=True), allow_nan=False))
    assert data["layers"] == [{"kind": "full", "heads": 2, "kv_heads": 2}] * 2
    np.testing.assert_allclose(data["attention"][1], run.attention[1])
    top = data["next_tokens"][-1][0]
    assert top["id"] == int(run.logits[0, -1].argmax())
    scores = json.loads(json.dumps(run.head_scores().as_dict(), allow_nan=False))
    assert set(scores["attnlab"]) == set(scores["transformer_lens"]) == {
        "previous_token", "induction", "duplicate_token", "first_token",
    }  # fmt: skip
    with pytest.raises(AttnlabError, match="batch"):
        run.head_scores(batch=1)
