"""attnlab.flex_attention against torch's FlexAttention on CPU in float64.

The torch side writes every score_mod and mask_mod again with torch ops from its definition
(not by calling attnlab's), so a wrong sign, offset or head index in a named mod shows up.
Forward: ``torch.nn.attention.flex_attention.flex_attention`` (eager on CPU). Backward: torch
refuses flex_attention's backward on CPU, so the gradients are torch autograd through its own
eager implementation of flex attention (``math_attention``), the one the forward runs.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import attnlab as al
from attnlab import flex
from tolerances import F64

pytestmark = pytest.mark.oracle

RNG = np.random.default_rng(46)
SLOPES = np.array([0.5, 0.25, 0.125, 0.0625])
TABLE = RNG.standard_normal((4, 9))  # a relative bias, R = 4, one row per head
DOCS = np.array([0] * 9 + [1] * 14 + [2] * 14)  # 37 positions in three packed documents


def _torch_mods(torch):
    """name -> (attnlab score_mod, torch score_mod); the torch ones from their definitions."""
    slopes, table = torch.tensor(SLOPES), torch.tensor(TABLE)

    def t_alibi(s, b, h, q, kv):
        return s - slopes[h] * (q - kv).abs()

    def t_relative(s, b, h, q, kv):
        return s + table[h, torch.clamp(kv - q, -4, 4) + 4]

    def t_softcap(s, b, h, q, kv):
        return 2.0 * torch.tanh(s / 2.0)

    def t_wild(s, b, h, q, kv):
        # Index tensors times a Python float would be float32 in torch: widen them first.
        b, h, d = (x.to(s.dtype) for x in (b, h, q - kv))
        return s * (1.0 + 0.25 * h) + torch.sin(d) - 0.1 * b

    def n_wild(s, b, h, q, kv):
        return s * (1.0 + 0.25 * h) + np.sin(q - kv) - 0.1 * b

    return {
        "none": (None, None),
        "alibi": (flex.alibi(SLOPES), t_alibi),
        "relative_bias": (flex.relative_bias(TABLE), t_relative),
        "softcap": (flex.softcap(2.0), t_softcap),
        "arbitrary": (n_wild, t_wild),
    }


def _torch_masks(torch):
    docs = torch.tensor(DOCS)
    return {
        "none": (None, None),
        "causal": (flex.causal(), lambda b, h, q, kv: q >= kv),
        "causal_offset": (flex.causal(8 - 37), lambda b, h, q, kv: kv <= q + 8 - 37),
        "window": (flex.sliding_window(5, 2), lambda b, h, q, kv: (kv >= q - 5) & (kv <= q + 2)),
        "document": (flex.document(DOCS), lambda b, h, q, kv: docs[q] == docs[kv]),
        "per_head": (
            lambda b, h, q, kv: (kv <= q) | (h == 1) & (b == 0),
            lambda b, h, q, kv: (kv <= q) | (h == 1) & (b == 0),
        ),
    }


def _arrays(torch, heads=4, kv_heads=2, n=37, m=37, e=8, ev=6, kv_batch=2):
    q = RNG.standard_normal((2, heads, n, e))
    k = RNG.standard_normal((kv_batch, kv_heads, m, e))
    v = RNG.standard_normal((kv_batch, kv_heads, m, ev))
    return (q, k, v), tuple(torch.tensor(a) for a in (q, k, v))


def _torch_flex(torch, tq, tk, tv, mod, mask_mod, shape, block, scale=None):
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bm = None
        if mask_mod is not None:
            bm = create_block_mask(mask_mod, *shape, device="cpu", BLOCK_SIZE=block)
        out, aux = flex_attention(
            tq, tk, tv, score_mod=mod, block_mask=bm, scale=scale,
            enable_gqa=tq.shape[1] != tk.shape[1], return_aux=AuxRequest(lse=True),
        )  # fmt: skip
    return bm, out.numpy(), aux.lse.numpy()


CASES = [
    ("none", "none", (None, None), 16),
    ("none", "causal", (None, None), 16),
    ("alibi", "causal", (None, None), 8),
    ("relative_bias", "window", (None, 4), 16),
    ("softcap", "document", (2, None), 16),
    ("arbitrary", "causal_offset", (None, None), 16),  # 29 rows see no key: out 0, lse -inf
    ("arbitrary", "per_head", (2, 4), 12),
    ("softcap", "per_head", (2, 4), (8, 16)),
    ("alibi", "causal_offset", (None, None), 16),  # the same empty rows through attention
]


@pytest.mark.parametrize(("mod", "mask", "bh", "block"), CASES)
def test_forward_and_lse_equal_torch_flex_attention(torch, mod, mask, bh, block):
    (q, k, v), (tq, tk, tv) = _arrays(torch)
    ours_mod, torch_mod = _torch_mods(torch)[mod]
    ours_mask, torch_mask = _torch_masks(torch)[mask]
    shape = (*bh, 37, 37)
    bm_t, out_t, lse_t = _torch_flex(torch, tq, tk, tv, torch_mod, torch_mask, shape, block)
    bm = None if ours_mask is None else al.create_block_mask(ours_mask, *shape, BLOCK_SIZE=block)
    out, lse = al.flex_attention(
        q, k, v, score_mod=ours_mod, block_mask=bm, enable_gqa=True, return_lse=True
    )
    np.testing.assert_allclose(out, out_t, **F64)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_t))
    np.testing.assert_allclose(lse[np.isfinite(lse)], lse_t[np.isfinite(lse_t)], **F64)
    if bm is not None:
        assert bm.sparsity() == pytest.approx(bm_t.sparsity(), abs=1e-12)


def test_cross_lengths_scale_and_a_shared_key_batch_equal_torch(torch):
    (q, k, v), (tq, tk, tv) = _arrays(torch, heads=2, kv_heads=2, n=21, m=50, kv_batch=1)
    tk, tv = tk.expand(2, -1, -1, -1), tv.expand(2, -1, -1, -1)  # torch wants the batch whole
    mask_t = lambda b, h, qi, kv: kv <= qi + 29  # noqa: E731 - the bottom-right causal rule
    _, out_t, lse_t = _torch_flex(torch, tq, tk, tv, None, mask_t, (None, None, 21, 50), 16, 0.3)
    bm = al.create_block_mask(flex.causal(29), None, None, 21, 50, BLOCK_SIZE=16)
    out, lse = al.flex_attention(q, k, v, block_mask=bm, scale=0.3, return_lse=True)
    np.testing.assert_allclose(out, out_t, **F64)
    np.testing.assert_allclose(lse, lse_t, **F64)


@pytest.mark.parametrize(
    ("n", "m", "block", "bh"),
    [(37, 37, 16, (None, None)), (128, 200, 128, (2, 4)), (5, 300, (4, 64), (1, 2))],
)
@pytest.mark.parametrize("mask", ["causal", "window", "per_head"])
def test_sparsity_equals_torchs(torch, n, m, block, bh, mask):
    from torch.nn.attention.flex_attention import create_block_mask

    ours = {"causal": flex.causal(), "window": flex.sliding_window(5, 2)}
    theirs = dict(_torch_masks(torch))
    fn = ours.get(mask, theirs[mask][0])
    bm = al.create_block_mask(fn, *bh, n, m, BLOCK_SIZE=block)
    bm_t = create_block_mask(theirs[mask][1], *bh, n, m, device="cpu", BLOCK_SIZE=block)
    assert bm.sparsity() == pytest.approx(bm_t.sparsity(), abs=1e-12)
    np.testing.assert_array_equal(bm.kv_num_blocks, bm_t.kv_num_blocks.numpy())
    np.testing.assert_array_equal(bm.full_kv_num_blocks, bm_t.full_kv_num_blocks.numpy())


BACKWARD = [
    ("none", "none"),
    ("none", "causal"),
    ("alibi", "causal"),
    ("relative_bias", "window"),
    ("softcap", "document"),
    ("softcap", "causal_offset"),  # rows with no key contribute nothing
    ("alibi", "per_head"),
]


@pytest.mark.parametrize(("mod", "mask"), BACKWARD)
def test_backward_equals_torch_autograd(torch, mod, mask):
    from torch._higher_order_ops.flex_attention import math_attention
    from torch.nn.attention.flex_attention import _create_empty_block_mask, create_block_mask

    (q, k, v), (tq, tk, tv) = _arrays(torch)
    g = RNG.standard_normal((2, 4, 37, 6))
    ours_mod, torch_mod = _torch_mods(torch)[mod]
    ours_mask, torch_mask = _torch_masks(torch)[mask]
    leaves = [t.clone().requires_grad_(True) for t in (tq, tk, tv)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bm_t = (
            _create_empty_block_mask(tq, tk)
            if torch_mask is None
            else create_block_mask(torch_mask, 2, 4, 37, 37, device="cpu", BLOCK_SIZE=16)
        )
        out_t, _, _ = math_attention(
            *leaves, torch_mod or (lambda s, b, h, q, kv: s), bm_t.as_tuple(), 1 / math.sqrt(8), {}
        )
    out_t.backward(torch.tensor(g))
    bm = None if ours_mask is None else al.create_block_mask(ours_mask, 2, 4, 37, 37, 16)
    grads = al.flex_attention_backward(
        q, k, v, g, score_mod=ours_mod, block_mask=bm, enable_gqa=True
    )
    for ours, leaf in zip(grads, leaves, strict=True):
        np.testing.assert_allclose(ours, leaf.grad.numpy(), rtol=0, atol=1e-9)
