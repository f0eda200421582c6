"""The six families after the first (GPT-NeoX, Qwen3, Gemma 3, OLMo 2, Phi-3, Llama 4) against
transformers (eager attention), each a tiny random model built with transformers' own config
class and settings chosen to exercise what the family does differently: grouped-query ratios,
head widths that are not hidden / heads, windows and chunks shorter than the input, partial
and interleaved rotary, LongRoPE past its switch, NoPE layers with temperature tuning, and
mixtures of experts with several experts active.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import require_or_skip

pytestmark = pytest.mark.oracle

SMALL = dict(
    vocab_size=50, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip
NEOX = dict(
    vocab_size=50, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64,
    rope_parameters={"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5},
)  # fmt: skip
# fmt: off
FAMILIES = {
    "gpt_neox": ("GPTNeoXConfig", NEOX | dict(use_parallel_residual=True)),
    "gpt_neox-serial": (
        "GPTNeoXConfig", NEOX | dict(use_parallel_residual=False, attention_bias=False)
    ),
    "qwen3": (
        "Qwen3Config",
        SMALL
        | dict(
            num_attention_heads=6,
            head_dim=12,
            use_sliding_window=True,
            sliding_window=3,
            max_window_layers=1,
            attention_bias=True,
        ),
    ),
    "gemma3_text": (
        "Gemma3TextConfig",
        SMALL
        | dict(
            num_hidden_layers=3,
            head_dim=12,
            sliding_window=4,
            sliding_window_pattern=2,
            query_pre_attn_scalar=10,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0},
            },
        ),
    ),
    "olmo2": ("Olmo2Config", SMALL | dict(num_key_value_heads=1)),
    "phi3": (
        "Phi3Config",
        SMALL
        | dict(
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            sliding_window=5,
            original_max_position_embeddings=8,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 100.0,
                "partial_rotary_factor": 0.5,
                "short_factor": [1.0, 1.5],
                "long_factor": [2.0, 5.0],
            },
        ),
    ),
    "llama4_text": (
        "Llama4TextConfig",
        SMALL
        | dict(
            num_hidden_layers=4,
            head_dim=12,
            intermediate_size_mlp=24,
            num_local_experts=4,
            num_experts_per_tok=2,
            interleave_moe_layer_step=2,
            no_rope_layers=[1, 0, 1, 0],
            attention_chunk_size=4,
            floor_scale=2,
            attn_scale=0.5,
        ),
    ),
}
# fmt: on
IDS = np.array([[3, 17, 5, 9, 3, 17, 5, 42, 0, 8, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])


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
    """(family, dtype, save options) -> (folder, the transformers model), built once."""
    torch, transformers = hf
    cache = {}

    def make(family: str, dtype: str = "float64", **save):
        key = (family, dtype, tuple(sorted(save.items())))
        if key not in cache:
            name, kwargs = FAMILIES[family]
            config = getattr(transformers, name)(**kwargs)
            config._attn_implementation = "eager"
            config._experts_implementation = "eager"  # grouped_mm has no float64
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float64)
            with torch.no_grad():  # away from the init (norms of 1, zero biases)
                for p in model.parameters():
                    p.add_(0.3 * torch.randn_like(p))
            model = model.to(getattr(torch, dtype)).eval()
            folder = tmp_path_factory.mktemp(f"{family}-{dtype}")
            model.save_pretrained(folder, **save)
            cache[key] = (folder, model)
        return cache[key]

    return make


def reference(hf, model, ids):
    torch, _ = hf
    with torch.no_grad():
        out = model(torch.as_tensor(ids), output_attentions=True)
    return out.logits.double().numpy(), [a.double().numpy() for a in out.attentions]


def close(ours, theirs, rtol):
    """|ours - theirs| <= rtol · max|theirs| (relative to the table's scale)."""
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=rtol * np.abs(theirs).max())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_float64_logits_and_every_layers_weights(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64").run(IDS)
    logits, attentions = reference(hf, model, IDS)
    close(ours.logits, logits, 1e-5)
    assert len(ours.attention) == len(attentions)
    for mine, theirs in zip(ours.attention, attentions, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=2e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_float32_matches(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family, "float32")
    ours = load(folder).run(IDS[0])
    logits, attentions = reference(hf, model, IDS[:1])
    assert ours.logits.dtype == np.float32
    close(ours.logits, logits, 1e-4)
    for mine, theirs in zip(ours.attention, attentions, strict=True):
        close(mine, theirs, 1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sharded_bfloat16_checkpoint(hf, saved, family):
    """Weights stored in bfloat16 over several shards, computed in float32 by both."""
    torch, transformers = hf
    from attnlab.models import load

    folder, _ = saved(family, "bfloat16", max_shard_size="8KB")
    assert len(list(folder.glob("*.safetensors"))) > 1
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    logits, _ = reference(hf, theirs, IDS)
    close(load(folder).run(IDS).logits, logits, 1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cache_is_transformers_hidden_states(hf, saved, family):
    """Every layer's residual stream, through the named points, is transformers' hidden state."""
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    run = load(folder, dtype="float64").run(IDS, cache=True)
    with torch.no_grad():
        states = model(torch.as_tensor(IDS), output_hidden_states=True).hidden_states
    layers = len(states) - 1
    for i in range(layers):
        close(run.cache[f"blocks.{i}.hook_resid_pre"], states[i].double().numpy(), 1e-5)
    close(run.cache["ln_final.hook_normalized"], states[-1].double().numpy(), 1e-5)
    last = f"blocks.{layers - 1}."
    pre, attn, mlp = (
        run.cache[last + k] for k in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out")
    )
    if family == "gpt_neox":  # a parallel block: both branches read the block's input
        assert last + "hook_resid_mid" not in run.cache
    else:
        np.testing.assert_allclose(run.cache[last + "hook_resid_mid"], pre + attn, rtol=1e-12)
    np.testing.assert_allclose(run.cache[last + "hook_resid_post"], pre + attn + mlp, atol=1e-12)


@pytest.mark.parametrize(("family", "layer", "head", "query"), [
    ("llama4_text", 0, 1, 9),  # chunked: the row sees keys 8 and 9 only
    ("llama4_text", 1, 3, 10),  # NoPE with temperature tuning
    ("gemma3_text", 1, 2, 10),  # a global layer, linear-scaled rotary
    ("qwen3", 1, 5, 7),  # sliding window of 3, head_dim 12 with six heads on two
])  # fmt: skip
def test_one_rows_trace_is_transformers_row(hf, saved, family, layer, head, query):
    from attnlab.models import load

    folder, model = saved(family)
    run = load(folder, dtype="float64").run(IDS)
    _, attentions = reference(hf, model, IDS)
    trace = run.trace(layer, head, query, batch=1)
    np.testing.assert_allclose(trace.weights[0], attentions[layer][1, head, query], atol=2e-6)
    assert np.isneginf(trace.masked[0, query + 1 :]).all()  # the causal future is blocked
    seen = np.flatnonzero(np.isfinite(trace.masked[0]))
    np.testing.assert_array_equal(seen, np.flatnonzero(attentions[layer][1, head, query] > 0))


def test_phi3_short_factors_below_the_switch(hf, saved):
    """LongRoPE uses its short factors for inputs of at most original_max_position_embeddings
    (8 here) tokens, and the long ones past it (the other tests' 11 tokens)."""
    from attnlab.models import load

    folder, model = saved("phi3")
    ids = IDS[:, :8]
    logits, attentions = reference(hf, model, ids)
    run = load(folder, dtype="float64").run(ids)
    close(run.logits, logits, 1e-5)
    for mine, theirs in zip(run.attention, attentions, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=2e-6)


def test_a_qwen3_folder_labelled_llama_is_refused(saved, tmp_path):
    """Llama reads every Qwen3 tensor but the q/k norms: running without them would compute
    another model, so the loader names the first tensor it did not read."""
    from attnlab.errors import AttnlabError
    from attnlab.models import load

    folder, _ = saved("qwen3", "float32")
    relabelled = tmp_path / "relabelled"
    relabelled.mkdir()
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "llama"
    (relabelled / "config.json").write_text(json.dumps(config))
    (relabelled / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(
        AttnlabError,
        match=r"expected every tensor in .*relabelled to be one the 'llama' family reads, but got "
        r"'model\.layers\.0\.self_attn\.k_norm\.weight' \(and 3 more\) instead",
    ):
        load(relabelled)


KINDS = {
    "gpt_neox": ["full", "full"],
    "gpt_neox-serial": ["full", "full"],
    "qwen3": ["full", "sliding 3"],
    "gemma3_text": ["sliding 4", "full", "sliding 4"],
    "olmo2": ["full", "full"],
    "phi3": ["sliding 5", "sliding 5"],
    "llama4_text": ["chunked 4", "full", "chunked 4", "full"],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_attnlab_model_runs_each_folder(hf, saved, family):
    """The CLI prints each layer's kind and a row that is transformers' row."""
    from typer.testing import CliRunner

    from attnlab.cli import app

    folder, model = saved(family, "float32")
    ids = ", ".join(str(int(i)) for i in IDS[0])
    result = CliRunner().invoke(
        app, ["model", str(folder), "--ids", ids, "--layer", "1", "--head", "0", "--query", "9",
              "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["layers"] == KINDS[family]
    _, attentions = reference(hf, model, IDS[:1])
    np.testing.assert_allclose(data["trace"]["weights"][0], attentions[1][0, 0, 9], atol=1e-4)


def test_serve_lists_every_family(saved):
    """``attnlab serve --model`` checks, loads and lists a folder of each family."""
    import warnings

    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    folders = [saved(family, "float32")[0] for family in sorted(FAMILIES)]
    app = create_app(models=folders)
    app.state.models.wait()
    with TestClient(app, base_url="http://127.0.0.1") as client:
        listed = client.get("/api/models").json()["models"]
        assert [m["status"] for m in listed] == ["ready"] * len(folders), listed
        name = listed[-1]["name"]
        r = client.get("/api/models/run", params={"model": name, "ids": "3 17 5 9 3 17 5 42"})
        assert r.status_code == 200, r.text
        assert r.json()["kinds"] == KINDS[sorted(FAMILIES)[-1]]


@pytest.mark.parametrize("family", ["gpt_neox", "gpt_neox-serial", "olmo2", "llama4_text"])
def test_logit_attribution_adds_up_to_transformers_logit(hf, saved, family):
    """Heads, MLPs and embeddings split the logit (LayerNorm and parallel blocks, post-norms,
    experts), and the shares add up to transformers' logit."""
    from attnlab.models import load

    folder, model = saved(family)
    run = load(folder, dtype="float64").run(IDS)
    logits, _ = reference(hf, model, IDS)
    token = int(np.argmax(logits[1, 9]))
    shares = run.logit_attribution(9, token, batch=1)
    assert any(k.startswith("L1H") for k in shares)
    assert sum(shares.values()) == pytest.approx(
        logits[1, 9, token], abs=1e-5 * np.abs(logits).max()
    )


OLDER = {  # what config.json files written before transformers 5 hold instead
    "gpt_neox": lambda c: c | {"rotary_pct": 0.5, "rotary_emb_base": 100.0},
    "gemma3_text": lambda c: c | {
        "rope_theta": 1000.0, "rope_local_base_freq": 100.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "phi3": lambda c: c | {
        "rope_theta": 100.0, "partial_rotary_factor": 0.5,
        "rope_scaling": {"type": "su", "short_factor": [1.0, 1.5], "long_factor": [2.0, 5.0]},
    },
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(OLDER))
def test_an_older_config_json_runs_the_same_model(hf, saved, family, tmp_path):
    from attnlab.models import load

    folder, model = saved(family, "float32")
    config = json.loads((folder / "config.json").read_text())
    del config["rope_parameters"]
    older = tmp_path / family
    older.mkdir()
    (older / "config.json").write_text(json.dumps(OLDER[family](config)))
    (older / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    logits, _ = reference(hf, model, IDS)
    close(load(older).run(IDS).logits, logits, 1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_generation_is_transformers(hf, saved, family):
    """Prompt and new tokens through the key/value cache, token for token transformers' greedy
    generate: chunks and windows that the new tokens cross, NoPE temperatures at new positions,
    LongRoPE switching to its long factors while generating."""
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    prompt, new = IDS[:, :6], 6
    model.generation_config.eos_token_id = None  # never stop early: compare every token
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        theirs = model.generate(
            torch.as_tensor(prompt), max_new_tokens=new, do_sample=False,
            attention_mask=torch.ones(prompt.shape, dtype=torch.long),
        ).numpy()  # fmt: skip
    np.testing.assert_array_equal(load(folder, dtype="float64").generate(prompt, new), theirs)


def test_pythias_buffers_are_neither_read_nor_refused(hf, saved, tmp_path):
    """Older Pythia exports carry each layer's causal mask (bool), its fill value and the
    rotary frequencies beside the weights: the model runs the same, and a bool tensor
    anywhere else is still refused."""
    from safetensors.numpy import load_file, save_file

    from attnlab.errors import AttnlabError
    from attnlab.models import load

    folder, model = saved("gpt_neox", "float32")
    tensors = load_file(str(folder / "model.safetensors"))
    for i in range(2):
        p = f"gpt_neox.layers.{i}.attention."
        tensors[p + "bias"] = np.tril(np.ones((1, 1, 64, 64), bool))
        tensors[p + "masked_bias"] = np.array(-1e9, np.float32)
        tensors[p + "rotary_emb.inv_freq"] = np.ones(1, np.float32)
    older = tmp_path / "older"
    older.mkdir()
    (older / "config.json").write_bytes((folder / "config.json").read_bytes())
    save_file(tensors, str(older / "model.safetensors"))
    logits, _ = reference(hf, model, IDS)
    close(load(older).run(IDS).logits, logits, 1e-4)
    tensors["gpt_neox.layers.0.attention.mask"] = np.ones(2, bool)
    save_file(tensors, str(older / "model.safetensors"))
    with pytest.raises(AttnlabError, match=r"'gpt_neox\.layers\.0\.attention\.mask'.*BOOL"):
        load(older)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_right_padding_gives_transformers_logits_on_real_tokens(hf, saved, family):
    """An attention_mask's pad keys are left out on top of each layer's own mask (chunks,
    windows); a query that then sees no key is transformers' NaN and attnlab's 0, so only
    the real tokens are compared."""
    torch, _ = hf
    from attnlab.models import load

    folder, model = saved(family)
    mask = np.ones_like(IDS)
    mask[1, 8:] = 0
    with torch.no_grad():
        theirs = model(torch.as_tensor(IDS), attention_mask=torch.as_tensor(mask)).logits.numpy()
    ours = load(folder, dtype="float64").run(IDS, attention_mask=mask).logits
    real = mask.astype(bool)
    close(ours[real], theirs[real], 1e-5)
    assert np.isfinite(ours).all()


BIGGER = dict(vocab_size=2048, hidden_size=256, intermediate_size=512)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_loading_peaks_under_1_3x_the_weights(hf, tmp_path, family):
    """Each family loads one tensor at a time into the working dtype: Python's peak while
    loading stays under 1.3x the float32 weights, on folders of a few MiB (the weights, not the
    code, dominate)."""
    import tracemalloc

    from attnlab.models import load

    torch, transformers = hf
    name, kwargs = FAMILIES[family]
    kwargs = kwargs | BIGGER
    if family == "llama4_text":
        kwargs["intermediate_size_mlp"] = 512
    if family == "phi3":  # one factor per rotated pair: head_dim 64, half of it rotated
        rope = dict(kwargs["rope_parameters"], short_factor=[1.5] * 16, long_factor=[3.0] * 16)
        kwargs["rope_parameters"] = rope
    config = getattr(transformers, name)(**kwargs)
    config._experts_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    load(tmp_path)  # the family's code imported before the measurement
    tracemalloc.start()
    try:
        network = load(tmp_path).network
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    unique = {p.data_ptr(): p.numel() for p in model.state_dict().values()}  # tied ones once
    weights = 4 * sum(unique.values())
    assert weights > 2**21 and network is not None
    assert peak < 1.3 * weights, (peak / weights, weights)
