"""The decoder every rotary family shares (Llama, Mistral, Qwen2 and 3, Gemma 2 and 3, gpt-oss,
GPT-NeoX, OLMo 2, Phi-3, Llama 4, DeepSeek-V3).

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
points hold what is added to the residual stream. A missing pre-norm (OLMo 2 has only the
post-norms) passes x unchanged. A parallel block (GPT-NeoX) reads both branches from the same
x: x += attention(ln1(x)) + mlp(ln2(x)), with no hook_resid_mid (TransformerLens has none
there either). A norm weight given as a (weight, bias) pair is a LayerNorm, else an RMSNorm.

Inside attention, q and k may be normed before the rotary embedding (per head, or over the
whole projection: OLMo 2) or after it (Llama 4's weightless norm); a NoPE layer skips the
rotation, and Llama 4 scales its queries there by a temperature that grows with the position.
hook_q and hook_k hold q and k as attention receives them, after all of these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnlab.models._attend import attend_points
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Shape
from attnlab.models._layers import layer_norm, linear, rms_norm, softcap
from attnlab.models._rope import Rope
from attnlab.models.inside._points import Pass

__all__ = ["Block", "Decoder", "attention_weights", "output_head"]


@dataclass
class Block:
    """One layer: attention weights ``attn`` (q_proj, k_proj, v_proj, o_proj and their
    optional *_bias), norm weights ``norms`` (attn_in, mlp_in, optional attn_out, mlp_out,
    and q, k for q/k norms; a missing or None norm is no norm), the MLP as a function of
    (..., d_model), its window and sinks.

    Optional, per layer: ``rope`` (this layer's rotary, else the decoder's; ``rotary=False``:
    no rotation, a NoPE layer), ``qk_norm`` ("head": norm each head's q and k over d; "proj":
    over the whole projection before splitting into heads; "l2": a weightless norm after the
    rotary), ``chunk`` (attention within chunks of this many tokens), ``temperature``
    ((floor_scale, attn_scale): Llama 4's query scaling on NoPE layers), ``parallel``
    (attention and MLP both read the block's input).

    A family whose attention is not q/k/v projections (DeepSeek's latent attention) sets
    ``attention``: (layer index, x (B, N, d_model), cos, sin, Pass) -> (z (B, N, h, d_v)
    after hook_z, LayerAttention), cos and sin being this layer's rotary tables (N, r);
    ``attn`` then holds only o_proj (and o_bias)."""

    attn: dict
    norms: dict
    mlp: Callable[[np.ndarray], np.ndarray]
    window: int | None = None
    sinks: np.ndarray | None = None
    rope: Rope | None = None
    rotary: bool = True
    qk_norm: str | None = None
    chunk: int | None = None
    temperature: tuple[float, float] | None = None
    parallel: bool = False
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
    options: tuple[str, ...] = ()  # the run options (Pass.options) its blocks read ("mla")
    cache_heads: tuple[int, int] | None = (
        None  # (h_kv, d) of a key/value cache row, if not the shape's
    )

    learned_positions = False  # rotary: no hook_pos_embed

    def norm(self, x: np.ndarray, weight) -> np.ndarray:
        if weight is None:
            return x
        if isinstance(weight, tuple):  # (weight, bias): a LayerNorm (GPT-NeoX)
            return layer_norm(x, weight[0], weight[1], self.eps)
        return rms_norm(x, weight, self.eps, self.norm_offset)

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
        tables = {}  # id(rope) -> (cos, sin), each (N, r): one pair per distinct rotary
        layers = []
        for i in range(how.start, len(self.blocks)):
            rope = self.blocks[i].rope or self.rope
            if id(rope) not in tables:
                cos, sin = rope.tables(how.offset + n, dtype)  # (offset + N, r) each
                tables[id(rope)] = cos[how.offset :], sin[how.offset :]  # these tokens' rows
            x, layer = self._block(i, x, rope, tables[id(rope)], how)
            layers.append(layer)
        x = pt("ln_final.hook_normalized", self.normalize_final(x))
        return self.unembed(x), layers

    def normalize_final(self, x: np.ndarray) -> np.ndarray:
        return self.norm(x, self.final_norm)

    def out_weights(self, i: int) -> np.ndarray:
        """Layer ``i``'s output projection per head, (h, d, d_model): z_h · W[h] is head h's
        share of the attention output."""
        o = self.blocks[i].attn["o_proj"]  # (d_model, h · d)
        return o.T.reshape(self.shape.heads, -1, len(o))  # (h, d, d_model); d = d_v for MLA

    def out_bias(self, i: int) -> np.ndarray | None:
        return self.blocks[i].attn.get("o_bias")

    def attn_out_norm(self, i: int) -> np.ndarray | None:
        """The scale of Gemma 2's norm on the attention output (offset included), or None."""
        w = self.blocks[i].norms.get("attn_out")
        return None if w is None else w + self.norm_offset

    @property
    def rerun_past(self) -> int | None:
        """LongRoPE's switch (tokens), past which generation runs the whole text again."""
        return None if getattr(self.rope, "long", None) is None else int(self.rope.switch)

    def final_norm_parts(self) -> dict:
        if isinstance(self.final_norm, tuple):  # GPT-NeoX's LayerNorm
            weight, bias = self.final_norm
            return dict(kind="layer", weight=weight, bias=bias, eps=self.eps)
        return dict(kind="rms", weight=self.final_norm + self.norm_offset, bias=None, eps=self.eps)

    def unembed(self, normalized: np.ndarray) -> np.ndarray:
        """The logits (..., V) of the final norm's output (..., d_model), softcapped."""
        return softcap(linear(normalized, self.lm_head), self.final_softcap)  # (..., V)

    def _block(self, i: int, x, rope: Rope, cos_sin, how: Pass):
        """Layer ``i`` on the residual stream x (B, N, d_model): (new x, its attention)."""
        pt, p, block = how.points, f"blocks.{i}.", self.blocks[i]
        b, n, _ = x.shape
        x = pt(p + "hook_resid_pre", x)
        h = pt(p + "ln1.hook_normalized", self.norm(x, block.norms.get("attn_in")))
        z, layer = self._attention(i, h, block, rope, cos_sin, how)  # z (B, N, h, d)
        attn = linear(z.reshape(b, n, -1), block.attn["o_proj"], block.attn.get("o_bias"))
        attn = pt(p + "hook_attn_out", self.norm(attn, block.norms.get("attn_out")))
        if not block.parallel:
            x = pt(p + "hook_resid_mid", x + attn)
        h = pt(p + "ln2.hook_normalized", self.norm(x, block.norms.get("mlp_in")))
        mlp = pt(p + "hook_mlp_out", self.norm(block.mlp(h), block.norms.get("mlp_out")))
        return pt(p + "hook_resid_post", x + attn + mlp if block.parallel else x + mlp), layer

    def _qkv(self, x, block: Block, rope: Rope, cos_sin, offset: int):
        """q (B, h, N, d), k and v (B, h_kv, N, d) as attention receives them."""
        b, n, _ = x.shape
        s, w, norms = self.shape, block.attn, block.norms

        def heads(name: str, count: int) -> np.ndarray:
            y = linear(x, w[f"{name}_proj"], w.get(f"{name}_bias"))  # (B, N, count · d)
            if block.qk_norm == "proj" and name in norms:
                y = self.norm(y, norms[name])  # over all heads at once (OLMo 2)
            y = y.reshape(b, n, count, s.head_dim).transpose(0, 2, 1, 3)  # (B, count, N, d)
            return self.norm(y, norms[name]) if block.qk_norm == "head" and name in norms else y

        q, k, v = heads("q", s.heads), heads("k", s.kv_heads), heads("v", s.kv_heads)
        if block.rotary:
            q, k = rope.rotate(q, *cos_sin), rope.rotate(k, *cos_sin)  # (B, h or h_kv, N, d)
        if block.qk_norm == "l2":
            q, k = rms_norm(q, 1.0, self.eps), rms_norm(k, 1.0, self.eps)
        if block.temperature is not None:
            floor, scale = block.temperature
            positions = offset + np.arange(n, dtype=np.float64)  # (N,)
            grow = np.log1p(np.floor((positions + 1) / floor)) * scale + 1  # (N,)
            q = q * grow.astype(q.dtype)[:, None]  # (B, h, N, d)
        return q, k, v

    def _attention(self, i: int, x, block: Block, rope: Rope, cos_sin, how: Pass):
        if block.attention is not None:  # the family's own (DeepSeek's latent attention)
            return block.attention(i, x, *cos_sin, how)  # this layer's (cos, sin)
        q, k, v = self._qkv(x, block, rope, cos_sin, how.offset)
        options = dict(
            window=block.window, scale=self.scale, softcap=self.attn_softcap, sinks=block.sinks
        )
        if block.chunk is not None:
            options["chunk"] = block.chunk
        if how.kv is not None:
            return how.kv.attend(i, q, k, v, **options), None  # (B, N, h, d)
        return attend_points(
            q, k, v, how.points, f"blocks.{i}.attn.", weights=how.weights, keys=how.keys,
            **options,
        )  # fmt: skip
