"""The decoder every rotary family shares (Llama, Mistral, Qwen2, Gemma 2, gpt-oss).

Shape legend: B batch, N tokens, d_model hidden width, h query heads, h_kv key/value heads,
d head width, V vocabulary.

Each family module reads its config.json and tensors into a ``Decoder``: the embedding, one
``Block`` per layer (its attention weights, norms, window, sinks, and its MLP as a function),
the final norm and the output head. The forward pass is written once, here, every activation passing one named point
(``attnlab.models.inside._points``; the names in brackets, per layer under ``blocks.{l}.``):

    x = embed[ids] · embed_scale                               [hook_embed]
    each layer: [hook_resid_pre] x
                h = attn_in norm(x)                            [ln1.hook_normalized]
                z = attention(h)    [attn.hook_q, _k, _v, _attn_scores, _pattern, _z]
                x += attn_out norm(z · o_projᵀ + o_bias)       [hook_attn_out, hook_resid_mid]
                x += mlp_out norm(mlp(mlp_in norm(x)))         [ln2.hook_normalized,
                                                                hook_mlp_out, hook_resid_post]
    logits = softcap(final norm(x) · lm_headᵀ)                 [ln_final.hook_normalized]

Gemma 2's post-norms (attn_out, mlp_out) sit inside hook_attn_out and hook_mlp_out: those
points hold what is added to the residual stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnlab.models._attend import attend_points
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Shape
from attnlab.models._layers import linear, rms_norm, softcap
from attnlab.models._rope import Rope
from attnlab.models.inside._points import Pass

__all__ = ["Block", "Decoder", "attention_weights", "output_head"]


@dataclass
class Block:
    """One layer: attention weights ``attn`` (q_proj, k_proj, v_proj, o_proj and their
    optional *_bias), norm weights ``norms`` (attn_in, mlp_in and, for Gemma 2, attn_out,
    mlp_out), the MLP as a function of (..., d_model), its window and sinks."""

    attn: dict
    norms: dict
    mlp: Callable[[np.ndarray], np.ndarray]
    window: int | None = None
    sinks: np.ndarray | None = None


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

    learned_positions = False  # rotary: no hook_pos_embed

    def norm(self, x: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        return x if weight is None else rms_norm(x, weight, self.eps, self.norm_offset)

    def forward(self, ids: np.ndarray, how: Pass | None = None):
        """(logits (B, N, V), each run layer's attention) for token ids (B, N), every
        activation through its named point (``how.points``)."""
        how = how or Pass()
        pt, n = how.points, ids.shape[1]
        dtype = self.embed.dtype
        if how.start == 0:
            x = self.embed[ids]  # (B, N, d_model)
            if self.embed_scale is not None:
                x = x * dtype.type(self.embed_scale)  # rounded to the dtype first, as Gemma does
            x = pt("hook_embed", x)
        else:
            x = how.resid
        cos, sin = self.rope.tables(how.offset + n, dtype)  # (offset + N, d) each
        cos, sin = cos[how.offset :], sin[how.offset :]  # (N, d): these tokens' positions
        layers = []
        for i in range(how.start, len(self.blocks)):
            x, layer = self._block(i, x, cos, sin, how)
            layers.append(layer)
        x = pt("ln_final.hook_normalized", self.normalize_final(x))
        return self.unembed(x), layers

    def normalize_final(self, x: np.ndarray) -> np.ndarray:
        return self.norm(x, self.final_norm)

    def out_weights(self, i: int) -> np.ndarray:
        """Layer ``i``'s output projection per head, (h, d, d_model): z_h · W[h] is head h's
        share of the attention output."""
        o = self.blocks[i].attn["o_proj"]  # (d_model, h · d)
        return o.T.reshape(self.shape.heads, self.shape.head_dim, -1)  # (h, d, d_model)

    def out_bias(self, i: int) -> np.ndarray | None:
        return self.blocks[i].attn.get("o_bias")

    def attn_out_norm(self, i: int) -> np.ndarray | None:
        """The scale of Gemma 2's norm on the attention output (offset included), or None."""
        w = self.blocks[i].norms.get("attn_out")
        return None if w is None else w + self.norm_offset

    def final_norm_parts(self) -> dict:
        return dict(kind="rms", weight=self.final_norm + self.norm_offset, bias=None, eps=self.eps)

    def unembed(self, normalized: np.ndarray) -> np.ndarray:
        """The logits (..., V) of the final norm's output (..., d_model), softcapped."""
        return softcap(linear(normalized, self.lm_head), self.final_softcap)  # (..., V)

    def _block(self, i: int, x, cos, sin, how: Pass):
        """Layer ``i`` on the residual stream x (B, N, d_model): (new x, its attention)."""
        pt, p, block = how.points, f"blocks.{i}.", self.blocks[i]
        b, n, _ = x.shape
        x = pt(p + "hook_resid_pre", x)
        h = pt(p + "ln1.hook_normalized", self.norm(x, block.norms["attn_in"]))
        z, layer = self._attention(i, h, block, cos, sin, how)  # z (B, N, h, d)
        attn = linear(z.reshape(b, n, -1), block.attn["o_proj"], block.attn.get("o_bias"))
        attn = pt(p + "hook_attn_out", self.norm(attn, block.norms.get("attn_out")))
        x = pt(p + "hook_resid_mid", x + attn)
        h = pt(p + "ln2.hook_normalized", self.norm(x, block.norms["mlp_in"]))
        mlp = pt(p + "hook_mlp_out", self.norm(block.mlp(h), block.norms.get("mlp_out")))
        return pt(p + "hook_resid_post", x + mlp), layer

    def _attention(self, i: int, x, block: Block, cos, sin, how: Pass):
        b, n, _ = x.shape
        s, w = self.shape, block.attn

        def heads(name: str, count: int) -> np.ndarray:
            y = linear(x, w[f"{name}_proj"], w.get(f"{name}_bias"))  # (B, N, count · d)
            return y.reshape(b, n, count, s.head_dim).transpose(0, 2, 1, 3)  # (B, count, N, d)

        q = Rope.rotate(heads("q", s.heads), cos, sin)  # (B, h, N, d)
        k = Rope.rotate(heads("k", s.kv_heads), cos, sin)  # (B, h_kv, N, d)
        v = heads("v", s.kv_heads)
        options = dict(
            window=block.window, scale=self.scale, softcap=self.attn_softcap, sinks=block.sinks
        )
        if how.kv is not None:
            return how.kv.attend(i, q, k, v, **options), None  # (B, N, h, d)
        return attend_points(
            q, k, v, how.points, f"blocks.{i}.attn.", weights=how.weights, keys=how.keys,
            **options,
        )  # fmt: skip
