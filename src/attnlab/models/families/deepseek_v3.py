"""DeepSeek-V3: the rotary decoder with multi-head latent attention (``_mla.py``) and, past the
first ``first_k_dense_replace`` layers, a mixture of experts with shared experts (``_moe.py``).

Shape legend: d_model hidden width, h heads, r = kv_lora_rank, r_q = q_lora_rank,
d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim, E routed experts,
d_ff the dense MLP's width, d_e an expert's width.

The rotary embedding turns only the d_r columns of each query and the one shared rotary key;
with ``rope_interleave`` (the default) those columns hold their pairs side by side. Under
YaRN with ``mscale_all_dim`` the softmax scale d_qk^-1/2 is multiplied by mscale², as
DeepSeek's reference does (``scale_of``). ``run(ids, mla="absorbed")`` computes each layer's
attention in the absorbed form instead of the naive one.

Tensor names: model.layers.{i}.self_attn.{q_proj | q_a_proj, q_a_layernorm, q_b_proj,
kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}; .mlp.{gate_proj, up_proj, down_proj}
(dense layers) or .mlp.{gate.weight, gate.e_score_correction_bias,
experts.{e}.{gate,up,down}_proj, shared_experts.{gate,up,down}_proj}; the rest as Llama's.
"""

from __future__ import annotations

import functools
import math

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._decoder import Block, Decoder, output_head
from attnlab.models._layers import activation, gated_mlp
from attnlab.models._mla import MLA
from attnlab.models._moe import DeepSeekMoE
from attnlab.models._rope import Rope, parameters

__all__ = ["build", "scale_of", "shape_of"]


def shape_of(cfg: Config) -> Shape:
    """h heads (each its own key and value in the naive form) of width d_n + d_r."""
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        cfg.int(key)
    if cfg.get("q_lora_rank") is not None:
        cfg.int("q_lora_rank")
    heads = cfg.int("num_attention_heads")
    return Shape(
        layers=cfg.int("num_hidden_layers"),
        d_model=cfg.int("hidden_size"),
        heads=heads,
        kv_heads=heads,
        head_dim=cfg.int("qk_nope_head_dim") + cfg.int("qk_rope_head_dim"),
        vocab=cfg.int("vocab_size"),
        max_positions=None,
    )


def scale_of(cfg: Config, head_dim: int) -> float:
    """d_qk^-1/2, times mscale(factor, mscale_all_dim)² under a scaled rotary schedule."""
    params, _key = parameters(cfg)
    scale = head_dim**-0.5
    m_all = params.get("mscale_all_dim")
    if params.get("rope_type", params.get("type", "default")) != "default" and m_all:
        factor = float(params["factor"])
        mscale = 1.0 if factor <= 1 else 0.1 * float(m_all) * math.log(factor) + 1.0
        scale *= mscale * mscale
    return scale


def _mla(ck: Checkpoint, cfg: Config, p: str, shape: Shape, scale: float) -> MLA:
    h, dm = shape.heads, shape.d_model
    r, d_n, d_r, d_v = (
        cfg.int(k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    )
    bias = bool(cfg.get("attention_bias", False))
    w = {
        "kv_a_proj": ck.get(f"{p}.kv_a_proj_with_mqa.weight", (r + d_r, dm)),
        "kv_a_norm": ck.get(f"{p}.kv_a_layernorm.weight", (r,)),
        "kv_b_proj": ck.get(f"{p}.kv_b_proj.weight", (h * (d_n + d_v), r)),
        "o_proj": ck.get(f"{p}.o_proj.weight", (dm, h * d_v)),
    }
    if cfg.get("q_lora_rank") is None:
        w["q_proj"] = ck.get(f"{p}.q_proj.weight", (h * (d_n + d_r), dm))
    else:
        r_q = cfg.int("q_lora_rank")
        w["q_a_proj"] = ck.get(f"{p}.q_a_proj.weight", (r_q, dm))
        w["q_a_norm"] = ck.get(f"{p}.q_a_layernorm.weight", (r_q,))
        w["q_b_proj"] = ck.get(f"{p}.q_b_proj.weight", (h * (d_n + d_r), r_q))
        if bias:
            w["q_a_bias"] = ck.get(f"{p}.q_a_proj.bias", (r_q,))
    if bias:
        w["kv_a_bias"] = ck.get(f"{p}.kv_a_proj_with_mqa.bias", (r + d_r,))
        w["o_bias"] = ck.get(f"{p}.o_proj.bias", (dm,))
    interleave = bool(cfg.get("rope_interleave", True))
    return MLA(w, h, d_n, d_r, d_v, r, scale, interleave)


def _gated(ck: Checkpoint, p: str, d_ff: int, dm: int) -> dict:
    return {
        "gate_proj": ck.get(f"{p}.gate_proj.weight", (d_ff, dm)),
        "up_proj": ck.get(f"{p}.up_proj.weight", (d_ff, dm)),
        "down_proj": ck.get(f"{p}.down_proj.weight", (dm, d_ff)),
    }


def _moe(ck: Checkpoint, cfg: Config, p: str, dm: int, act) -> DeepSeekMoE:
    experts, groups = cfg.int("n_routed_experts"), cfg.int("n_group", 1)
    if experts % groups:
        raise cfg._bad("n_group", f"a divisor of n_routed_experts={experts}", groups)
    top_groups = cfg.int("topk_group", groups)
    if top_groups > groups:
        raise cfg._bad("topk_group", f"at most n_group={groups}", top_groups)
    top_k = cfg.int("num_experts_per_tok")
    if top_k > top_groups * (experts // groups):
        raise cfg._bad(
            "num_experts_per_tok", f"at most the {top_groups * experts // groups} experts "
            "of the topk_group groups kept", top_k,
        )  # fmt: skip
    d_e = cfg.int("moe_intermediate_size")
    return DeepSeekMoE(
        router=ck.get(f"{p}.gate.weight", (experts, dm)),
        bias=ck.get(f"{p}.gate.e_score_correction_bias", (experts,)),
        experts=[_gated(ck, f"{p}.experts.{e}", d_e, dm) for e in range(experts)],
        shared=_gated(ck, f"{p}.shared_experts", d_e * cfg.int("n_shared_experts", 1), dm),
        act=act,
        top_k=top_k,
        groups=groups,
        top_groups=top_groups,
        norm_topk=bool(cfg.get("norm_topk_prob", True)),
        scaling=cfg.number("routed_scaling_factor", 1.0),
    )


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    rope = Rope(cfg, cfg.int("qk_rope_head_dim"))  # an option attnlab cannot run fails first
    scale = scale_of(cfg, shape.head_dim)
    act = activation(cfg, "hidden_act", "silu")
    dense = cfg.int("first_k_dense_replace", 0, low=0)
    dm = shape.d_model
    blocks = []
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        mla = _mla(ck, cfg, f"{p}.self_attn", shape, scale)
        if i < dense:
            w = _gated(ck, f"{p}.mlp", cfg.int("intermediate_size"), dm)
            mlp = functools.partial(gated_mlp, w=w, act=act)
        else:
            mlp = _moe(ck, cfg, f"{p}.mlp", dm, act)
        blocks.append(
            Block(
                attn={"o_proj": mla.w["o_proj"], "o_bias": mla.w.get("o_bias")},
                norms={
                    "attn_in": ck.get(f"{p}.input_layernorm.weight", (dm,)),
                    "mlp_in": ck.get(f"{p}.post_attention_layernorm.weight", (dm,)),
                },
                mlp=mlp,
                attention=mla,
            )
        )
    embed = ck.get("model.embed_tokens.weight", (shape.vocab, dm))
    mtp = cfg.int("num_nextn_predict_layers", 0, low=0)  # multi-token prediction: not run
    # each layer holds a tensor of its own: past len(ck) layers there is nothing to skip (and a
    # config's 2^31 would otherwise make 2^31 prefixes)
    ck.skip_under(*(f"model.layers.{shape.layers + j}." for j in range(min(mtp, len(ck)))))
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=ck.get("model.norm.weight", (dm,)),
        lm_head=output_head(ck, cfg, shape, embed, tied_default=False),
        rope=rope,
        eps=cfg.number("rms_norm_eps", 1e-6),
        scale=scale,
        options=("mla",),
        cache_heads=(1, cfg.int("kv_lora_rank") + cfg.int("qk_rope_head_dim")),  # the latent
    )
