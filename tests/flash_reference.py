"""An independent reference for attnlab.flash: FlashAttention's semantics in plain numpy.

Written from FlashAttention's documented rules, not from attnlab: one sequence, head by head,
the (N, M) table built with explicit index comparisons (query i stands at key i + M - N), rows
that see no key returned as output 0 and log-sum-exp -inf. Shapes follow FlashAttention:
q (N, h, d), k (M, h_k, d), v (M, h_k, d_v).
"""

from __future__ import annotations

import math

import numpy as np


def allowed_table(n, m, causal=False, window=(-1, -1)):
    """(N, M) bool: True where query i may see key j, bottom-right aligned."""
    left, right = window
    if causal:
        right = 0
    i = np.arange(n)[:, None] + m - n  # (N, 1): the key position query i stands at
    j = np.arange(m)[None, :]  # (1, M)
    ok = np.ones((n, m), dtype=bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def reference(q, k, v, *, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """(out (N, h, d_v), lse (h, N), weights (h, N, M)) for one sequence, in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n, h, d = q.shape
    m, h_k = k.shape[:2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    ok = allowed_table(n, m, causal, window)
    dist = np.abs(np.arange(n)[:, None] + m - n - np.arange(m)[None, :])  # (N, M)
    out = np.zeros((n, h, v.shape[-1]))
    lse = np.full((h, n), -np.inf)
    weights = np.zeros((h, n, m))
    if n == 0 or m == 0:
        return out, lse, weights  # no key: every row is 0 with lse -inf
    for head in range(h):
        kv_head = head // (h // h_k)
        s = q[:, head] @ k[:, kv_head].T * scale  # (N, M)
        if softcap > 0:
            s = softcap * np.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes[head] * dist
        s = np.where(ok, s, -np.inf)
        seen = ok.any(axis=1)  # (N,): rows that see at least one key
        top = np.where(seen, s.max(axis=1), 0.0)  # (N,)
        e = np.exp(s - top[:, None])  # (N, M), 0 where blocked
        total = e.sum(axis=1)
        lse[head] = np.where(seen, top + np.log(np.where(seen, total, 1.0)), -np.inf)
        weights[head] = e / np.where(seen, total, 1.0)[:, None]
        out[:, head] = weights[head] @ v[:, kv_head]
    return out, lse, weights


def reference_batch(q, k, v, **options):
    """``reference`` over a batch: q (B, N, h, d) -> out (B, N, h, d_v), lse (B, h, N),
    weights (B, h, N, M); slopes (B, h) give sequence b the row b."""
    slopes = options.pop("slopes", None)
    parts = []
    for b in range(q.shape[0]):
        row = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[b])
        parts.append(reference(q[b], k[b], v[b], slopes=row, **options))
    return tuple(np.stack(p) for p in zip(*parts, strict=True))


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding by complex numbers: x (B, S, H, d), positions (B, S).

    Each pair of features is a complex number a + ib multiplied by e^{iθ}: (GPT-J) pairs are
    neighbours, (GPT-NeoX) pairs are i and i + r/2.
    """
    r = 2 * cos.shape[1]
    x = np.array(x, dtype=np.float64)
    theta = np.arctan2(sin, cos)[positions][:, :, None, :]  # (B, S, 1, r/2)
    radius = np.hypot(cos, sin)[positions][:, :, None, :]
    if interleaved:
        z = x[..., 0:r:2] + 1j * x[..., 1:r:2]
    else:
        z = x[..., : r // 2] + 1j * x[..., r // 2 : r]
    z = z * radius * np.exp(1j * theta)
    if interleaved:
        x[..., 0:r:2], x[..., 1:r:2] = z.real, z.imag
    else:
        x[..., : r // 2], x[..., r // 2 : r] = z.real, z.imag
    return x
