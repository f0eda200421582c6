"""GPT-2: learned positions, pre-norm LayerNorm blocks, fused q/k/v, a gelu MLP, and the
output head tied to the token embedding (unless config.json sets ``tie_word_embeddings: false``
and the checkpoint has its own ``lm_head.weight``: then that head).

Shape legend: B batch, N tokens, d_model hidden width, h heads, d = d_model / h, V vocabulary.

GPT-2 stores its projections as (in, out) (``Conv1D``), so x @ W directly. Tensor names:
transformer.{wte, wpe, h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f}
(some exports drop the ``transformer.`` prefix; both are read).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.models._attend import attend_points
from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config, Shape
from attnlab.models._layers import activation, layer_norm
from attnlab.models.inside._points import Pass

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

    head: np.ndarray | None = None  # (V, d_model): lm_head.weight when not tied to wte

    learned_positions = True  # hook_pos_embed

    @property
    def lm_head(self) -> np.ndarray:
        """The output head (V, d_model): the token embedding unless the checkpoint unties it."""
        return self.w["wte.weight"] if self.head is None else self.head

    def forward(self, ids: np.ndarray, how: Pass | None = None):
        """(logits (B, N, V), each run layer's attention) for token ids (B, N), every
        activation through its named point (``how.points``)."""
        how = how or Pass()
        w, pt = self.w, how.points
        n = ids.shape[1]
        if how.start == 0:
            x = pt("hook_embed", w["wte.weight"][ids])  # (B, N, d_model)
            pos = w["wpe.weight"][how.offset : how.offset + n][None]  # (1, N, d_model), a view
            if pt.active:  # a hook changing it in place must not change the weights
                pos = pt("hook_pos_embed", pos.copy())
            x = x + pos  # (B, N, d_model); pos (1, N, d_model) as TransformerLens keeps it
        else:
            x = how.resid
        layers = []
        for i in range(how.start, self.shape.layers):
            x, layer = self._block(i, x, how)
            layers.append(layer)
        x = pt("ln_final.hook_normalized", self.normalize_final(x))
        return self.unembed(x), layers

    def normalize_final(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.w["ln_f.weight"], self.w["ln_f.bias"], self.eps)

    def out_weights(self, i: int) -> np.ndarray:
        """Layer ``i``'s output projection per head, (h, d, d_model)."""
        s = self.shape
        return self.w[f"h.{i}.attn.c_proj.weight"].reshape(s.heads, s.head_dim, s.d_model)

    def out_bias(self, i: int) -> np.ndarray:
        return self.w[f"h.{i}.attn.c_proj.bias"]

    def attn_out_norm(self, i: int) -> None:
        return None

    def final_norm_parts(self) -> dict:
        w = self.w
        return dict(kind="layer", weight=w["ln_f.weight"], bias=w["ln_f.bias"], eps=self.eps)

    def unembed(self, normalized: np.ndarray) -> np.ndarray:
        """The logits (..., V) of the final norm's output (..., d_model)."""
        return normalized @ self.lm_head.T  # (..., V)

    def _block(self, i: int, x: np.ndarray, how: Pass):
        """Layer ``i`` on the residual stream x (B, N, d_model): (new x, its attention)."""
        w, s, pt = self.w, self.shape, how.points
        p, name = f"h.{i}.", f"blocks.{i}."
        b, n, _ = x.shape
        x = pt(name + "hook_resid_pre", x)
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
        h = pt(name + "ln1.hook_normalized", h)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # (B, N, 3 d_model)
        q, k, v = (
            t.reshape(b, n, s.heads, s.head_dim).transpose(0, 2, 1, 3)  # (B, h, N, d)
            for t in np.split(qkv, 3, axis=-1)
        )
        if how.kv is not None:
            z, layer = how.kv.attend(i, q, k, v, window=None, scale=self.scales[i]), None
        else:
            z, layer = attend_points(
                q, k, v, pt, name + "attn.", weights=how.weights, keys=how.keys,
                scale=self.scales[i], window=None,
            )  # fmt: skip
        out = z.reshape(b, n, s.d_model)  # (B, N, d_model): the heads side by side
        attn = pt(
            name + "hook_attn_out", out @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        )
        x = pt(name + "hook_resid_mid", x + attn)
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
        h = pt(name + "ln2.hook_normalized", h)
        h = self.act(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])  # (B, N, d_ff)
        mlp = pt(name + "hook_mlp_out", h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"])
        return pt(name + "hook_resid_post", x + mlp), layer


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
    scale = shape.head_dim**-0.5 if cfg.get("scale_attn_weights", True) else 1.0
    by_layer = bool(cfg.get("scale_attn_by_inverse_layer_idx", False))
    head = None
    if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" in ck:
        head = ck.get("lm_head.weight", (shape.vocab, shape.d_model))
    return GPT2(
        shape=shape,
        head=head,
        w=w,
        eps=cfg.number("layer_norm_epsilon", 1e-5),
        act=activation(cfg, "activation_function", "gelu_new"),
        scales=[scale / (i + 1) if by_layer else scale for i in range(shape.layers)],
    )
