"""Plain-Python reference attention: loops over i and j, no numpy in the maths.

An oracle independent of attnlab's vectorised code, for tests that compare against it.
"""

from __future__ import annotations

import math

import numpy as np


def loop_attention(q, k, v, allowed=None, bias=None, scale=None):
    """One (N, d_k) problem in plain Python: scores, scale, mask, softmax, weighted sum.

    allowed(i, j) -> bool and bias(i, j) -> float (may be -inf) describe the mask.
    Returns (output (N, d_v), weights (N, M)) as float64 arrays.
    """
    q, k, v = (np.asarray(a, dtype=float).tolist() for a in (q, k, v))
    n, m, d_k, d_v = len(q), len(k), len(q[0]), len(v[0])
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    out, weights = [], []
    for i in range(n):
        row = []
        for j in range(m):
            s = sum(q[i][t] * k[j][t] for t in range(d_k)) * scale
            s += 0.0 if bias is None else bias(i, j)
            row.append(s if allowed is None or allowed(i, j) else -math.inf)
        top = max(row)
        e = [math.exp(s - top) for s in row]
        w = [x / sum(e) for x in e]
        weights.append(w)
        out.append([sum(w[j] * v[j][c] for j in range(m)) for c in range(d_v)])
    return np.array(out), np.array(weights)


def loop_batched(q, k, v, allowed=None, bias=None, scale=None):
    """loop_attention over every index of the broadcast leading axes.

    allowed(index, i, j) and bias(index, i, j) receive the leading index as a tuple.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))
    out = np.empty(lead + (q.shape[-2], v.shape[-1]))
    weights = np.empty(lead + (q.shape[-2], k.shape[-2]))
    for idx in np.ndindex(*lead):
        out[idx], weights[idx] = loop_attention(
            q[idx],
            k[idx],
            v[idx],
            allowed=None if allowed is None else (lambda i, j, idx=idx: allowed(idx, i, j)),
            bias=None if bias is None else (lambda i, j, idx=idx: bias(idx, i, j)),
            scale=scale,
        )
    return out, weights
