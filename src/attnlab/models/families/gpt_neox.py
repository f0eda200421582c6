"""GPT-NeoX (Pythia): LayerNorms with biases, rotary on the first ``rotary_pct`` of each head
(transformers 5: ``rope_parameters['partial_rotary_factor']``), q, k and v in one projection
laid out head by head (head j's q, k and v are rows 3dj .. 3dj + 3d of ``query_key_value``),
biases on it and on the output (``attention_bias``), a plain MLP, and by default a parallel
block: x += attention(ln_1(x)) + mlp(ln_2(x)); with ``use_parallel_residual`` false, the
usual x += attention(ln_1(x)), then x += mlp(ln_2(x)).

Shape legend: d_model hidden width, h heads, d = d_model / h head width, d_ff MLP width.

Tensor names: gpt_neox.embed_in, gpt_neox.layers.{i}.{input_layernorm,
attention.query_key_value, attention.dense, post_attention_layernorm, mlp.dense_h_to_4h,
mlp.dense_4h_to_h}, gpt_neox.final_layer_norm, embed_out.
"""

from __future__ import annotations

import functools

import numpy as np

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._decoder import Block, Decoder
from attnlab.models._layers import activation, linear
from attnlab.models._rope import Rope, parameters

__all__ = ["build", "shape_of"]


def shape_of(cfg: Config) -> Shape:
    d_model, heads = cfg.int("hidden_size"), cfg.int("num_attention_heads")
    if d_model % heads:
        raise cfg._bad("num_attention_heads", f"a divisor of hidden_size={d_model}", heads)
    return Shape(
        layers=cfg.int("num_hidden_layers"),
        d_model=d_model,
        heads=heads,
        kv_heads=heads,
        head_dim=d_model // heads,
        vocab=cfg.int("vocab_size"),
        max_positions=None,  # rotary positions have no learned table to run out of
    )


def _rope(cfg: Config, head_dim: int) -> Rope:
    parameters(cfg)  # rope_parameters and rope_scaling: each an object, or absent
    if cfg.get("rope_parameters") is not None:
        return Rope(cfg, head_dim)
    # An older config.json: rotary_pct and rotary_emb_base beside any rope_scaling.
    params = dict(cfg.get("rope_scaling") or {})
    params.setdefault("rope_theta", cfg.get("rotary_emb_base", cfg.get("rope_theta", 10000.0)))
    params.setdefault("partial_rotary_factor", cfg.get("rotary_pct", 0.25))
    return Rope(cfg, head_dim, params=params, where=f"{cfg.path}")


def _mlp(x: np.ndarray, w: dict, act) -> np.ndarray:
    """dense_4h_to_h(act(dense_h_to_4h(x))), (..., d_model) -> (..., d_model)."""
    return linear(act(linear(x, w["up"], w["up_bias"])), w["down"], w["down_bias"])


def _attention(ck: Checkpoint, p: str, shape: Shape, bias: bool) -> dict:
    h, d, dm = shape.heads, shape.head_dim, shape.d_model
    qkv = ck.get(f"{p}.query_key_value.weight", (3 * dm, dm)).reshape(h, 3, d, dm)
    w = {
        name: qkv[:, i].reshape(h * d, dm) for i, name in enumerate(("q_proj", "k_proj", "v_proj"))
    }
    w["o_proj"] = ck.get(f"{p}.dense.weight", (dm, dm))
    if bias:
        qkv_bias = ck.get(f"{p}.query_key_value.bias", (3 * dm,)).reshape(h, 3, d)
        w |= {f"{n}_bias": qkv_bias[:, i].reshape(h * d) for i, n in enumerate("qkv")}
        w["o_bias"] = ck.get(f"{p}.dense.bias", (dm,))
    return w


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    shape = shape_of(cfg)
    rope = _rope(cfg, shape.head_dim)  # an option attnlab cannot run fails before any read
    act = activation(cfg, "hidden_act", "gelu")
    parallel = bool(cfg.get("use_parallel_residual", True))
    bias = bool(cfg.get("attention_bias", True))
    dm, d_ff = shape.d_model, cfg.int("intermediate_size", 4 * shape.d_model)

    def norm(name: str) -> tuple:
        return ck.get(f"{name}.weight", (dm,)), ck.get(f"{name}.bias", (dm,))

    blocks = []
    for i in range(shape.layers):
        p = f"gpt_neox.layers.{i}"
        mlp = {
            "up": ck.get(f"{p}.mlp.dense_h_to_4h.weight", (d_ff, dm)),
            "up_bias": ck.get(f"{p}.mlp.dense_h_to_4h.bias", (d_ff,)),
            "down": ck.get(f"{p}.mlp.dense_4h_to_h.weight", (dm, d_ff)),
            "down_bias": ck.get(f"{p}.mlp.dense_4h_to_h.bias", (dm,)),
        }
        blocks.append(
            Block(
                attn=_attention(ck, f"{p}.attention", shape, bias),
                norms={
                    "attn_in": norm(f"{p}.input_layernorm"),
                    "mlp_in": norm(f"{p}.post_attention_layernorm"),
                },
                mlp=functools.partial(_mlp, w=mlp, act=act),
                parallel=parallel,
            )
        )
    embed = ck.get("gpt_neox.embed_in.weight", (shape.vocab, dm))
    tied = cfg.get("tie_word_embeddings", False) and "embed_out.weight" not in ck
    return Decoder(
        shape=shape,
        embed=embed,
        blocks=blocks,
        final_norm=norm("gpt_neox.final_layer_norm"),
        lm_head=embed if tied else ck.get("embed_out.weight", (shape.vocab, dm)),
        rope=rope,
        eps=cfg.number("layer_norm_eps", 1e-5),
        scale=shape.head_dim**-0.5,
    )
