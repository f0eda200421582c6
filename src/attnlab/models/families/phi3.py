"""Phi-3: the Llama decoder with q, k and v in one projection (``qkv_proj``: the h·d rows of q,
then h_kv·d of k, then h_kv·d of v) and the MLP's gate and up in one (``gate_up_proj``: gate's
d_ff rows, then up's), a sliding window on every layer when ``sliding_window`` is set, rotary
on the first ``partial_rotary_factor`` of each head, and the ``longrope`` schedule (docs in
``_rope.py``; older config.json files call it "su", or "yarn", which Phi-3 also reads as
LongRoPE). The fused weights are split into views on load, so the shared decoder runs them.

Shape legend: d_model hidden width, h query heads, h_kv key/value heads, d head width,
d_ff MLP width.

Tensor names: model.embed_tokens, model.layers.{i}.{input_layernorm, self_attn.{qkv_proj,
o_proj}, post_attention_layernorm, mlp.{gate_up_proj, down_proj}}, model.norm, lm_head.
"""

from __future__ import annotations

import functools

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Block, Decoder, output_head
from attnlab.models._layers import activation, gated_mlp
from attnlab.models._rope import Rope, parameters
from attnlab.models.families import llama

__all__ = ["build", "shape_of"]

shape_of = llama.shape_of


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    params, key = parameters(cfg)
    if params.get("rope_type", params.get("type")) in ("su", "yarn"):
        params["rope_type"] = "longrope"  # Phi-3's older names for it
    # an option attnlab cannot run fails before any tensor is read
    rope = Rope(cfg, shape.head_dim, params=params, where=f"{cfg.path}'s {key}")
    act = activation(cfg, "hidden_act", "silu")
    window = cfg.get("sliding_window")
    window = None if window is None else cfg.int("sliding_window")
    hd, kvd, dm = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.d_model
    d_ff = cfg.int("intermediate_size")
    blocks = []
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        qkv = ck.get(f"{p}.self_attn.qkv_proj.weight", (hd + 2 * kvd, dm))
        gate_up = ck.get(f"{p}.mlp.gate_up_proj.weight", (2 * d_ff, dm))
        mlp = {
            "gate_proj": gate_up[:d_ff],  # (d_ff, d_model), a view
            "up_proj": gate_up[d_ff:],
            "down_proj": ck.get(f"{p}.mlp.down_proj.weight", (dm, d_ff)),
        }
        blocks.append(
            Block(
                attn={
                    "q_proj": qkv[:hd],  # (h·d, d_model), a view
                    "k_proj": qkv[hd : hd + kvd],
                    "v_proj": qkv[hd + kvd :],
                    "o_proj": ck.get(f"{p}.self_attn.o_proj.weight", (dm, hd)),
                },
                norms={
                    "attn_in": ck.get(f"{p}.input_layernorm.weight", (dm,)),
                    "mlp_in": ck.get(f"{p}.post_attention_layernorm.weight", (dm,)),
                },
                mlp=functools.partial(gated_mlp, w=mlp, act=act),
                window=window,
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
