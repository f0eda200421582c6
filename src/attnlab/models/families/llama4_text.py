"""Llama 4 (text): the Llama decoder with

- chunked local attention on the layers ``layer_types`` marks "chunked_attention": query i
  sees the keys j <= i of its own chunk of ``attention_chunk_size`` tokens;
- NoPE layers: ``no_rope_layers[i]`` = 0 means layer i has no rotary embedding (1: it has);
  there, with ``attn_temperature_tuning``, each query at position p is multiplied by
  1 + attn_scale · ln(1 + floor((p + 1) / floor_scale)), so far queries score more sharply;
- on the rotary layers, with ``use_qk_norm``, q and k divided by their root mean square
  (no weight) after the rotation;
- a rotary embedding on interleaved pairs (x_{2i}, x_{2i+1}), the complex-number layout;
- a mixture-of-experts MLP on the layers ``moe_layers`` names (default every
  ``interleave_moe_layer_step``-th): the router picks the k experts with the largest logits,
  each chosen expert gets the token times sigmoid(its logit) and runs a SwiGLU
  (gate and up from one (d_model, 2 d_ff) weight: gate the first d_ff columns), and a shared
  SwiGLU expert adds its output for every token; other layers have a SwiGLU MLP of width
  ``intermediate_size_mlp``.

Shape legend: T = B · N tokens, d_model hidden width, E experts, k experts per token,
d_ff expert width.

Tensor names: Llama's attention and norms; model.layers.{i}.feed_forward.{router.weight (E,
d_model), experts.gate_up_proj (E, d_model, 2 d_ff), experts.down_proj (E, d_ff, d_model),
shared_expert.{gate,up,down}_proj} or, on dense layers, feed_forward.{gate,up,down}_proj.
"""

from __future__ import annotations

import functools

import numpy as np

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Block, Decoder, attention_weights, output_head
from attnlab.models._layers import activation, gated_mlp, linear
from attnlab.models._rope import Rope
from attnlab.models.families import llama

__all__ = ["build", "moe_mlp", "shape_of"]

shape_of = llama.shape_of


def moe_mlp(x: np.ndarray, w: dict, top_k: int, act) -> np.ndarray:
    """The mixture-of-experts MLP with its shared expert, (..., d_model) -> (..., d_model)."""
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])  # (T, d_model)
    logits = linear(x, w["router"])  # (T, E)
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]  # (T, k)
    gates = 1.0 / (1.0 + np.exp(-np.take_along_axis(logits, chosen, -1)))  # (T, k): sigmoid
    out = gated_mlp(x, w["shared"], act)  # (T, d_model)
    d_ff = w["down"].shape[1]
    for e in np.unique(chosen):
        tokens, slot = np.nonzero(chosen == e)  # the tokens routed to expert e
        both = (x[tokens] * gates[tokens, slot, None]) @ w["gate_up"][e]  # (t, 2 d_ff)
        y = (both[:, d_ff:] * act(both[:, :d_ff])) @ w["down"][e]  # (t, d_model)
        np.add.at(out, tokens, y)
    return out.reshape(*lead, -1)


def _flags(cfg: Config, layers: int) -> tuple[list[bool], list[str], set[int]]:
    """(rotary per layer, layer types, the MoE layers)."""
    every = cfg.int("no_rope_layer_interval", 4)
    rotary = cfg.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    if (
        not isinstance(rotary, list)
        or len(rotary) != layers
        or any(r not in (0, 1) for r in rotary)
    ):
        raise cfg._bad("no_rope_layers", f"a list of {layers} entries 0 or 1", rotary)
    kinds = cfg.get("layer_types", ["chunked_attention" if r else "full_attention" for r in rotary])
    ok = ("full_attention", "chunked_attention")
    if not isinstance(kinds, list) or len(kinds) != layers or any(k not in ok for k in kinds):
        raise cfg._bad("layer_types", f"a list of {layers} entries from {ok}", kinds)
    step = cfg.int("interleave_moe_layer_step", 1)
    moe = cfg.get("moe_layers", list(range(step - 1, layers, step)))
    if not isinstance(moe, list) or any(m not in range(layers) for m in moe):
        raise cfg._bad("moe_layers", f"a list of layer indices below {layers}", moe)
    return [bool(r) for r in rotary], kinds, set(moe)


def _feed_forward(ck: Checkpoint, p: str, cfg: Config, moe: bool, act, top_k: int, dm: int):
    if not moe:
        d_ff = cfg.int("intermediate_size_mlp")
        w = {
            name: ck.get(f"{p}.{name}.weight", size)
            for name, size in (("gate_proj", (d_ff, dm)), ("up_proj", (d_ff, dm)),
                               ("down_proj", (dm, d_ff)))
        }  # fmt: skip
        return functools.partial(gated_mlp, w=w, act=act)
    experts, d_ff = cfg.int("num_local_experts"), cfg.int("intermediate_size")
    w = {
        "router": ck.get(f"{p}.router.weight", (experts, dm)),
        "gate_up": ck.get(f"{p}.experts.gate_up_proj", (experts, dm, 2 * d_ff)),
        "down": ck.get(f"{p}.experts.down_proj", (experts, d_ff, dm)),
        "shared": {
            "gate_proj": ck.get(f"{p}.shared_expert.gate_proj.weight", (d_ff, dm)),
            "up_proj": ck.get(f"{p}.shared_expert.up_proj.weight", (d_ff, dm)),
            "down_proj": ck.get(f"{p}.shared_expert.down_proj.weight", (dm, d_ff)),
        },
    }
    return functools.partial(moe_mlp, w=w, top_k=top_k, act=act)


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    rope = Rope(cfg, shape.head_dim, interleaved=True)  # a bad option fails before any read
    rotary, kinds, moe = _flags(cfg, shape.layers)
    chunk = cfg.int("attention_chunk_size") if "chunked_attention" in kinds else None
    top_k = cfg.int("num_experts_per_tok", 1)
    if moe and top_k > cfg.int("num_local_experts"):
        raise cfg._bad("num_experts_per_tok", "at most num_local_experts", top_k)
    act = activation(cfg, "hidden_act", "silu")
    bias = bool(cfg.get("attention_bias", False))
    qk_norm = bool(cfg.get("use_qk_norm", True))
    tuning = bool(cfg.get("attn_temperature_tuning", True))
    temperature = (cfg.number("floor_scale", 8192), cfg.number("attn_scale", 0.1, positive=False))
    dm = shape.d_model
    blocks = []
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, bias, bias),
                norms={
                    "attn_in": ck.get(f"{p}.input_layernorm.weight", (dm,)),
                    "mlp_in": ck.get(f"{p}.post_attention_layernorm.weight", (dm,)),
                },
                mlp=_feed_forward(ck, f"{p}.feed_forward", cfg, i in moe, act, top_k, dm),
                rotary=rotary[i],
                qk_norm="l2" if qk_norm and rotary[i] else None,
                chunk=chunk if kinds[i] == "chunked_attention" else None,
                temperature=temperature if tuning and not rotary[i] else None,
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, dm))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", (dm,)),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=False),
        rope=rope,
        eps=cfg.number("rms_norm_eps", 1e-5),
        scale=shape.head_dim**-0.5,
    )
