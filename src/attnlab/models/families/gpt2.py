"""GPT-2: learned positions, pre-norm LayerNorm blocks, fused q/k/v, a gelu MLP, and the
output head tied to the token embedding.

Shape legend: B batch, N tokens, d_model hidden width, h heads, d = d_model / h, V vocabulary.

GPT-2 stores its projections as (in, out) (``Conv1D``), so x @ W directly. Tensor names:
transformer.{wte, wpe, h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f}
(some exports drop the ``transformer.`` prefix; both are read).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.models._attend import LayerAttention, attend
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._layers import activation, layer_norm

__all__ = ["GPT2", "build", "shape_of"]


def shape_of(cfg: Config) -> Shape:
    d_model, heads = cfg.int("n_embd"), cfg.int("n_head")
    if d_model % heads:
        raise cfg._bad("n_head", f"a divisor of n_embd={d_model}", heads)
    return Shape(
        layers=cfg.int("n_layer"),
        d_model=d_model,
        heads=heads,
        kv_heads=heads,
        head_dim=d_model // heads,
        vocab=cfg.int("vocab_size"),
        max_positions=cfg.int("n_positions"),
    )


@dataclass
class GPT2:
    shape: Shape
    w: dict  # tensor name (without the "transformer." prefix) -> array
    eps: float
    act: object
    scales: list[
        float
    ]  # per layer: 1/sqrt(d), over (layer + 1) with scale_attn_by_inverse_layer_idx

    def forward(self, ids: np.ndarray, weights: bool) -> tuple[np.ndarray, list[LayerAttention]]:
        """(logits (B, N, V), each layer's attention) for token ids (B, N)."""
        w, s = self.w, self.shape
        b, n = ids.shape
        x = w["wte.weight"][ids] + w["wpe.weight"][:n]  # (B, N, d_model)
        layers = []
        for i in range(s.layers):
            p = f"h.{i}."
            h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # (B, N, 3 d_model)
            q, k, v = (
                t.reshape(b, n, s.heads, s.head_dim).transpose(0, 2, 1, 3)  # (B, h, N, d)
                for t in np.split(qkv, 3, axis=-1)
            )
            out, layer = attend(q, k, v, scale=self.scales[i], weights=weights)
            out = out.transpose(0, 2, 1, 3).reshape(b, n, s.d_model)  # (B, N, d_model)
            x = x + (out @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"])
            h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            h = self.act(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])  # (B, N, d_ff)
            x = x + (h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"])
            layers.append(layer)
        x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return x @ w["wte.weight"].T, layers  # (B, N, V): the head is the embedding


def _tensors(shape: Shape, d_ff: int) -> dict[str, tuple[int, ...]]:
    dm = shape.d_model
    names = {"wte.weight": (shape.vocab, dm), "wpe.weight": (shape.max_positions, dm)}
    names |= {"ln_f.weight": (dm,), "ln_f.bias": (dm,)}
    for i in range(shape.layers):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            names |= {f"{p}{ln}.weight": (dm,), f"{p}{ln}.bias": (dm,)}
        names |= {
            p + "attn.c_attn.weight": (dm, 3 * dm),
            p + "attn.c_attn.bias": (3 * dm,),
            p + "attn.c_proj.weight": (dm, dm),
            p + "attn.c_proj.bias": (dm,),
            p + "mlp.c_fc.weight": (dm, d_ff),
            p + "mlp.c_fc.bias": (d_ff,),
            p + "mlp.c_proj.weight": (d_ff, dm),
            p + "mlp.c_proj.bias": (dm,),
        }
    return names


def build(cfg: Config, ck: Checkpoint) -> GPT2:
    shape = shape_of(cfg)
    d_ff = cfg.int("n_inner", 4 * shape.d_model)
    prefix = "transformer." if "transformer.wte.weight" in ck else ""
    w = {name: ck.get(prefix + name, size) for name, size in _tensors(shape, d_ff).items()}
    ck.skip(".attn.bias", ".attn.masked_bias")  # older exports' causal-mask buffers
    scale = shape.head_dim**-0.5 if cfg.get("scale_attn_weights", True) else 1.0
    by_layer = bool(cfg.get("scale_attn_by_inverse_layer_idx", False))
    return GPT2(
        shape=shape,
        w=w,
        eps=cfg.number("layer_norm_epsilon", 1e-5),
        act=activation(cfg, "activation_function", "gelu_new"),
        scales=[scale / (i + 1) if by_layer else scale for i in range(shape.layers)],
    )
