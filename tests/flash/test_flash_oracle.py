"""attnlab.flash against PyTorch: SDPA with explicit masks forward, autograd backward.

The torch side builds every mask and bias from FlashAttention's definitions with torch ops
(query i stands at key i + M - N), so a wrong alignment in attnlab.flash shows up.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.flash import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_varlen_backward,
    flash_attn_varlen_func,
)
from tolerances import F64

pytestmark = pytest.mark.oracle
GRAD = {"rtol": 0.0, "atol": 1e-9}

CASES = [
    ((17, 29), (4, 2), {"causal": True}),
    ((29, 17), (4, 4), {"causal": True}),  # 12 rows see no key
    ((20, 20), (4, 1), {"window_size": (5, 3)}),
    ((13, 31), (2, 2), {"softcap": 2.0}),
    ((31, 13), (4, 2), {"alibi": True}),
    ((16, 24), (4, 2), {"causal": True, "softcap": 3.0, "alibi": True, "window_size": (7, 0)}),
    ((24, 16), (2, 1), {"window_size": (4, 2), "softcap": 1.5, "alibi": True}),
]


def torch_parts(torch, n, m, h, options, batch, rng):
    """The float bias (0 / -inf plus ALiBi) on (B, h, N, M), built with torch ops."""
    left, right = options.get("window_size", (-1, -1))
    if options.get("causal"):
        right = 0
    i = torch.arange(n).view(n, 1) + m - n
    j = torch.arange(m).view(1, m)
    allowed = torch.ones(n, m, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    bias = torch.zeros(batch, h, n, m, dtype=torch.float64)
    slopes = None
    if options.get("alibi"):
        slopes = rng.uniform(0.05, 0.5, (batch, h))
        bias = bias - torch.from_numpy(slopes).view(batch, h, 1, 1) * (i - j).abs()
    bias = bias.masked_fill(~allowed, -math.inf)
    return allowed, bias, slopes


def torch_attention(torch, q, k, v, allowed, bias, softcap, scale):
    """FlashAttention's maths in torch, (B, N, h, d) layout; rows that see no key give 0."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)  # (B, M, h, d)
    s = torch.einsum("bnhd,bmhd->bhnm", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s + bias
    empty = ~allowed.any(dim=-1)  # (N,)
    s = s.masked_fill(empty.view(1, 1, -1, 1), 0.0)  # no NaN from an all -inf row
    w = torch.softmax(s, dim=-1).masked_fill(empty.view(1, 1, -1, 1), 0.0)
    return torch.einsum("bhnm,bmhd->bnhd", w, v)


def make(torch, pair, heads, seed, batch=2, d=8):
    rng = np.random.default_rng(seed)
    (n, m), (h, h_k) = pair, heads
    arrays = [
        rng.standard_normal(s) for s in ((batch, n, h, d), (batch, m, h_k, d), (batch, m, h_k, d))
    ]
    return rng, arrays, [torch.tensor(a, requires_grad=True) for a in arrays]


@pytest.mark.parametrize(("pair", "heads", "options"), CASES)
def test_forward_against_torch(torch, pair, heads, options):
    rng, (q, k, v), (tq, tk, tv) = make(torch, pair, heads, seed=sum(pair))
    allowed, bias, slopes = torch_parts(torch, *pair, heads[0], options, 2, rng)
    flash = {key: val for key, val in options.items() if key != "alibi"}
    out = flash_attn_func(q, k, v, alibi_slopes=slopes, **flash)
    softcap = options.get("softcap", 0.0)
    if softcap or not allowed.any(dim=-1).all():
        want = torch_attention(torch, tq, tk, tv, allowed, bias, softcap, 1 / math.sqrt(8))
    else:  # SDPA itself, with the explicit float mask, on (B, h, N, d)
        g = heads[0] // heads[1]
        t = [
            x.transpose(1, 2) for x in (tq, tk.repeat_interleave(g, 2), tv.repeat_interleave(g, 2))
        ]
        want = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=bias).transpose(1, 2)
    np.testing.assert_allclose(out, want.detach().numpy(), **F64)


@pytest.mark.parametrize("with_lse", [False, True])
@pytest.mark.parametrize(("pair", "heads", "options"), CASES)
def test_backward_against_torch_autograd(torch, pair, heads, options, with_lse):
    rng, (q, k, v), (tq, tk, tv) = make(torch, pair, heads, seed=3 * sum(pair))
    allowed, bias, slopes = torch_parts(torch, *pair, heads[0], options, 2, rng)
    softcap = options.get("softcap", 0.0)
    out = torch_attention(torch, tq, tk, tv, allowed, bias, softcap, 0.4)
    dout = rng.standard_normal(out.shape)
    out.backward(torch.from_numpy(dout))
    flash = {key: val for key, val in options.items() if key != "alibi"}
    lse = None
    if with_lse:
        _, lse, _ = flash_attn_func(
            q, k, v, softmax_scale=0.4, alibi_slopes=slopes, return_attn_probs=True, **flash
        )
    dq, dk, dv = flash_attn_backward(
        dout, q, k, v, None, lse, softmax_scale=0.4, alibi_slopes=slopes, **flash
    )
    for got, want in ((dq, tq), (dk, tk), (dv, tv)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want.grad.numpy(), **GRAD)


def test_varlen_backward_against_torch_autograd(torch):
    lens_q, lens_k = [5, 1, 9], [7, 4, 3]
    rng = np.random.default_rng(12)
    q = rng.standard_normal((sum(lens_q), 4, 8))
    k = rng.standard_normal((sum(lens_k), 2, 8))
    v = rng.standard_normal((sum(lens_k), 2, 8))
    dout = rng.standard_normal(q.shape)
    cq = np.concatenate([[0], np.cumsum(lens_q)])
    ck = np.concatenate([[0], np.cumsum(lens_k)])
    options = {"causal": True, "softcap": 2.0, "window_size": (3, 0)}
    dq, dk, dv = flash_attn_varlen_backward(dout, q, k, v, None, None, cq, ck, 9, 7, **options)
    for b in range(3):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        tq, tk, tv = (torch.tensor(a[None], requires_grad=True) for a in (q[rq], k[rk], v[rk]))
        allowed, bias, _ = torch_parts(torch, lens_q[b], lens_k[b], 4, options, 1, rng)
        out = torch_attention(torch, tq, tk, tv, allowed, bias, 2.0, 1 / math.sqrt(8))
        out.backward(torch.from_numpy(dout[rq][None]))
        np.testing.assert_allclose(dq[rq], tq.grad[0].numpy(), **GRAD)
        np.testing.assert_allclose(dk[rk], tk.grad[0].numpy(), **GRAD)
        np.testing.assert_allclose(dv[rk], tv.grad[0].numpy(), **GRAD)
    out = flash_attn_varlen_func(q, k, v, cq, ck, 9, 7, **options)
    assert out.shape == q.shape
