"""attnlab.models against transformers (eager attention), on tiny random models of each family
saved with transformers' own ``save_pretrained``, so the loader reads the real file layout.

transformers computes the rotary tables (and Gemma's norms, and most families' softmax) in
float32 even for a float64 model, so only GPT-2 is compared to 1e-10 in float64; the rotary
families to 1e-5 (docs/models.md says why).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require_or_skip

pytestmark = pytest.mark.oracle

SMALL = dict(
    vocab_size=50, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip
FAMILIES = {
    "gpt2": ("GPT2Config", dict(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "llama": (
        "LlamaConfig",
        SMALL
        | dict(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        ),
    ),
    "mistral": ("MistralConfig", SMALL | dict(sliding_window=4)),
    "qwen2": (
        "Qwen2Config",
        SMALL
        | dict(
            use_sliding_window=True,
            sliding_window=3,
            max_window_layers=1,
            layer_types=["full_attention", "sliding_attention"],
        ),
    ),
    "gemma2": (
        "Gemma2Config",
        SMALL
        | dict(
            head_dim=8,
            sliding_window=4,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            query_pre_attn_scalar=12,
        ),
    ),
    "gpt_oss": (
        "GptOssConfig",
        SMALL
        | dict(
            head_dim=8,
            sliding_window=4,
            num_local_experts=4,
            num_experts_per_tok=2,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 16,
            },
        ),
    ),
}
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
    """family -> (folder of the float64 model, the transformers model), built once per module."""
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
            with (
                torch.no_grad()
            ):  # away from the init (norms of 1, zero biases): every weight counts
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
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_float64_logits_and_every_layers_weights(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64").run(IDS)
    logits, attentions = reference(hf, model, IDS)
    rtol = 1e-10 if family == "gpt2" else 1e-5
    close(ours.logits, logits, rtol)
    assert len(ours.attention) == len(attentions)
    for mine, theirs in zip(ours.attention, attentions, strict=True):
        close(mine, theirs, rtol)


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


def test_sharded_checkpoint(hf, saved):
    from attnlab.models import load

    folder, model = saved("llama", "float32", max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) > 2
    logits, _ = reference(hf, model, IDS)
    close(load(folder).run(IDS).logits, logits, 1e-4)


@pytest.mark.parametrize(
    ("family", "stored"), [("gpt2", "bfloat16"), ("gemma2", "bfloat16"), ("llama", "float16")]
)
def test_half_precision_checkpoint(hf, saved, family, stored):
    """Weights stored in bfloat16 or float16, computed in float32 by both."""
    torch, transformers = hf
    from attnlab.models import load

    folder, _ = saved(family, stored)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    logits, _ = reference(hf, theirs, IDS)
    ours = load(folder)
    assert ours.dtype == np.float32
    close(ours.run(IDS).logits, logits, 1e-4)


@pytest.mark.parametrize(("family", "layer", "head", "query"), [
    ("gpt2", 1, 2, 7), ("gemma2", 0, 3, 9), ("gpt_oss", 0, 1, 10), ("qwen2", 1, 0, 6),
])  # fmt: skip
def test_one_rows_trace_is_transformers_row(hf, saved, family, layer, head, query):
    from attnlab.models import load

    folder, model = saved(family)
    run = load(folder, dtype="float64").run(IDS)
    _, attentions = reference(hf, model, IDS)
    trace = run.trace(layer, head, query, batch=1)
    close(trace.weights[0], attentions[layer][1, head, query], 1e-5)
    assert np.isneginf(trace.masked[0, query + 1 :]).all()  # the causal future is blocked
    if family == "gemma2":
        assert trace.capped is not None and np.abs(trace.capped).max() < 2.0
    if family == "gpt_oss":
        assert trace.weights.sum() < 1.0  # the sink took its share
