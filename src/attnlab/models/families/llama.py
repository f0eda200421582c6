"""Llama (1, 2, 3): pre-norm RMSNorm blocks, rotary positions (Llama 3's schedule too),
grouped-query attention and a SwiGLU MLP. Mistral and Qwen2 are this decoder with a sliding
window and with q/k/v biases (``mistral.py``, ``qwen2.py``).

Tensor names: model.embed_tokens, model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head.
"""

from __future__ import annotations

import functools

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._decoder import Block, Decoder, attention_weights, output_head
from attnlab.models._layers import activation, gated_mlp
from attnlab.models._rope import Rope

__all__ = ["build", "decoder", "mlp_weights", "qk_norms", "shape_of"]


def shape_of(cfg: Config) -> Shape:
    heads, kv, head_dim = cfg.heads()
    return Shape(
        layers=cfg.int("num_hidden_layers"),
        d_model=cfg.int("hidden_size"),
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        vocab=cfg.int("vocab_size"),
        max_positions=None,  # rotary positions have no learned table to run out of
    )


def mlp_weights(ck: Checkpoint, prefix: str, cfg: Config, shape: Shape, bias: bool) -> dict:
    d_ff, dm = cfg.int("intermediate_size"), shape.d_model
    w = {
        "gate_proj": ck.get(f"{prefix}.gate_proj.weight", (d_ff, dm)),
        "up_proj": ck.get(f"{prefix}.up_proj.weight", (d_ff, dm)),
        "down_proj": ck.get(f"{prefix}.down_proj.weight", (dm, d_ff)),
    }
    if bias:
        w["gate_bias"] = ck.get(f"{prefix}.gate_proj.bias", (d_ff,))
        w["up_bias"] = ck.get(f"{prefix}.up_proj.bias", (d_ff,))
        w["down_bias"] = ck.get(f"{prefix}.down_proj.bias", (dm,))
    return w


def qk_norms(ck: Checkpoint, prefix: str, q_size: int, k_size: int) -> dict:
    """The q and k norm weights of ``prefix`` (``model.layers.3.self_attn``)."""
    return {
        "q": ck.get(f"{prefix}.q_norm.weight", (q_size,)),
        "k": ck.get(f"{prefix}.k_norm.weight", (k_size,)),
    }


def decoder(
    cfg: Config, ck: Checkpoint, *, windows: list, qkv_bias: bool, out_bias: bool,
    qk_norm: bool = False,
) -> Decoder:  # fmt: skip
    """The Llama decoder with each layer's window (None: causal) and attention biases; with
    ``qk_norm``, an RMSNorm on each head's q and k before the rotary (Qwen3)."""
    shape = shape_of(cfg)
    rope = Rope(cfg, shape.head_dim)  # an option attnlab cannot run fails before any tensor is read
    act = activation(cfg, "hidden_act", "silu")
    mlp_bias = bool(cfg.get("mlp_bias", False))
    blocks = []
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        mlp = mlp_weights(ck, f"{p}.mlp", cfg, shape, mlp_bias)
        norms = {
            "attn_in": ck.get(f"{p}.input_layernorm.weight", (shape.d_model,)),
            "mlp_in": ck.get(f"{p}.post_attention_layernorm.weight", (shape.d_model,)),
        }
        if qk_norm:
            norms |= qk_norms(ck, f"{p}.self_attn", shape.head_dim, shape.head_dim)
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, qkv_bias, out_bias),
                norms=norms,
                mlp=functools.partial(gated_mlp, w=mlp, act=act),
                window=windows[i],
                qk_norm="head" if qk_norm else None,
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, shape.d_model))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", (shape.d_model,)),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=False),
        rope=rope,
        eps=cfg.number("rms_norm_eps", 1e-6),
        scale=shape.head_dim**-0.5,
    )


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    bias = bool(cfg.get("attention_bias", False))
    layers = cfg.int("num_hidden_layers")
    return decoder(cfg, ck, windows=[None] * layers, qkv_bias=bias, out_bias=bias)
