"""OLMo 2: the Llama decoder with its norms moved after each branch (no norm before attention
or the MLP: x += norm(attention(x)), x += norm(mlp(x))), and an RMSNorm on q and on k over the
whole projection (all heads at once, before splitting into heads and the rotary embedding).

Shape legend: d_model hidden width, h query heads, h_kv key/value heads, d head width.

Tensor names: model.embed_tokens, model.layers.{i}.{self_attn.{q,k,v,o}_proj,
self_attn.q_norm (h·d,), self_attn.k_norm (h_kv·d,), post_attention_layernorm,
mlp.{gate,up,down}_proj, post_feedforward_layernorm}, model.norm, lm_head.
"""

from __future__ import annotations

import functools

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Block, Decoder, attention_weights, output_head
from attnlab.models._layers import activation, gated_mlp
from attnlab.models._rope import Rope
from attnlab.models.families import llama

__all__ = ["build", "shape_of"]

shape_of = llama.shape_of


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    rope = Rope(cfg, shape.head_dim)  # an option attnlab cannot run fails before any tensor is read
    act = activation(cfg, "hidden_act", "silu")
    bias = bool(cfg.get("attention_bias", False))
    d = (shape.d_model,)
    blocks = []
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        mlp = llama.mlp_weights(ck, f"{p}.mlp", cfg, shape, bias=False)
        q_size, k_size = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, bias, bias),
                norms={
                    "attn_out": ck.get(f"{p}.post_attention_layernorm.weight", d),
                    "mlp_out": ck.get(f"{p}.post_feedforward_layernorm.weight", d),
                }
                | llama.qk_norms(ck, f"{p}.self_attn", q_size, k_size),
                mlp=functools.partial(gated_mlp, w=mlp, act=act),
                qk_norm="proj",
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, shape.d_model))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", d),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=False),
        rope=rope,
        eps=cfg.number("rms_norm_eps", 1e-6),
        scale=shape.head_dim**-0.5,
    )
