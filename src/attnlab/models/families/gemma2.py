"""Gemma 2: the rotary decoder with four norms per block (around attention and around the MLP),
norms that multiply by (1 + w), embeddings scaled by sqrt(d_model), scores scaled by
1/sqrt(query_pre_attn_scalar) and soft-capped (``attn_logit_softcapping``), final logits
soft-capped too, and local (sliding-window) layers alternating with global ones
(``layer_types``).

Tensor names: model.embed_tokens, model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
post_attention_layernorm, pre_feedforward_layernorm, mlp.{gate,up,down}_proj,
post_feedforward_layernorm}, model.norm; the output head is the embedding.
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
    default = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(shape.layers)]
    kinds = cfg.layer_types(shape.layers, default)
    window = cfg.int("sliding_window", 4096) if "sliding_attention" in kinds else None
    act = activation(cfg, "hidden_activation", cfg.get("hidden_act", "gelu_pytorch_tanh"))
    bias = bool(cfg.get("attention_bias", False))
    d = (shape.d_model,)
    blocks = []
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        mlp = llama.mlp_weights(ck, f"{p}.mlp", cfg, shape, bias=False)
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, bias, bias),
                norms={
                    "attn_in": ck.get(f"{p}.input_layernorm.weight", d),
                    "attn_out": ck.get(f"{p}.post_attention_layernorm.weight", d),
                    "mlp_in": ck.get(f"{p}.pre_feedforward_layernorm.weight", d),
                    "mlp_out": ck.get(f"{p}.post_feedforward_layernorm.weight", d),
                },
                mlp=functools.partial(gated_mlp, w=mlp, act=act),
                window=window if kind == "sliding_attention" else None,
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, shape.d_model))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", d),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=True),
        rope=rope,
        eps=cfg.number("rms_norm_eps", 1e-6),
        scale=cfg.number("query_pre_attn_scalar", shape.head_dim) ** -0.5,
        norm_offset=1.0,
        embed_scale=shape.d_model**0.5,
        attn_softcap=cfg.number("attn_logit_softcapping"),
        final_softcap=cfg.number("final_logit_softcapping"),
    )
