"""DeepSeek-V3 (latent attention, grouped sigmoid-routed experts) and BERT (an encoder with
padding) against transformers 5.23.0's eager forward, on tiny random models built here with
transformers' config classes and saved with ``save_pretrained``.

DeepSeek's norms, router and rotary tables run in float32 inside transformers even for a
float64 model, so its float64 logits match to 1e-5 (relative) and its weights to 2e-6; BERT has
no such island: 1e-9 and 1e-10. The two forms of latent attention (naive: per-head keys and
values; absorbed: one latent key/value head) are held to each other to 1e-12.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from conftest import require_or_skip

pytestmark = pytest.mark.oracle

DEEPSEEK = dict(
    vocab_size=50, hidden_size=32, intermediate_size=40, moe_intermediate_size=12,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2,
    n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, first_k_dense_replace=1,
    kv_lora_rank=12, q_lora_rank=10, qk_rope_head_dim=4, v_head_dim=6, qk_nope_head_dim=8,
    max_position_embeddings=64, routed_scaling_factor=1.7,
)  # fmt: skip
_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.8,
    "original_max_position_embeddings": 16,
}
VARIANTS = {
    # q through its own low-rank bottleneck, DeepSeek's interleaved rotary pairs, biases on
    # q_a_proj, kv_a_proj_with_mqa and o_proj
    "q_lora": DEEPSEEK | dict(attention_bias=True),
    # q_proj directly, rotate-half pairs, YaRN with mscale_all_dim (the scale changes), no norm
    # of the chosen gates, one group of experts, two dense layers
    "q_proj_yarn": DEEPSEEK
    | dict(q_lora_rank=None, rope_interleave=False, norm_topk_prob=False, n_group=1)
    | dict(topk_group=1, first_k_dense_replace=2, rope_parameters=_YARN),
}
BERT = dict(
    vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=40, max_position_embeddings=64, type_vocab_size=3,
)  # fmt: skip
IDS = np.array([[3, 17, 5, 9, 3, 17, 5, 42, 0, 8, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])
# Row 0: all tokens; row 1: left and right padding (a Dense mask, not a suffix).
MASK = np.array([[1] * 11, [0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
TYPES = np.array([[0] * 5 + [1] * 6, [2] * 11])


@pytest.fixture(scope="module")
def hf():
    torch = require_or_skip("torch", "ATTNLAB_REQUIRE_ORACLE", "the model oracle tests need it")
    transformers = require_or_skip(
        "transformers", "ATTNLAB_REQUIRE_ORACLE", "the model oracle tests need transformers==5.23.0"
    )
    torch.set_num_threads(1)
    return torch, transformers


@pytest.fixture(scope="module")
def saved(hf, tmp_path_factory):
    """(kind, variant, dtype) -> (folder, the transformers model), built once per module."""
    torch, transformers = hf
    cache = {}

    def make(kind: str, variant: str, dtype: str = "float64"):
        key = (kind, variant, dtype)
        if key not in cache:
            if kind == "deepseek":
                config = transformers.DeepseekV3Config(**VARIANTS[variant])
                config._experts_implementation = "eager"  # grouped_mm has no float64
                cls = transformers.AutoModelForCausalLM
            else:
                config = transformers.BertConfig(**BERT)
                cls = getattr(transformers, variant)  # BertForMaskedLM or BertModel
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            model = (
                cls.from_config(config, dtype=torch.float64)
                if kind == "deepseek"
                else cls(config).to(torch.float64)
            )
            with torch.no_grad():  # away from the init: every weight (and the bias) counts
                for p in model.parameters():
                    p.add_(0.3 * torch.randn_like(p))
                for name, b in model.named_buffers():
                    if name.endswith("e_score_correction_bias"):
                        b.add_(0.5 * torch.randn_like(b))  # it must move the choice
            model = model.to(getattr(torch, dtype)).eval()
            folder = tmp_path_factory.mktemp(f"{kind}-{variant}-{dtype}")
            model.save_pretrained(folder)
            cache[key] = (folder, model)
        return cache[key]

    return make


def reference(hf, model, ids, **kw):
    torch, _ = hf
    kw = {k: torch.as_tensor(v) for k, v in kw.items()}
    with torch.no_grad():
        out = model(torch.as_tensor(ids), output_attentions=True, **kw)
    logits = out.logits if hasattr(out, "logits") else out.last_hidden_state
    return logits.double().numpy(), [a.double().numpy() for a in out.attentions]


def close(ours, theirs, atol_rel):
    """|ours - theirs| <= atol_rel · max|theirs|."""
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol_rel * np.abs(theirs).max())


@pytest.mark.parametrize("form", ["naive", "absorbed"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deepseek_float64_logits_and_every_layers_weights(hf, saved, variant, form):
    from attnlab.models import load

    folder, model = saved("deepseek", variant)
    run = load(folder, dtype="float64").run(IDS, mla=form)
    logits, attentions = reference(hf, model, IDS)
    close(run.logits, logits, 1e-5)
    assert len(run.attention) == len(attentions) == 3
    for mine, theirs in zip(run.attention, attentions, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=2e-6)
    assert run.kinds == [f"full, latent, {form}"] * 3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deepseek_naive_and_absorbed_agree_to_1e_12(saved, variant):
    from attnlab.models import load

    folder, _ = saved("deepseek", variant)
    model = load(folder, dtype="float64")
    naive, absorbed = model.run(IDS, mla="naive"), model.run(IDS, mla="absorbed")
    np.testing.assert_allclose(absorbed.logits, naive.logits, rtol=0, atol=1e-12)
    for a, b in zip(absorbed.attention, naive.attention, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    r, d_r, d_n = 12, 4, 8  # kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim
    layer = absorbed.layers[1]
    assert layer.k.shape == (2, 1, 11, r + d_r)  # ONE key/value head: the latent cache
    assert layer.q.shape == (2, 4, 11, r + d_r)
    np.testing.assert_array_equal(layer.v, layer.k[..., :r])  # the values are the latent
    assert naive.layers[1].k.shape == (2, 4, 11, d_n + d_r)  # each head decompressed
    # Either form's row trace is the same row of weights.
    t_a, t_n = absorbed.trace(2, 3, 9, batch=1), naive.trace(2, 3, 9, batch=1)
    np.testing.assert_allclose(t_a.weights, t_n.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t_a.weights[0], naive.attention[2][1, 3, 9], rtol=0, atol=1e-12)


def test_deepseek_float32_matches(hf, saved):
    from attnlab.models import load

    folder, model = saved("deepseek", "q_lora", "float32")
    logits, attentions = reference(hf, model, IDS[:1])
    for form in ("naive", "absorbed"):
        run = load(folder).run(IDS[0], mla=form)
        assert run.logits.dtype == np.float32
        close(run.logits, logits, 1e-4)
        for mine, theirs in zip(run.attention, attentions, strict=True):
            close(mine, theirs, 1e-4)


def test_deepseek_named_points_mean_the_same_in_both_forms(saved):
    from attnlab.models import load

    folder, _ = saved("deepseek", "q_lora")
    model = load(folder, dtype="float64")
    naive = model.run(IDS, mla="naive", cache=True).cache
    absorbed = model.run(IDS, mla="absorbed", cache=True).cache
    for name in ("blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern", "blocks.2.hook_resid_post"):
        np.testing.assert_allclose(absorbed[name], naive[name], rtol=0, atol=1e-12)
    assert naive["blocks.1.attn.hook_z"].shape == (2, 11, 4, 6)  # (B, N, h, d_v)

    def flatten(pattern, name):  # every query spread evenly over the keys it may see
        allowed = pattern > 0
        return allowed / allowed.sum(-1, keepdims=True)

    hooks = {
        "blocks.1.attn.hook_pattern": flatten,
        "blocks.2.attn.hook_attn_scores": lambda s, _: s / 2,
    }
    hooked = [model.run(IDS, mla=form, hooks=hooks).logits for form in ("naive", "absorbed")]
    np.testing.assert_allclose(hooked[1], hooked[0], rtol=0, atol=1e-12)
    assert np.abs(hooked[0] - model.run(IDS).logits).max() > 1e-3  # the hooks changed the run


@pytest.mark.parametrize("variant", ["BertForMaskedLM", "BertModel"])
def test_bert_float64_with_padding_and_token_types(hf, saved, variant):
    from attnlab.models import load

    folder, model = saved("bert", variant)
    run = load(folder, dtype="float64").run(IDS, attention_mask=MASK, token_type_ids=TYPES)
    logits, attentions = reference(hf, model, IDS, attention_mask=MASK, token_type_ids=TYPES)
    close(run.logits, logits, 1e-9)
    for mine, theirs in zip(run.attention, attentions, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-10)
    assert run.output == (
        "masked-LM logits" if variant == "BertForMaskedLM" else "last hidden state"
    )
    shown = run.as_dict()
    assert shown["output"] == run.output
    assert ("next_tokens" in shown) == (variant == "BertForMaskedLM")  # no vocabulary: no tokens
    assert run.kinds == ["bidirectional, padding"] * 2
    # Bidirectional: a query puts weight on later keys; padded keys get none.
    assert run.attention[0][1, :, 3, 4:9].sum() > 0
    assert (run.attention[0][1, :, :, [0, 9, 10]] == 0).all()
    trace = run.trace(1, 2, 3, batch=1)
    np.testing.assert_allclose(trace.weights[0], attentions[1][1, 2, 3], rtol=0, atol=1e-10)


def test_bert_float32_and_no_mask(hf, saved):
    from attnlab.models import load

    folder, model = saved("bert", "BertForMaskedLM", "float32")
    run = load(folder).run(IDS)
    logits, attentions = reference(hf, model, IDS)
    assert run.logits.dtype == np.float32
    assert run.kinds == ["bidirectional"] * 2
    close(run.logits, logits, 1e-4)
    for mine, theirs in zip(run.attention, attentions, strict=True):
        close(mine, theirs, 1e-4)


def test_bad_run_options_are_one_clear_error(saved):
    from attnlab.errors import AttnlabError
    from attnlab.models import load

    bert = load(saved("bert", "BertForMaskedLM")[0], dtype="float64")
    deepseek = load(saved("deepseek", "q_lora")[0], dtype="float64")
    with pytest.raises(AttnlabError, match=r"expected at least one real token.*row 1"):
        bert.run(IDS, attention_mask=np.array([[1] * 11, [0] * 11]))
    with pytest.raises(AttnlabError, match=r"expected token_type_ids in \[0, 3\), but got 1\.\.3"):
        bert.run(IDS, token_type_ids=TYPES + 1)
    with pytest.raises(AttnlabError, match=r"expected no mla for a bert model"):
        bert.run(IDS, mla="naive")
    with pytest.raises(AttnlabError, match=r"expected no token_type_ids for a deepseek_v3"):
        deepseek.run(IDS, token_type_ids=TYPES)
    with pytest.raises(AttnlabError, match=r"expected mla to be one of .*but got 'flash'"):
        deepseek.run(IDS, mla="flash")


@pytest.mark.parametrize(
    ("kind", "variant", "extra", "kinds"),
    [
        ("deepseek", "q_lora", ["--mla", "absorbed"], "0: full, latent, absorbed"),
        ("bert", "BertForMaskedLM", [], "0: bidirectional; 1: bidirectional"),
    ],
)
def test_attnlab_model_runs_both(saved, kind, variant, extra, kinds):
    from typer.testing import CliRunner

    from attnlab.cli import app
    from attnlab.models import load

    folder, _ = saved(kind, variant)
    args = ["model", str(folder), "--ids", "3, 17, 5, 3, 17", "--dtype", "float64", *extra]
    result = CliRunner().invoke(app, [*args, "--layer", "1", "--head", "2", "--query", "1"])
    assert result.exit_code == 0, result.output
    assert kinds in result.output
    result = CliRunner().invoke(
        app, [*args, "--layer", "1", "--head", "2", "--query", "1", "--json"]
    )
    data = json.loads(result.output)
    run = load(folder, dtype="float64").run([3, 17, 5, 3, 17])  # naive: the same row
    np.testing.assert_allclose(data["trace"]["weights"][0], run.attention[1][0, 2, 1], atol=1e-12)
    assert ("next_token" in data["strongest_heads"]) == (kind == "bert")  # both directions


@pytest.mark.parametrize(("kind", "variant"), [("deepseek", "q_lora"), ("bert", "BertModel")])
def test_every_layers_residual_is_transformers_hidden_state(hf, saved, kind, variant):
    """The named points sit where transformers' hidden states are: hook_resid_post of layer l
    is its hidden_states[l + 1] (BERT's post-LN output; DeepSeek's residual sum, but for the
    last layer, which transformers reports after the final norm)."""
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(kind, variant)
    kw = {"attention_mask": MASK} if kind == "bert" else {}
    run = load(folder, dtype="float64").run(IDS, cache=True, **kw)
    with torch.no_grad():
        out = model(
            torch.as_tensor(IDS), output_hidden_states=True,
            **{k: torch.as_tensor(v) for k, v in kw.items()},
        )  # fmt: skip
    tol = 1e-9 if kind == "bert" else 1e-5
    names = [f"blocks.{layer}.hook_resid_post" for layer in range(len(out.hidden_states) - 1)]
    if kind == "deepseek":  # transformers' last hidden state is after the final norm
        names[-1] = "ln_final.hook_normalized"
    for name, theirs in zip(names, out.hidden_states[1:], strict=True):
        close(run.cache[name], theirs.numpy(), tol)


def test_lens_attribution_and_refusals(saved):
    from attnlab.errors import AttnlabError
    from attnlab.models import load
    from attnlab.models.inside import lens

    deepseek = load(saved("deepseek", "q_lora")[0], dtype="float64")
    run = deepseek.run(IDS, mla="absorbed", cache=True)
    np.testing.assert_allclose(lens.logit_lens(run, 2), run.logits, rtol=0, atol=1e-12)
    parts = lens.logit_attribution(run, 5, 7, batch=1)
    assert sum(parts.values()) == pytest.approx(run.logits[1, 5, 7], abs=1e-10)
    assert "L2H3" in parts  # one part per head, from its W_O of width v_head_dim

    bert = load(saved("bert", "BertForMaskedLM")[0], dtype="float64")
    run = bert.run(IDS, attention_mask=MASK, cache=True)
    np.testing.assert_allclose(lens.logit_lens(run, 1), run.logits, rtol=0, atol=1e-12)
    with pytest.raises(AttnlabError, match="post-LN"):
        lens.logit_attribution(run, 3, 7)
    with pytest.raises(AttnlabError, match="no key/value cache for an encoder"):
        bert.generate(IDS, 2)


@pytest.mark.parametrize(("kind", "variant"), [("deepseek", "q_lora"), ("bert", "BertForMaskedLM")])
def test_sharded_bfloat16_checkpoint(hf, saved, tmp_path, kind, variant):
    """Weights stored in bfloat16 over several shards, computed in float32 by both."""
    torch, transformers = hf
    from attnlab.models import load

    _, model = saved(kind, variant)
    folder = tmp_path / "bf16"
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder, max_shard_size="10KB")
    assert len(list(folder.glob("*.safetensors"))) > 1
    cls = transformers.AutoModelForCausalLM if kind == "deepseek" else transformers.BertForMaskedLM
    kw = {"experts_implementation": "eager"} if kind == "deepseek" else {}
    theirs = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager", **kw)
    logits, _ = reference(hf, theirs.eval(), IDS)
    ours = load(folder)
    assert ours.dtype == np.float32
    close(ours.run(IDS).logits, logits, 1e-4)


def test_serve_model_shows_both_families(hf, saved):
    """``attnlab serve --model``: every head's weights are transformers', BERT scored by the
    encoder's kinds, and a head's row for the stepper sees keys after the query in BERT."""
    import warnings

    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    (ds, ds_model), (bert, bert_model) = saved("deepseek", "q_lora"), saved("bert", "BertModel")
    app = create_app(models=[ds, bert])
    app.state.models.wait()
    ids = IDS[0]
    spaced = " ".join(map(str, ids))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        for folder, model, kinds in ((ds, ds_model, "induction"), (bert, bert_model, "next_token")):
            r = c.get("/api/models/run", params={"model": folder.name, "ids": spaced})
            assert r.status_code == 200, r.text
            data = r.json()
            assert kinds in data["score_kinds"]
            _, attentions = reference(hf, model, ids[None])
            for mine, theirs in zip(data["weights"], attentions, strict=True):
                np.testing.assert_allclose(mine, theirs[0], rtol=0, atol=1e-4)  # sent rounded
        params = {"model": bert.name, "ids": spaced, "layer": 1, "head": 2, "query": 3}
        head = c.get("/api/models/head", params=params).json()
    assert head["keys"] == list(range(len(ids)))  # both directions


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deepseek_greedy_generation_is_transformers(hf, saved, variant):
    """Decoding from the latent cache (one key/value head of width r + d_r, the absorbed form)
    picks transformers' tokens, each step attending to the cache only."""
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved("deepseek", variant)
    ones = torch.ones(IDS.shape, dtype=torch.long)  # token 0 is a real token here, not padding
    with torch.no_grad():
        theirs = model.generate(
            torch.as_tensor(IDS), attention_mask=ones, max_new_tokens=6, do_sample=False,
            pad_token_id=49,
        ).numpy()  # fmt: skip
    np.testing.assert_array_equal(load(folder, dtype="float64").generate(IDS, 6), theirs)


BIG = {
    "deepseek": DEEPSEEK
    | dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, kv_lora_rank=64),
    "bert": BERT | dict(hidden_size=256, intermediate_size=512, vocab_size=2000),
}


@pytest.mark.parametrize("kind", sorted(BIG))
def test_loading_holds_no_second_copy(hf, tmp_path, kind):
    """Peak Python-allocated memory while loading stays under 1.3x the weights (tracemalloc
    sees numpy's buffers), on folders of a few MiB so the weights, not the code, dominate."""
    import tracemalloc

    _, transformers = hf
    from attnlab.models import load

    if kind == "deepseek":
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.DeepseekV3Config(**BIG[kind])
        )
    else:
        model = transformers.BertForMaskedLM(transformers.BertConfig(**BIG[kind]))
    model.save_pretrained(tmp_path)
    load(tmp_path)  # the family's code imported before the measurement
    tracemalloc.start()
    try:
        network = load(tmp_path).network
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    unique = {p.data_ptr(): p.numel() for p in model.state_dict().values()}  # tied ones once
    weights = 4 * sum(unique.values())  # float32
    assert peak < 1.3 * weights, (peak, weights)
    assert network is not None


@pytest.mark.parametrize(("kind", "variant"), [("deepseek", "q_lora"), ("bert", "BertForMaskedLM")])
def test_ablating_a_head_is_transformers_with_that_head_zeroed(hf, saved, kind, variant):
    """ablate(heads=[(1, 2)]) equals transformers with head 2's slice of the output
    projection's input zeroed by a forward pre-hook."""
    from attnlab.models import ablate, load

    folder, model = saved(kind, variant)
    if kind == "deepseek":
        width, proj = 6, model.model.layers[1].self_attn.o_proj  # v_head_dim
    else:
        width, proj = 8, model.bert.encoder.layer[1].attention.output.dense  # head_dim

    def zero_head(module, args):
        z = args[0].clone()
        z[..., 2 * width : 3 * width] = 0
        return (z,)

    handle = proj.register_forward_pre_hook(zero_head)
    try:
        theirs, _ = reference(hf, model, IDS)
    finally:
        handle.remove()
    ours = load(folder, dtype="float64")
    ablated = ablate(ours, IDS, heads=[(1, 2)])
    close(ablated.logits, theirs, 1e-5 if kind == "deepseek" else 1e-9)
    assert np.abs(ablated.logits - ours.run(IDS).logits).max() > 1e-3  # the head mattered
