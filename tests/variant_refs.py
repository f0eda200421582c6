"""Independent references for the attention variants (softcap, ALiBi, two-sided windows,
sinks, the log-sum-exp), written here and nowhere in attnlab.

``loop_variant`` is plain Python (loops over i and j, the math module only); ``torch_variant``
is the same formula in torch ops, for torch.autograd's gradients. Both take one description
of a case, ``Case``, so a test states what it computes once and checks it twice.

Conventions, as FlashAttention's ``attention_ref`` has them: a score is q·k · scale, capped
to c·tanh(s/c), then the bias, ALiBi's -slope·|i + off - j| (off = M - N bottom-right, else
0) and -inf outside the window [i + off - left, i + off + right] (None: no limit) are added;
the sink joins each row's divisor; a row with no allowed key gives output 0 and lse -inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Case:
    q: np.ndarray  # (B, h, N, d)
    k: np.ndarray  # (B, h, M, d)
    v: np.ndarray  # (B, h, M, d_v)
    scale: float
    softcap: float | None = None
    slopes: np.ndarray | None = None  # (h,) or (B, h)
    window: tuple | None = None  # (left | None, right | None)
    causal: bool = False
    bottom_right: bool = False
    sinks: np.ndarray | None = None  # (h,)
    bias: np.ndarray | None = None  # broadcastable to (B, h, N, M)
    lengths: tuple | None = None  # key padding per batch element

    def offset(self) -> int:
        return self.k.shape[-2] - self.q.shape[-2] if self.bottom_right else 0

    def allowed(self, b: int, i: int, j: int) -> bool:
        off = self.offset()
        if self.causal and j > i + off:
            return False
        if self.window is not None:
            left, right = self.window
            if left is not None and j < i + off - left:
                return False
            if right is not None and j > i + off + right:
                return False
        return self.lengths is None or j < self.lengths[b]

    def slope(self, b: int, h: int) -> float:
        s = np.asarray(self.slopes)
        return float(s[h] if s.ndim == 1 else s[b, h])


def loop_variant(c: Case) -> tuple[np.ndarray, np.ndarray]:
    """(output (B, h, N, d_v), lse (B, h, N)) by plain loops over every (b, h, i, j)."""
    B, H, n, _ = c.q.shape
    m, dv = c.k.shape[-2], c.v.shape[-1]
    out, lse = np.zeros((B, H, n, dv)), np.full((B, H, n), -math.inf)
    bias = None if c.bias is None else np.broadcast_to(c.bias, (B, H, n, m))
    for b in range(B):
        for h in range(H):
            q, k, v = c.q[b, h].tolist(), c.k[b, h].tolist(), c.v[b, h].tolist()
            for i in range(n):
                row = []
                for j in range(m):
                    if not c.allowed(b, i, j):
                        continue
                    s = sum(x * y for x, y in zip(q[i], k[j], strict=True)) * c.scale
                    if c.softcap is not None:
                        s = c.softcap * math.tanh(s / c.softcap)
                    if bias is not None:
                        s += float(bias[b, h, i, j])
                    if c.slopes is not None:
                        s -= c.slope(b, h) * abs(i + c.offset() - j)
                    row.append((j, s))
                if not row:
                    continue
                logits = [s for _, s in row]
                if c.sinks is not None:
                    logits.append(float(c.sinks[h]))
                top = max(logits)
                total = sum(math.exp(s - top) for s in logits)
                lse[b, h, i] = top + math.log(total)
                for col in range(dv):
                    out[b, h, i, col] = sum(math.exp(s - lse[b, h, i]) * v[j][col] for j, s in row)
    return out, lse


def torch_variant(torch, c: Case, tensors: dict):
    """(output, lse) in torch ops on ``tensors`` (q, k, v and optionally sinks, bias: torch
    leaves for autograd); rows with no allowed key give 0, with finite gradients."""
    q, k, v = tensors["q"], tensors["k"], tensors["v"]
    n, m = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) * c.scale  # (B, h, N, M)
    if c.softcap is not None:
        s = c.softcap * torch.tanh(s / c.softcap)
    if "bias" in tensors:
        s = s + tensors["bias"]
    i = torch.arange(n)[:, None] + c.offset()
    j = torch.arange(m)[None, :]
    if c.slopes is not None:
        slopes = torch.as_tensor(np.asarray(c.slopes, dtype=c.q.dtype))
        s = s - slopes[..., None, None] * (i - j).abs()
    allowed = torch.ones(q.shape[0], 1, n, m, dtype=torch.bool)
    if c.causal:
        allowed = allowed & (j <= i)
    if c.window is not None:
        left, right = c.window
        if left is not None:
            allowed = allowed & (j >= i - left)
        if right is not None:
            allowed = allowed & (j <= i + right)
    if c.lengths is not None:
        allowed = allowed & (j < torch.tensor(c.lengths)[:, None, None, None])
    hollow = ~allowed.any(-1, keepdim=True)  # (B, 1, N, 1): rows with no allowed key
    s = s.masked_fill(~allowed, -math.inf).masked_fill(hollow, 0.0)
    if "sinks" in tensors:
        sink = tensors["sinks"][:, None, None].expand(s.shape[:-1] + (1,))
        lse = torch.logsumexp(torch.cat([s, sink], -1), -1)
    else:
        lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).masked_fill(hollow, 0.0)
    return p @ v, lse.masked_fill(hollow[..., 0], -math.inf)


def masks_of(c: Case):
    """The attnlab mask for ``c``, a sum of specs."""
    from attnlab.masks import ALiBi, Causal, Dense, Padding, SlidingWindow

    align = "bottom_right" if c.bottom_right else "top_left"
    parts = []
    if c.causal:
        parts.append(Causal(align))
    if c.window is not None:
        parts.append(SlidingWindow(left=c.window[0], right=c.window[1], align=align))
    if c.slopes is not None:
        parts.append(ALiBi(c.slopes, align=align))
    if c.bias is not None:
        parts.append(Dense(c.bias))
    if c.lengths is not None:
        parts.append(Padding(c.lengths))
    if not parts:
        return None
    mask = parts[0]
    for p in parts[1:]:
        mask = mask + p
    return mask


def run_attnlab(c: Case, **kw):
    """attnlab.attention on ``c``: (output, lse)."""
    import attnlab as al

    return al.attention(
        c.q, c.k, c.v, masks_of(c), scale=c.scale, softcap=c.softcap, sinks=c.sinks,
        return_lse=True, fully_masked="zero", **kw,
    )  # fmt: skip
