"""The decoder every rotary family shares (Llama, Mistral, Qwen2, Gemma 2, gpt-oss,
DeepSeek-V3).

Shape legend: B batch, N tokens, d_model hidden width, h query heads, h_kv key/value heads,
d head width, V vocabulary.

Each family module reads its config.json and tensors into a ``Decoder``: the embedding, one
``Block`` per layer (its attention weights, norms, window, sinks, and its MLP as a function),
the final norm and the output head. The forward pass is written once, here:

    x = embed[ids] · embed_scale
    each layer: x += [attn_out norm] attention(attn_in norm(x))
                x += [mlp_out norm] mlp(mlp_in norm(x))
    logits = softcap(final norm(x) · lm_headᵀ)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnlab.models._attend import LayerAttention, attend
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Shape
from attnlab.models._layers import linear, rms_norm, softcap
from attnlab.models._rope import Rope

__all__ = ["Block", "Decoder", "attention_weights", "output_head"]


@dataclass
class Block:
    """One layer: attention weights ``attn`` (q_proj, k_proj, v_proj, o_proj and their
    optional *_bias), norm weights ``norms`` (attn_in, mlp_in and, for Gemma 2, attn_out,
    mlp_out), the MLP as a function of (..., d_model), its window and sinks. A family whose
    attention is not q/k/v projections (DeepSeek's latent attention) sets ``attention``:
    (x, cos, sin, weights, **options) -> (output (B, N, d_model), LayerAttention)."""

    attn: dict
    norms: dict
    mlp: Callable[[np.ndarray], np.ndarray]
    window: int | None = None
    sinks: np.ndarray | None = None
    attention: Callable | None = None


def attention_weights(
    ck: Checkpoint, prefix: str, shape: Shape, bias: bool, out_bias: bool
) -> dict:
    """q/k/v/o projections (and biases) of ``prefix`` (``model.layers.3.self_attn``)."""
    hd, kvd, dm = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.d_model
    w = {
        "q_proj": ck.get(f"{prefix}.q_proj.weight", (hd, dm)),
        "k_proj": ck.get(f"{prefix}.k_proj.weight", (kvd, dm)),
        "v_proj": ck.get(f"{prefix}.v_proj.weight", (kvd, dm)),
        "o_proj": ck.get(f"{prefix}.o_proj.weight", (dm, hd)),
    }
    if bias:
        for name, size in (("q", hd), ("k", kvd), ("v", kvd)):
            w[f"{name}_bias"] = ck.get(f"{prefix}.{name}_proj.bias", (size,))
    if out_bias:
        w["o_bias"] = ck.get(f"{prefix}.o_proj.bias", (dm,))
    return w


def output_head(
    ck: Checkpoint, cfg, shape: Shape, embed: np.ndarray, tied_default: bool
) -> np.ndarray:
    """lm_head.weight (V, d_model), or the embedding itself when the two are tied."""
    if cfg.get("tie_word_embeddings", tied_default) and "lm_head.weight" not in ck:
        return embed
    return ck.get("lm_head.weight", (shape.vocab, shape.d_model))


@dataclass
class Decoder:
    """A rotary decoder's weights and options; ``forward`` runs it."""

    shape: Shape
    embed: np.ndarray  # (V, d_model)
    blocks: list[Block]
    final_norm: np.ndarray  # (d_model,)
    lm_head: np.ndarray  # (V, d_model)
    rope: Rope
    eps: float
    scale: float
    norm_offset: float = 0.0  # Gemma's (1 + w) norm
    embed_scale: float | None = None  # Gemma's sqrt(d_model)
    attn_softcap: float | None = None
    final_softcap: float | None = None
    options: tuple[str, ...] = ()  # the run options its blocks' ``attention`` takes ("mla")

    def norm(self, x: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        return x if weight is None else rms_norm(x, weight, self.eps, self.norm_offset)

    def forward(
        self, ids: np.ndarray, weights: bool, **options
    ) -> tuple[np.ndarray, list[LayerAttention]]:
        """(logits (B, N, V), each layer's attention) for token ids (B, N); ``options`` (those
        named in ``self.options``) go to each block's own ``attention``."""
        _b, n = ids.shape
        dtype = self.embed.dtype
        x = self.embed[ids]  # (B, N, d_model)
        if self.embed_scale is not None:
            x = x * dtype.type(self.embed_scale)  # rounded to the dtype first, as Gemma does
        cos, sin = self.rope.tables(n, dtype)  # (N, d) each
        layers = []
        for block in self.blocks:
            h = self.norm(x, block.norms["attn_in"])
            if block.attention is not None:
                out, layer = block.attention(h, cos, sin, weights, **options)
            else:
                out, layer = self._attention(h, block, cos, sin, weights)
            x = x + self.norm(out, block.norms.get("attn_out"))
            mlp = block.mlp(self.norm(x, block.norms["mlp_in"]))
            x = x + self.norm(mlp, block.norms.get("mlp_out"))
            layers.append(layer)
        logits = linear(self.norm(x, self.final_norm), self.lm_head)  # (B, N, V)
        return softcap(logits, self.final_softcap), layers

    def _attention(self, x, block: Block, cos, sin, weights: bool):
        b, n, _ = x.shape
        s, w = self.shape, block.attn

        def heads(name: str, count: int) -> np.ndarray:
            y = linear(x, w[f"{name}_proj"], w.get(f"{name}_bias"))  # (B, N, count · d)
            return y.reshape(b, n, count, s.head_dim).transpose(0, 2, 1, 3)  # (B, count, N, d)

        q = Rope.rotate(heads("q", s.heads), cos, sin)  # (B, h, N, d)
        k = Rope.rotate(heads("k", s.kv_heads), cos, sin)  # (B, h_kv, N, d)
        v = heads("v", s.kv_heads)
        out, layer = attend(
            q, k, v, window=block.window, scale=self.scale, softcap=self.attn_softcap,
            sinks=block.sinks, weights=weights,
        )  # fmt: skip
        out = out.transpose(0, 2, 1, 3).reshape(b, n, s.heads * s.head_dim)  # (B, N, h · d)
        return linear(out, w["o_proj"], w.get("o_bias")), layer
