"""attention_backward against torch.autograd: random shapes, broadcasting, every mask, both methods.

The oracle is autograd through softmax(q kᵀ · scale + mask) v written in torch ops (float64 and
float32), and torch's own fused scaled_dot_product_attention backward (float32). torch is a test
oracle only (the ``torch`` fixture skips without it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import F64

FAST = settings(max_examples=40, deadline=None)
# float32 gradients: 1e-4 of the largest entry (gradients sum N x M products of float32 values).
GRAD_F32_REL = 1e-4

MASK_KINDS = [
    "none",
    "causal",
    "bottom_right",
    "window",
    "padding",
    "causal+padding",
    "window+padding",
    "dense_bool",
    "dense_additive",
    "causal+dense_additive",
]


@dataclass
class Case:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    g: np.ndarray  # grad_output (..., N, d_v)
    mask: object
    scale: float | None
    lead: tuple[int, ...]


@st.composite
def cases(draw, dtype=np.float64):
    kind = draw(st.sampled_from(MASK_KINDS))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    if "padding" in kind and not lead:
        lead = (2,)
    n = draw(st.integers(1, 9))
    m = draw(st.integers(n, 11))  # N <= M: every row keeps a key under the banded masks
    d_k, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    scale = draw(st.one_of(st.none(), st.floats(0.1, 2.0)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Any leading axis of q, k or v may be 1: its gradient is then a sum over that axis.
    q_lead, k_lead, v_lead = (tuple(1 if rng.random() < 0.3 else a for a in lead) for _ in "qkv")
    if "padding" in kind:  # its lengths index the batch axis, which q keeps whole
        q_lead = lead[:1] + q_lead[1:]
    lead = np.broadcast_shapes(q_lead, k_lead, v_lead)  # the output's leading axes
    q = rng.normal(size=q_lead + (n, d_k)).astype(dtype)
    k = rng.normal(size=k_lead + (m, d_k)).astype(dtype)
    v = rng.normal(size=v_lead + (m, d_v)).astype(dtype)
    g = rng.normal(size=lead + (n, d_v)).astype(dtype)
    masks = []
    if "causal" in kind:
        masks.append(Causal())
    if kind == "bottom_right":
        masks.append(Causal(align="bottom_right"))
    if "window" in kind:
        masks.append(SlidingWindow(int(rng.integers(1, m + 1))))
    if "padding" in kind:  # beside a window, a length >= N keeps a key for every row
        shortest = n if "window" in kind else 1
        masks.append(Padding(rng.integers(shortest, m + 1, size=lead[0]).tolist()))
    if kind == "dense_bool":
        allowed = rng.random((n, m)) < 0.6
        allowed[np.arange(n), rng.integers(0, m, size=n)] = True  # a key for every row
        masks.append(Dense(allowed))
    if "dense_additive" in kind:
        bias = rng.normal(size=(n, m))
        bias[rng.random((n, m)) < 0.3] = -np.inf
        bias[:, 0] = 0.0  # key 0: every row (and every causal row) keeps it
        masks.append(Dense(bias.astype(dtype)))
    mask = None if not masks else masks[0] if len(masks) == 1 else sum(masks[1:], masks[0])
    return Case(q, k, v, g, mask, scale, lead)


def _autograd(torch, c: Case):
    """(dq, dk, dv) from torch.autograd through the formula, in the inputs' dtype."""
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (c.q, c.k, c.v))
    scale = 1 / np.sqrt(c.q.shape[-1]) if c.scale is None else c.scale
    s = tq @ tk.transpose(-1, -2) * scale  # (..., N, M)
    if c.mask is not None:
        n, m = c.q.shape[-2], c.k.shape[-2]
        s = s + torch.tensor(c.mask.additive(n, m, lead_ndim=len(c.lead), dtype=c.q.dtype))
    out = torch.softmax(s, dim=-1) @ tv  # (..., N, d_v)
    out.backward(torch.tensor(c.g))
    return tuple(t.grad.numpy() for t in (tq, tk, tv))


def _close32(got, want) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32 and a.shape == b.shape
        bound = GRAD_F32_REL * max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=0, atol=bound)


methods = st.sampled_from(
    [("dense", None, 1), ("blockwise", None, 2)]
    + [("blockwise", (bq, bk), t) for bq in (1, 2, 3) for bk in (1, 3, 4) for t in (1, 2)]
)


@FAST
@given(cases(), methods)
def test_float64_matches_autograd(torch, c, how):
    method, block, threads = how
    got = al.attention_backward(
        c.q, c.k, c.v, c.g, c.mask, scale=c.scale, method=method, block_size=block, threads=threads
    )
    for a, b in zip(got, _autograd(torch, c), strict=True):
        assert a.dtype == np.float64 and a.shape == b.shape
        np.testing.assert_allclose(a, b, **F64)


@FAST
@given(cases(dtype=np.float32), methods)
def test_float32_matches_autograd(torch, c, how):
    method, block, threads = how
    got = al.attention_backward(
        c.q, c.k, c.v, c.g, c.mask, scale=c.scale, method=method, block_size=block, threads=threads
    )
    _close32(got, _autograd(torch, c))


@pytest.mark.parametrize("method", ["dense", "blockwise"])
@pytest.mark.parametrize("causal", [False, True])
def test_float32_matches_torch_fused_sdpa_backward(torch, method, causal):
    # torch's own CPU kernel (forward and fused backward), heads as a batch axis, N != M.
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 3, 40, 16), dtype=np.float32)
    k = rng.standard_normal((2, 3, 56, 16), dtype=np.float32)
    v = rng.standard_normal((2, 3, 56, 8), dtype=np.float32)
    g = rng.standard_normal((2, 3, 40, 8), dtype=np.float32)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    out.backward(torch.tensor(g))
    want = tuple(t.grad.numpy() for t in (tq, tk, tv))
    mask = Causal() if causal else None
    got = al.attention_backward(q, k, v, g, mask, method=method, block_size=(16, 24))
    _close32(got, want)


def test_the_oracle_can_fail(torch):
    # A wrong scale must be caught: the comparison is not vacuous.
    rng = np.random.default_rng(0)
    c = Case(*(rng.normal(size=(4, 3)) for _ in range(4)), mask=Causal(), scale=0.5, lead=())
    got = al.attention_backward(c.q, c.k, c.v, c.g, c.mask, scale=0.6)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got[0], _autograd(torch, c)[0], **F64)
