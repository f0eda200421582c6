"""The encoder (BERT): bidirectional attention, padding, token types and absolute positions,
with each sublayer's LayerNorm after its residual sum (post-LN).

Shape legend: B batch, N tokens, d_model hidden width, h heads, d = d_model / h head width,
d_ff MLP width, V vocabulary, T token types.

    x = LayerNorm(word[ids] + type[token_type_ids] + position[0..N-1])
    each layer: a = LayerNorm(x + attention(x) W_O)          every query sees every key,
                x = LayerNorm(a + act(a W_1) W_2)             less the padded ones
    logits = (LayerNorm(act(x W_T)) W_decoderᵀ + b)  with the masked-LM head, else x itself

Padding (``attention_mask`` 0) hides a key from every query; the padded positions still get
a row of their own, as in transformers (their outputs are not meant to be read).

The named points are the decoders' (``inside._points``), placed for post-LN, where the
residual stream is each norm's output: ln1.hook_normalized = LayerNorm(x + attention), then
the same value as hook_resid_mid (the MLP's input); ln2.hook_normalized = LayerNorm(that +
MLP), then the same value as hook_resid_post (the layer's output, what the next layer and the
head read), so the logit lens reads a layer's output through the head. hook_embed is the word
embedding (token types are added to it unhooked); ln_final.hook_normalized is the last
layer's output. Logit attribution needs a sum of parts before one final norm, which post-LN
has not: it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._attend import attend_points
from attnlab.models._config import Shape
from attnlab.models._layers import layer_norm, linear
from attnlab.models.inside._points import Pass

__all__ = ["Encoder"]


def _table(name: str, value, ids: np.ndarray, high: int) -> np.ndarray:
    """``value`` as an integer (B, N) array like ids, each entry in [0, high)."""
    try:
        arr = np.asarray(value)
    except ValueError as exc:
        raise AttnlabError(f"expected {name} to be a rectangular array, but got {exc}") from None
    if arr.ndim == 1:
        arr = arr[None]  # (1, N)
    if arr.shape != ids.shape:
        raise AttnlabError(
            f"expected {name} of the ids' shape {ids.shape}, but got {arr.shape} instead"
        )
    if arr.dtype.kind not in "iub":
        raise AttnlabError(f"expected {name} of integers, but got dtype {arr.dtype} instead")
    if arr.min() < 0 or arr.max() >= high:
        raise AttnlabError(
            f"expected {name} in [0, {high}), but got {arr.min()}..{arr.max()} instead"
        )
    return arr.astype(np.int64)


@dataclass
class Encoder:
    """An encoder's weights; ``forward`` runs it. ``w`` holds BERT's names without the
    ``bert.`` prefix; ``head`` the masked-LM head (transform, norm, decoder, bias) or None."""

    shape: Shape
    w: dict
    eps: float
    act: object
    types: int  # T, type_vocab_size
    head: dict | None
    options: tuple[str, ...] = ("token_type_ids",)  # beside the attention_mask every family takes

    @property
    def output(self) -> str:
        return "last hidden state" if self.head is None else "masked-LM logits"

    learned_positions = True  # hook_pos_embed exists

    def _check_keys(self, keys: np.ndarray | None) -> None:
        empty = [] if keys is None else np.flatnonzero(~keys.any(-1))
        if len(empty):
            raise AttnlabError(
                "expected at least one real token (a 1) in each row of attention_mask, but "
                f"row {int(empty[0])} is all padding"
            )

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def forward(self, ids: np.ndarray, how: Pass | None = None):
        """(logits (B, N, V), or the last hidden state (B, N, d_model) without a head; each
        run layer's attention) for token ids (B, N), every activation through its named point.
        ``how.keys``: the real tokens (attention_mask); ``how.options``: token_type_ids."""
        how = how or Pass()
        if how.kv is not None:
            raise AttnlabError("expected no key/value cache for an encoder, but got one")
        self._check_keys(how.keys)
        pt, w, n = how.points, self.w, ids.shape[1]
        if how.start == 0:
            types = how.options.get("token_type_ids")
            types = (
                np.zeros_like(ids)
                if types is None
                else _table("token_type_ids", types, ids, self.types)
            )
            e = "embeddings."
            x = pt("hook_embed", w[e + "word_embeddings.weight"][ids])  # (B, N, d_model)
            x = x + w[e + "token_type_embeddings.weight"][types]
            pos = pt(
                "hook_pos_embed", w[e + "position_embeddings.weight"][:n][None]
            )  # (1, N, d_model)
            x = self._ln(x + pos, e + "LayerNorm")
        else:
            x = how.resid
        layers = []
        for i in range(how.start, self.shape.layers):
            x, layer = self._block(i, x, how)
            layers.append(layer)
        x = pt("ln_final.hook_normalized", self.normalize_final(x))
        return self.unembed(x), layers

    @property
    def lm_head(self):
        raise AttnlabError(
            "expected a model whose residual stream is a sum of parts before one final norm, "
            "but BERT normalises after every sublayer (post-LN): logit attribution does not "
            "apply; the logit lens does"
        )

    def normalize_final(self, x: np.ndarray) -> np.ndarray:
        return x  # post-LN: the last layer's output is already normalized

    def unembed(self, normalized: np.ndarray) -> np.ndarray:
        """The masked-LM logits (..., V) of the last hidden state, or that state itself."""
        hd = self.head
        if hd is None:
            return normalized
        x = self.act(linear(normalized, hd["transform"], hd["transform_bias"]))  # (..., d_model)
        x = layer_norm(x, hd["norm"], hd["norm_bias"], self.eps)
        return linear(x, hd["decoder"], hd["bias"])  # (..., V)

    def _block(self, i: int, x: np.ndarray, how: Pass):
        """Layer ``i`` on x (B, N, d_model): (new x, its attention)."""
        s, pt, p, name = self.shape, how.points, f"encoder.layer.{i}.", f"blocks.{i}."
        b, n, _ = x.shape
        x = pt(name + "hook_resid_pre", x)
        q, k, v = (
            self._dense(x, p + "attention.self." + part)  # (B, N, d_model)
            .reshape(b, n, s.heads, s.head_dim)
            .transpose(0, 2, 1, 3)  # (B, h, N, d)
            for part in ("query", "key", "value")
        )
        z, layer = attend_points(
            q, k, v, pt, name + "attn.", weights=how.weights, keys=how.keys,
            scale=s.head_dim**-0.5, window=None, causal=False,
        )  # fmt: skip
        attn = pt(
            name + "hook_attn_out", self._dense(z.reshape(b, n, -1), p + "attention.output.dense")
        )
        a = pt(name + "ln1.hook_normalized", self._ln(x + attn, p + "attention.output.LayerNorm"))
        a = pt(name + "hook_resid_mid", a)  # post-LN: the stream is the norm's output
        mid = self.act(self._dense(a, p + "intermediate.dense"))  # (B, N, d_ff)
        mlp = pt(name + "hook_mlp_out", self._dense(mid, p + "output.dense"))
        x = pt(name + "ln2.hook_normalized", self._ln(a + mlp, p + "output.LayerNorm"))
        return pt(name + "hook_resid_post", x), layer
