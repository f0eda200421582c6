"""Gemma 3 (text): Gemma 2's decoder (four (1 + w) norms per block, embeddings times
sqrt(d_model), scores times 1/sqrt(``query_pre_attn_scalar``), the final logits soft-capped
when ``final_logit_softcapping`` is set) with a
(1 + w) RMSNorm on each head's q and k before the rotary embedding, and two rotary
embeddings: local (sliding-window) layers turn with ``rope_local_base_freq`` and no scaling,
global layers with ``rope_theta`` and ``rope_scaling``. transformers 5 writes both as
``rope_parameters`` = {"sliding_attention": {...}, "full_attention": {...}}. Which layers are
local: ``layer_types``, else every layer but each ``sliding_window_pattern``-th (default 6).

Gemma 3 replaced Gemma 2's cap on the attention scores by the q/k norms: its config.json keeps
an ``attn_logit_softcapping`` key, but the model never applies it (transformers does not
either), so neither does attnlab.

Shape legend: d_model hidden width, h query heads, h_kv key/value heads, d head width.

Tensor names: Gemma 2's, with model.layers.{i}.self_attn.{q_norm, k_norm}.weight (d,).
"""

from __future__ import annotations

import functools

from attnlab.errors import AttnlabError
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, shown
from attnlab.models._decoder import Block, Decoder, attention_weights, output_head
from attnlab.models._layers import activation, gated_mlp
from attnlab.models._rope import Rope, parameters
from attnlab.models.families import llama

__all__ = ["build", "ropes", "shape_of"]

shape_of = llama.shape_of


def ropes(cfg: Config, head_dim: int) -> dict[str, Rope]:
    """The rotary of each layer type, "sliding_attention" and "full_attention"."""
    parameters(cfg)  # rope_parameters and rope_scaling: each an object, or absent
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and ("full_attention" in params or "sliding_attention" in params):
        where = f"{cfg.path}'s rope_parameters"
        out = {}
        for kind in ("sliding_attention", "full_attention"):
            one = params.get(kind)
            if not isinstance(one, dict):
                raise AttnlabError(
                    f"expected {where}[{kind!r}] to be an object, but got {shown(one)} instead"
                )
            out[kind] = Rope(cfg, head_dim, params=one, where=f"{where}[{kind!r}]")
        return out
    full = dict(cfg.get("rope_scaling") or params or {})  # an older config.json
    full.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
    local = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 10_000.0)}
    return {
        "sliding_attention": Rope(cfg, head_dim, params=local, where=f"{cfg.path}"),
        "full_attention": Rope(cfg, head_dim, params=full, where=f"{cfg.path}'s rope_scaling"),
    }


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    rope = ropes(cfg, shape.head_dim)  # an option attnlab cannot run fails before any read
    if cfg.get("use_bidirectional_attention", False):
        raise cfg._bad("use_bidirectional_attention", "false (a causal decoder)", True)
    every = cfg.int("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
    default = [
        "sliding_attention" if (i + 1) % every else "full_attention" for i in range(shape.layers)
    ]
    kinds = cfg.layer_types(shape.layers, default)
    window = cfg.int("sliding_window", 4096) if "sliding_attention" in kinds else None
    act = activation(cfg, "hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
    bias = bool(cfg.get("attention_bias", False))
    d = (shape.d_model,)
    blocks = []
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        mlp = llama.mlp_weights(ck, f"{p}.mlp", cfg, shape, bias=False)
        norms = {
            "attn_in": ck.get(f"{p}.input_layernorm.weight", d),
            "attn_out": ck.get(f"{p}.post_attention_layernorm.weight", d),
            "mlp_in": ck.get(f"{p}.pre_feedforward_layernorm.weight", d),
            "mlp_out": ck.get(f"{p}.post_feedforward_layernorm.weight", d),
        } | llama.qk_norms(ck, f"{p}.self_attn", shape.head_dim, shape.head_dim)
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, bias, bias),
                norms=norms,
                mlp=functools.partial(gated_mlp, w=mlp, act=act),
                window=window if kind == "sliding_attention" else None,
                rope=rope[kind],
                qk_norm="head",
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, shape.d_model))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", d),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=True),
        rope=rope["full_attention"],
        eps=cfg.number("rms_norm_eps", 1e-6),
        scale=cfg.number("query_pre_attn_scalar", 256) ** -0.5,
        norm_offset=1.0,
        embed_scale=shape.d_model**0.5,
        final_softcap=cfg.number("final_logit_softcapping"),
    )
