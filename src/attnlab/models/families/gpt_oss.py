"""gpt-oss: the rotary decoder (YaRN schedule) with attention sinks (one learned logit per
head in every softmax's divisor), biases on all four projections, sliding-window layers
alternating with full ones (``layer_types``), and a mixture-of-experts MLP.

Shape legend: T = B · N tokens, d_model hidden width, E experts, k experts per token,
d_ff expert width.

The MLP routes each token to the k experts with the highest router logits and weights their
outputs by a softmax over those k logits. Each expert is a clamped SwiGLU: with gate and up
read from one interleaved projection (gate the even columns, up the odd),
out = ((clip(up, ±limit) + 1) · g σ(α g)) W_down + b, g = min(gate, limit).
Tensor names: model.layers.{i}.self_attn.sinks, .mlp.router.{weight, bias},
.mlp.experts.{gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias} (stored (E, in, out));
the rest as Llama's. Quantised (MXFP4) checkpoints are refused: their tensors are not floats.
"""

from __future__ import annotations

import functools

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Block, Decoder, attention_weights, output_head
from attnlab.models._layers import linear
from attnlab.models._rope import Rope
from attnlab.models.families import llama

__all__ = ["build", "moe_mlp", "shape_of"]

shape_of = llama.shape_of


def moe_mlp(x: np.ndarray, w: dict, top_k: int, alpha: float, limit: float) -> np.ndarray:
    """The mixture-of-experts MLP, (..., d_model) -> (..., d_model)."""
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])  # (T, d_model)
    logits = linear(x, w["router"], w["router_bias"])  # (T, E)
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]  # (T, k)
    top = np.take_along_axis(logits, chosen, -1)  # (T, k)
    top = np.exp(top - top.max(-1, keepdims=True))
    gates = top / top.sum(-1, keepdims=True)  # (T, k): softmax over the chosen experts
    out = np.zeros_like(x)
    for e in np.unique(chosen):
        tokens, slot = np.nonzero(chosen == e)  # the tokens routed to expert e
        both = x[tokens] @ w["gate_up"][e] + w["gate_up_bias"][e]  # (t, 2 d_ff)
        gate = np.minimum(both[:, ::2], limit)
        up = np.clip(both[:, 1::2], -limit, limit)
        glu = gate / (1.0 + np.exp(-alpha * gate))  # g σ(α g)
        y = ((up + 1) * glu) @ w["down"][e] + w["down_bias"][e]  # (t, d_model)
        np.add.at(out, tokens, y * gates[tokens, slot, None])
    return out.reshape(*lead, -1)


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    if cfg.get("quantization_config") is not None:
        raise AttnlabError(
            f"expected unquantised weights, but {cfg.path} has a 'quantization_config': "
            "dequantise the checkpoint to bfloat16 first"
        )
    shape = shape_of(cfg)
    rope = Rope(cfg, shape.head_dim)  # an option attnlab cannot run fails before any tensor is read
    default = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(shape.layers)]
    kinds = cfg.layer_types(shape.layers, default)
    window = cfg.int("sliding_window", 128) if "sliding_attention" in kinds else None
    experts, d_ff, dm = cfg.int("num_local_experts"), cfg.int("intermediate_size"), shape.d_model
    top_k = cfg.int("num_experts_per_tok")
    if top_k > experts:
        raise cfg._bad("num_experts_per_tok", f"at most num_local_experts={experts}", top_k)
    bias = bool(cfg.get("attention_bias", True))
    blocks = []
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        e = f"{p}.mlp.experts"
        w = {
            "router": ck.get(f"{p}.mlp.router.weight", (experts, dm)),
            "router_bias": ck.get(f"{p}.mlp.router.bias", (experts,)),
            "gate_up": ck.get(f"{e}.gate_up_proj", (experts, dm, 2 * d_ff)),
            "gate_up_bias": ck.get(f"{e}.gate_up_proj_bias", (experts, 2 * d_ff)),
            "down": ck.get(f"{e}.down_proj", (experts, d_ff, dm)),
            "down_bias": ck.get(f"{e}.down_proj_bias", (experts, dm)),
        }
        mlp = functools.partial(
            moe_mlp, w=w, top_k=top_k, alpha=cfg.number("swiglu_alpha", 1.702),
            limit=cfg.number("swiglu_limit", 7.0),
        )  # fmt: skip
        blocks.append(
            Block(
                attn=attention_weights(ck, f"{p}.self_attn", shape, bias, bias),
                norms={
                    "attn_in": ck.get(f"{p}.input_layernorm.weight", (dm,)),
                    "mlp_in": ck.get(f"{p}.post_attention_layernorm.weight", (dm,)),
                },
                mlp=mlp,
                window=window if kind == "sliding_attention" else None,
                sinks=ck.get(f"{p}.self_attn.sinks", (shape.heads,)),
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
