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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._attend import LayerAttention, attend
from attnlab.models._config import Shape
from attnlab.models._layers import layer_norm, linear

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
    options: tuple[str, ...] = ("attention_mask", "token_type_ids")

    @property
    def output(self) -> str:
        return "last hidden state" if self.head is None else "masked-LM logits"

    def _keys(self, attention_mask, ids: np.ndarray) -> np.ndarray | None:
        if attention_mask is None:
            return None
        keys = _table("attention_mask", attention_mask, ids, 2).astype(bool)  # (B, N)
        empty = np.flatnonzero(~keys.any(-1))
        if empty.size:
            raise AttnlabError(
                "expected at least one real token (a 1) in each row of attention_mask, but "
                f"row {int(empty[0])} is all padding"
            )
        return None if keys.all() else keys

    def _ln(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    def forward(
        self, ids: np.ndarray, weights: bool, attention_mask=None, token_type_ids=None
    ) -> tuple[np.ndarray, list[LayerAttention]]:
        """(logits (B, N, V), or the last hidden state (B, N, d_model) without a head; each
        layer's attention) for token ids (B, N)."""
        b, n = ids.shape
        s, w = self.shape, self.w
        keys = self._keys(attention_mask, ids)
        types = (
            np.zeros_like(ids)
            if token_type_ids is None
            else _table("token_type_ids", token_type_ids, ids, self.types)
        )
        e = "embeddings."
        x = w[e + "word_embeddings.weight"][ids] + w[e + "token_type_embeddings.weight"][types]
        x = self._ln(
            x + w[e + "position_embeddings.weight"][:n], e + "LayerNorm"
        )  # (B, N, d_model)
        layers = []
        for i in range(s.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (
                self._dense(x, p + "attention.self." + name)  # (B, N, d_model)
                .reshape(b, n, s.heads, s.head_dim)
                .transpose(0, 2, 1, 3)  # (B, h, N, d)
                for name in ("query", "key", "value")
            )
            out, layer = attend(
                q, k, v, scale=s.head_dim**-0.5, weights=weights, causal=False, keys=keys
            )
            out = out.transpose(0, 2, 1, 3).reshape(b, n, s.d_model)  # (B, N, d_model)
            a = self._ln(
                x + self._dense(out, p + "attention.output.dense"), p + "attention.output.LayerNorm"
            )
            mid = self.act(self._dense(a, p + "intermediate.dense"))  # (B, N, d_ff)
            x = self._ln(a + self._dense(mid, p + "output.dense"), p + "output.LayerNorm")
            layers.append(layer)
        if self.head is None:
            return x, layers
        hd = self.head
        x = layer_norm(self.act(linear(x, hd["transform"], hd["transform_bias"])), hd["norm"],
                       hd["norm_bias"], self.eps)  # fmt: skip
        return linear(x, hd["decoder"], hd["bias"]), layers  # (B, N, V)
