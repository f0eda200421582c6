"""An independent float64 attention for the verify tests, written from FlashAttention's docs.

Dense numpy in FlashAttention's layout (B, N, h, d), forward and backward by the chain rule,
with FlashAttention's window rule (query i sees keys i + M - N - left .. i + M - N + right),
softcap, ALiBi, sinks and GQA. It shares no code with attnlab, so a kernel output built from
it checks attnlab.verify's truth as well as its verdict.
"""

from __future__ import annotations

import numpy as np


def allowed(n: int, m: int, window=(-1, -1), causal=False) -> np.ndarray:
    """(N, M) bool: FlashAttention's local mask, bottom-right aligned; causal = right edge 0."""
    left, right = window
    if causal:
        right = 0
    i = np.arange(n)[:, None] + m - n
    j = np.arange(m)[None, :]
    ok = np.ones((n, m), bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    return ok


def reference(
    q,
    k,
    v,
    do=None,
    *,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    softmax_scale=None,
    alibi_slopes=None,
    sinks=None,
):
    """{"out", "lse"[, "dq", "dk", "dv"]} in float64: out (B, N, h, d_v), lse (B, h, N)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, n, h, d = q.shape
    m, h_kv = k.shape[1], k.shape[2]
    g = h // h_kv
    scale = 1 / np.sqrt(d) if softmax_scale is None else softmax_scale
    kh = np.repeat(k.transpose(0, 2, 1, 3), g, axis=1)  # (B, h, M, d)
    vh = np.repeat(v.transpose(0, 2, 1, 3), g, axis=1)
    qh = q.transpose(0, 2, 1, 3)  # (B, h, N, d)
    raw = qh @ kh.swapaxes(-1, -2) * scale  # (B, h, N, M)
    t = np.tanh(raw / softcap) if softcap else None
    s = softcap * t if softcap else raw
    if alibi_slopes is not None:
        slopes = np.broadcast_to(np.asarray(alibi_slopes, float), (b, h))[:, :, None, None]
        dist = np.abs(np.arange(n)[:, None] + m - n - np.arange(m)[None, :])
        s = s - slopes * dist
    s = np.where(allowed(n, m, window_size, causal), s, -np.inf)
    top = s.max(-1, keepdims=True)
    if sinks is not None:
        sink = np.asarray(sinks, float)[None, :, None, None]
        top = np.maximum(top, sink)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    total = e.sum(-1, keepdims=True) + (0 if sinks is None else np.exp(sink - top))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, e / total, 0.0)
        lse = (np.log(total) + top)[..., 0]
    out = p @ vh  # (B, h, N, d_v)
    # Contiguous, as a kernel's tensors are: safetensors' numpy API writes a strided array's
    # memory as it lies, not in its index order.
    result = {"out": np.ascontiguousarray(out.transpose(0, 2, 1, 3)), "lse": lse}
    if do is None:
        return result
    doh = np.asarray(do, np.float64).transpose(0, 2, 1, 3)  # (B, h, N, d_v)
    dp = doh @ vh.swapaxes(-1, -2)
    ds = p * (dp - (doh * out).sum(-1, keepdims=True))
    if softcap:
        ds = ds * (1 - t * t)
    dq = ds @ kh * scale
    dk = (ds.swapaxes(-1, -2) @ qh * scale).reshape(b, h_kv, g, m, d).sum(2)
    dv = (p.swapaxes(-1, -2) @ doh).reshape(b, h_kv, g, m, -1).sum(2)
    grads = {"dq": dq, "dk": dk, "dv": dv}
    result.update({n: np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for n, x in grads.items()})
    return result


def inputs(rng, b=2, n=24, m=24, h=4, h_kv=2, d=16, dtype=np.float32):
    """q (B, N, h, d), k, v (B, M, h_kv, d) drawn from N(0, 1), stored in ``dtype``."""
    q = rng.standard_normal((b, n, h, d)).astype(dtype)
    k = rng.standard_normal((b, m, h_kv, d)).astype(dtype)
    v = rng.standard_normal((b, m, h_kv, d)).astype(dtype)
    return q, k, v
