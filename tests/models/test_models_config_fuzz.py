"""Fuzzed config.json values over every family's keys: ``load`` answers a model whose logits
are finite, or one AttnlabError naming config.json; never another exception, a traceback, a
NaN or a hang.

CI runs the examples below; ``make fuzz`` (the "fuzz" hypothesis profile) runs ten times more
per run of the suite, and ``ATTNLAB_HYPOTHESIS_SCALE`` more still.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.errors import AttnlabError
from attnlab.models import load
from model_folders import BASE, write_family

#: Keys the families read, beyond the ones in their base configs.
EXTRA_KEYS = [
    "head_dim", "rope_scaling", "rope_parameters", "rope_theta", "layer_types", "hidden_act",
    "hidden_activation", "activation_function", "tie_word_embeddings", "attention_bias",
    "mlp_bias", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "n_inner",
    "sliding_window", "use_sliding_window", "max_window_layers", "max_position_embeddings",
    "swiglu_alpha", "swiglu_limit", "quantization_config", "partial_rotary_factor",
    # gpt_neox, qwen3, gemma3_text, olmo2, phi3, llama4_text
    "rotary_pct", "rotary_emb_base", "use_parallel_residual", "layer_norm_eps",
    "sliding_window_pattern", "rope_local_base_freq", "query_pre_attn_scalar",
    "attn_logit_softcapping", "final_logit_softcapping", "use_bidirectional_attention",
    "original_max_position_embeddings", "no_rope_layers", "no_rope_layer_interval",
    "attention_chunk_size", "attn_scale", "floor_scale", "attn_temperature_tuning",
    "use_qk_norm", "interleave_moe_layer_step", "moe_layers", "num_local_experts",
    "num_experts_per_tok", "intermediate_size_mlp",
    # deepseek_v3, bert
    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "n_group", "topk_group", "n_routed_experts", "routed_scaling_factor", "norm_topk_prob",
    "first_k_dense_replace", "num_nextn_predict_layers", "rope_interleave", "type_vocab_size",
    "is_decoder", "position_embedding_type",
]  # fmt: skip

HOSTILE = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**31 - 1, 2**63, 10**30, 10**300]),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e-300, -0.0, 1e300, 0.5, 1.5, 4.0]),
    st.sampled_from(["", "yarn", "llama3", "linear", "silu", "gelu_new", "full_attention"]),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from([1, "silu", "sliding_attention", "full_attention", None]), max_size=4),
    st.dictionaries(
        st.sampled_from(["rope_type", "factor", "rope_theta", "beta_fast", "beta_slow",
                         "original_max_position_embeddings", "low_freq_factor",
                         "high_freq_factor", "attention_factor", "mscale", "mscale_all_dim",
                         "partial_rotary_factor", "short_factor", "long_factor",
                         "sliding_attention", "full_attention"]),
        st.one_of(st.sampled_from(["yarn", "llama3", "linear", "default", "dynamic", "longrope"]),
                  st.lists(st.sampled_from([1.0, 2, 0, math.nan, math.inf, 10**400]),
                           min_size=1, max_size=3),
                  st.sampled_from([math.nan, math.inf, 0, -1, 1e-300, 1, 2, 4.0, 32, 10**30])),
        max_size=6,
    ),
)  # fmt: skip
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    return {name: write_family(root / name, config) for name, config in BASE.items()}


@st.composite
def configs(draw):
    family = draw(st.sampled_from(sorted(BASE)))
    config = dict(BASE[family])
    keys = sorted(set(config) - {"model_type"}) + EXTRA_KEYS
    for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)):
        config[key] = draw(HOSTILE)
    return family, config


@FUZZ
@given(case=configs())
def test_fuzzed_config_loads_finite_or_is_one_error(tmp_path_factory, folders, case):
    family, config = case
    folder = tmp_path_factory.mktemp("case")
    os.symlink(folders[family] / "model.safetensors", folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    try:
        model = load(folder)
        logits = model.run([1, 2, 3, 4]).logits
    except AttnlabError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 800, message
        return
    assert np.isfinite(logits).all(), (family, config)
