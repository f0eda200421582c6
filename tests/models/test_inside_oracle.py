"""The named points, hooks, ablation and patching of ``attnlab.models`` against transformers
with torch hooks, in float64, on the tiny random models of ``test_models_oracle``.

The rotary families are compared to 1e-5 (transformers computes its rotary tables in float32);
GPT-2 to 1e-10.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_models_oracle as oracle
from test_models_oracle import FAMILIES, IDS, close

hf, saved = oracle.hf, oracle.saved  # the tiny checkpoints, as fixtures of this module too

pytestmark = pytest.mark.oracle

INSIDE = ("gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss")
assert set(INSIDE) <= set(FAMILIES)


def rtol(family: str) -> float:
    return 1e-10 if family == "gpt2" else 1e-5


def hidden(hf, model, ids, **kw):
    torch, _ = hf
    with torch.no_grad():
        out = model(torch.as_tensor(ids), output_hidden_states=True, **kw)
    return out.logits.double().numpy(), [h.double().numpy() for h in out.hidden_states]


def blocks(model):
    """transformers' decoder layers (GPT-2's ``h``, the others' ``layers``)."""
    inner = model.transformer if hasattr(model, "transformer") else model.model
    return inner.h if hasattr(inner, "h") else inner.layers


def out_proj(model, layer: int):
    attn = blocks(model)[layer]
    return attn.attn.c_proj if hasattr(attn, "attn") else attn.self_attn.o_proj


@pytest.mark.parametrize("family", INSIDE)
def test_cache_is_transformers_hidden_states(hf, saved, family):
    from attnlab.models import load

    folder, model = saved(family)
    ours = load(folder, dtype="float64")
    run = ours.run(IDS, cache=True)
    logits, states = hidden(hf, model, IDS)
    layers = ours.shape.layers
    assert len(states) == layers + 1
    for i in range(layers):
        close(run.cache[f"blocks.{i}.hook_resid_pre"], states[i], rtol(family))
    # transformers' last hidden state is the final norm's output
    close(run.cache["ln_final.hook_normalized"], states[-1], rtol(family))
    close(run.logits, logits, rtol(family))
    b, n = IDS.shape
    s = ours.shape
    assert run.cache["blocks.1.attn.hook_q"].shape == (b, n, s.heads, s.head_dim)
    assert run.cache["blocks.1.attn.hook_k"].shape == (b, n, s.kv_heads, s.head_dim)
    assert run.cache["blocks.1.attn.hook_z"].shape == (b, n, s.heads, s.head_dim)
    assert run.cache["blocks.0.attn.hook_pattern"].shape == (b, s.heads, n, n)
    np.testing.assert_array_equal(run.cache["blocks.0.attn.hook_pattern"], run.attention[0])
    assert ("hook_pos_embed" in run.cache) == (family == "gpt2")
    last = f"blocks.{layers - 1}.hook_resid_post"
    np.testing.assert_array_equal(
        run.cache[last], run.cache[f"blocks.{layers - 1}.hook_resid_mid"]
        + run.cache[f"blocks.{layers - 1}.hook_mlp_out"],
    )  # fmt: skip
