"""One layer's attention through attnlab's own ``attention``, kept for reading back.

Shape legend: B batch, h query heads, h_kv key/value heads, g = h / h_kv heads per group,
N tokens (queries = keys), d head width (d_v the value width, when it differs).

``attend_points`` is a layer's attention between its named points (hook_q, hook_k, hook_v,
hook_attn_scores, hook_pattern, hook_z). The output comes from ``attnlab.attention`` unless a
hook changes the scores or the pattern: then the pattern is the softmax of the (hooked) scores,
computed here, and z = pattern · v, so the change really flows on.

Grouped-query attention never copies k or v per head: q (B, h, N, d) is viewed as
(B, h_kv, g, N, d) against k and v of shape (B, h_kv, 1, N, d), and attnlab broadcasts the
group axis. Query head j uses key/value head j // g, as in every Hugging Face model.
A decoder's layer is causal (or sliding-window, or chunked); an encoder's (BERT) sees every
key, less the padding its ``attention_mask`` names (``keys``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import attnlab as al
from attnlab.errors import AttnlabError
from attnlab.kernels._threads import one_blas_thread

__all__ = ["LayerAttention", "attend", "attend_points"]


@dataclass
class LayerAttention:
    """What one layer's attention was given, and (once asked) its weights.

    Attributes:
        q: queries after the rotary embedding (if any), (B, h, N, d).
        k, v: keys (after the rotary embedding) and values, (B, h_kv, N, d).
        window: the sliding window (keys per query, itself included), or None: causal.
        chunk: Llama 4's chunked local attention: query i sees the keys j <= i of its own
            chunk (j // chunk == i // chunk), or None.
        scale: the factor on q kᵀ.   softcap: Gemma 2's cap on the scaled scores, or None.
        sinks: gpt-oss's per-head sink logits, (h,), or None.
        keys: which keys are real tokens, (B, N) bool (``attention_mask``), or None: all.
        causal: False for an encoder's bidirectional attention (every key, less the padding).
        label: a note for ``kind`` ("latent, absorbed" for DeepSeek's MLA, say), or None.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    window: int | None
    scale: float
    softcap: float | None = None
    sinks: np.ndarray | None = None
    keys: np.ndarray | None = None
    chunk: int | None = None
    causal: bool = True
    label: str | None = None
    _weights: np.ndarray | None = None

    @property
    def mask(self):
        if not self.causal:
            # q is viewed with 3 leading axes (B, h_kv, g) when it meets the mask
            return None if self.keys is None else al.masks.from_hf(self.keys, lead_ndim=3)
        if self.chunk is not None:  # Llama 4: the earlier keys of the query's own chunk
            return al.masks.Causal() + al.masks.Chunks(self.chunk)
        return al.masks.Causal() if self.window is None else al.masks.SlidingWindow(self.window)

    @property
    def kind(self) -> str:
        """'full', 'sliding 4096', 'chunked 8192' or 'bidirectional' (', padding'), with
        ', softcap 50', ', sinks' and the label as they apply."""
        if not self.causal:
            parts = ["bidirectional" if self.keys is None else "bidirectional, padding"]
        elif self.chunk is not None:
            parts = [f"chunked {self.chunk}"]
        else:
            parts = ["full" if self.window is None else f"sliding {self.window}"]
        if self.softcap is not None:
            parts.append(f"softcap {self.softcap:g}")
        if self.sinks is not None:
            parts.append("sinks")
        if self.label is not None:
            parts.append(self.label)
        return ", ".join(parts)

    def allowed(self) -> np.ndarray:
        """Which keys each query may see, (B or 1, 1, N, N): the mask, and real keys only."""
        n = self.q.shape[2]
        if self.causal:
            table = self.mask.allowed(n, n)[None, None]  # (1, 1, N, N)
        else:  # an encoder: every key
            table = np.ones((1, 1, n, n), bool)
        if self.keys is None:
            return table
        return table & self.keys[:, None, None, :]  # (B, 1, N, N)

    def _call(self, weights: bool):
        b, h, n, d = self.q.shape
        h_kv = self.k.shape[1]
        q = self.q.reshape(b, h_kv, h // h_kv, n, d)  # (B, h_kv, g, N, d), a view
        sinks = None if self.sinks is None else self.sinks.reshape(h_kv, h // h_kv)
        mask, empty = self.mask, "raise"
        if self.keys is not None:
            # A left-padded query sees only pad keys: its row is empty, its output 0.
            mask, empty = self.allowed()[:, :, None], "zero"  # (B, 1, 1, N, N)
        return al.attention(
            q,
            self.k[:, :, None],  # (B, h_kv, 1, N, d): broadcast over the group, not copied
            self.v[:, :, None],
            mask,
            scale=self.scale,
            softcap=self.softcap,
            sinks=sinks,
            return_weights=weights,
            fully_masked=empty,
        )

    def scores(self) -> np.ndarray:
        """The scaled (and capped) scores, -inf where the mask blocks, (B, h, N, N)."""
        with (
            one_blas_thread()
        ):  # a threaded OpenBLAS is many times slower on these per-head products
            s = (self.q @ self._per_head(self.k).swapaxes(-1, -2)) * self.scale  # (B, h, N, N)
        if self.softcap is not None:
            s = self.softcap * np.tanh(s / self.softcap)
        return np.where(self.allowed(), s, -np.inf)  # (B, h, N, N)

    def softmax(self, scores: np.ndarray) -> np.ndarray:
        """The pattern of ``scores`` (B, h, N, N): each row's softmax, a sink in its divisor;
        a row with no key left is all 0."""
        top = scores.max(-1, keepdims=True)  # (B, h, N, 1)
        sink = None if self.sinks is None else self.sinks[:, None, None]  # (h, 1, 1)
        if sink is not None:
            top = np.maximum(top, sink)
        top = np.where(np.isfinite(top), top, 0.0)
        e = np.exp(scores - top)
        total = e.sum(-1, keepdims=True)
        if sink is not None:
            total = total + np.exp(sink - top)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0)

    def apply(self, pattern: np.ndarray) -> np.ndarray:
        """pattern (B, h, N, N) · v: the output (B, h, N, d), each head on its kv head."""
        with one_blas_thread():
            return pattern @ self._per_head(self.v)  # (B, h, N, d)

    def _per_head(self, x: np.ndarray) -> np.ndarray:
        """k or v (B, h_kv, N, d) as one contiguous copy per query head (B, h, N, d): a
        broadcast group axis would keep numpy's matmul off BLAS, many times slower."""
        g = self.q.shape[1] // x.shape[1]
        return np.ascontiguousarray(np.repeat(x, g, axis=1) if g > 1 else x)  # (B, h, N, d)

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
        table = self.allowed()  # (B or 1, 1, N, N)
        allowed = table[min(batch, len(table) - 1), 0, query : query + 1]  # (1, N)
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
    """(output (B, h, N, d_v), LayerAttention) for one layer: causal (or sliding-window, or
    chunked) attention of q (B, h, N, d) over k (B, h_kv, N, d), v (B, h_kv, N, d_v) through
    ``attnlab.attention``; ``extra`` sets ``keys``, ``chunk``, ``causal`` and ``label``."""
    layer = LayerAttention(q, k, v, window, scale, softcap, sinks, **extra)
    return layer.output(weights), layer


def _tl(points, name: str, x: np.ndarray) -> np.ndarray:
    """x (B, heads, N, d) through point ``name``, which shows it as (B, N, heads, d)."""
    return points(name, x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # back to (B, heads, N, d)


def attend_points(q, k, v, points, prefix: str, *, weights: bool, post=None, **options):
    """(z (B, N, h, d) after ``hook_z``, LayerAttention) for q (B, h, N, d) and k, v
    (B, h_kv, N, d), through the points ``{prefix}hook_q`` ... ``{prefix}hook_z``.
    ``options``: window, scale, softcap, sinks, keys, chunk, causal, label as
    ``LayerAttention`` takes them; ``post`` maps the output (B, h, N, d_v) before hook_z
    (MLA's absorbed form: W_UV)."""
    if points.active:
        q, k, v = (
            _tl(points, prefix + f"hook_{c}", x) for c, x in zip("qkv", (q, k, v), strict=True)
        )
    layer = LayerAttention(q, k, v, **options)
    s_name, p_name = prefix + "hook_attn_scores", prefix + "hook_pattern"
    if points.hooked(s_name):
        pattern = points(p_name, layer.softmax(points(s_name, layer.scores())))
        layer._weights = pattern
        out = layer.apply(pattern)
    elif points.hooked(p_name):
        if points.wants(s_name):
            points(s_name, layer.scores())
        layer.output(True)
        layer._weights = points(p_name, layer._weights)
        out = layer.apply(layer._weights)
    else:
        if points.wants(s_name):
            points(s_name, layer.scores())
        out = layer.output(weights or points.wants(p_name))
        if points.wants(p_name):
            points(p_name, layer._weights)
    if post is not None:
        out = post(out)
    return points(prefix + "hook_z", out.transpose(0, 2, 1, 3)), layer  # (B, N, h, d)
