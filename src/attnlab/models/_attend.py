"""One layer's attention through attnlab's own ``attention``, kept for reading back.

Shape legend: B batch, h query heads, h_kv key/value heads, g = h / h_kv heads per group,
N tokens (queries = keys), d head width (d_v the value width, when it differs).

Grouped-query attention never copies k or v per head: q (B, h, N, d) is viewed as
(B, h_kv, g, N, d) against k and v of shape (B, h_kv, 1, N, d), and attnlab broadcasts the
group axis. Query head j uses key/value head j // g, as in every Hugging Face model.
A decoder's layer is causal (or sliding-window); an encoder's (BERT) sees every key, less
the padding its ``attention_mask`` names (``keys``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import attnlab as al
from attnlab.errors import AttnlabError

__all__ = ["LayerAttention", "attend"]


@dataclass
class LayerAttention:
    """What one layer's attention was given, and (once asked) its weights.

    Attributes:
        q: queries after the rotary embedding (if any), (B, h, N, d).
        k, v: keys (after the rotary embedding) and values, (B, h_kv, N, d).
        window: the sliding window (keys per query, itself included), or None: causal.
        scale: the factor on q kᵀ.   softcap: Gemma 2's cap on the scaled scores, or None.
        sinks: gpt-oss's per-head sink logits, (h,), or None.
        causal: False for an encoder's bidirectional attention.
        keys: which keys each batch element may attend to, (B, N) bool (False: padding), or
            None: all of them.
        label: a note for ``kind`` ("latent, absorbed" for DeepSeek's MLA, say), or None.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    window: int | None
    scale: float
    softcap: float | None = None
    sinks: np.ndarray | None = None
    causal: bool = True
    keys: np.ndarray | None = None
    label: str | None = None
    _weights: np.ndarray | None = None

    @property
    def mask(self):
        if not self.causal:
            # q is viewed with 3 leading axes (B, h_kv, g) when it meets the mask
            return None if self.keys is None else al.masks.from_hf(self.keys, lead_ndim=3)
        return al.masks.Causal() if self.window is None else al.masks.SlidingWindow(self.window)

    @property
    def kind(self) -> str:
        """'full', 'sliding 4096', with ', softcap 50' and ', sinks' as they apply."""
        if not self.causal:
            parts = ["bidirectional" if self.keys is None else "bidirectional, padding"]
        else:
            parts = ["full" if self.window is None else f"sliding {self.window}"]
        if self.softcap is not None:
            parts.append(f"softcap {self.softcap:g}")
        if self.sinks is not None:
            parts.append("sinks")
        if self.label is not None:
            parts.append(self.label)
        return ", ".join(parts)

    def _call(self, weights: bool):
        b, h, n, d = self.q.shape
        h_kv = self.k.shape[1]
        q = self.q.reshape(b, h_kv, h // h_kv, n, d)  # (B, h_kv, g, N, d), a view
        sinks = None if self.sinks is None else self.sinks.reshape(h_kv, h // h_kv)
        return al.attention(
            q,
            self.k[:, :, None],  # (B, h_kv, 1, N, d): broadcast over the group, not copied
            self.v[:, :, None],
            self.mask,
            scale=self.scale,
            softcap=self.softcap,
            sinks=sinks,
            return_weights=weights,
        )

    def output(self, weights: bool) -> np.ndarray:
        """The attention output, (B, h, N, d); with ``weights`` the weights are kept."""
        b, h, n, _ = self.q.shape
        if not weights:
            return self._call(False).reshape(b, h, n, -1)
        out, w = self._call(True)
        self._weights = w.reshape(b, h, n, n)  # (B, h, N, N)
        return out.reshape(b, h, n, -1)

    @property
    def weights(self) -> np.ndarray:
        """The attention weights, (B, h, N, N): row i is query i's softmax over the keys."""
        if self._weights is None:
            self.output(True)
        return self._weights

    def trace(self, head: int, query: int, batch: int = 0):
        """One row as an ``AttentionTrace``: query ``query`` of ``head`` against all N keys,
        the keys its mask blocks shown as -inf in the masked table."""
        b, h, n, _ = self.q.shape
        for name, value, size in (("batch", batch, b), ("head", head, h), ("query", query, n)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise AttnlabError(f"expected {name} to be an integer, but got {value!r}")
            if not 0 <= value < size:
                raise AttnlabError(f"expected 0 <= {name} < {size}, but got {name}={value}")
        kv = head // (h // self.k.shape[1])
        if self.causal:
            allowed = self.mask.allowed(n, n)[query : query + 1]  # (1, N)
        else:  # an encoder's row: every key, less the padding
            allowed = np.ones((1, n), bool) if self.keys is None else self.keys[batch][None]
        sink = None if self.sinks is None else self.sinks[head]
        return al.trace_attention(
            self.q[batch, head, query : query + 1],  # (1, d)
            self.k[batch, kv],  # (N, d)
            self.v[batch, kv],
            allowed,
            scale=self.scale,
            softcap=self.softcap,
            sinks=sink,
        )


def attend(q, k, v, *, window=None, scale, softcap=None, sinks=None, weights=True, **extra):
    """(output (B, h, N, d_v), LayerAttention) for one layer: causal (or sliding-window)
    attention of q (B, h, N, d) over k (B, h_kv, N, d), v (B, h_kv, N, d_v) through
    ``attnlab.attention``; ``extra`` sets ``causal``, ``keys`` and ``label``."""
    layer = LayerAttention(q, k, v, window, scale, softcap, sinks, **extra)
    return layer.output(weights), layer
