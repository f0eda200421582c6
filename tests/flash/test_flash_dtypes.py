"""attnlab.flash's dtypes as FlashAttention has them: float16 and bfloat16 in, the same dtype
out, computed exactly and rounded once; one dtype for q, k, v; torch tensors (bfloat16, with
requires_grad) read without a raw torch error; a negative softcap is off; 0-d max_seqlen.

The exact answer is tests/flash_reference.py in float64 on the same (half-precision) values,
rounded once into the half dtype by numpy or ml_dtypes (round to nearest even).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.errors import AttnlabError, NonFiniteResultError
from attnlab.flash import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)
from flash_reference import reference, reference_batch

BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = [np.dtype(np.float16), BF16]


def case(dtype, n=9, m=13, h=4, h_k=2, d=8, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    shapes = ((batch, n, h, d), (batch, m, h_k, d), (batch, m, h_k, d))
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_inputs_give_the_exact_answer_rounded_once_into_their_dtype(dtype):
    q, k, v = case(dtype)
    out, lse, probs = flash_attn_func(q, k, v, causal=True, softcap=5.0, return_attn_probs=True)
    g = q.shape[2] // k.shape[2]
    ref_out, ref_lse, ref_w = reference_batch(
        *f64(q, np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)), causal=True, softcap=5.0
    )
    assert out.dtype == dtype and probs.dtype == dtype
    assert lse.dtype == np.float32  # FlashAttention's softmax_lse is float32
    np.testing.assert_array_equal(out, ref_out.astype(dtype))
    np.testing.assert_array_equal(probs, ref_w.astype(dtype))
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_gradients_come_back_in_their_dtype(dtype):
    q, k, v = case(dtype)
    dout = np.random.default_rng(1).standard_normal((2, 9, 4, 8)).astype(dtype)
    grads = flash_attn_backward(dout, q, k, v, causal=True)
    exact = flash_attn_backward(*f64(dout, q, k, v), causal=True)
    for got, want in zip(grads, exact, strict=True):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want.astype(dtype))


def test_bfloat16_varlen_packed_and_kvcache():
    q, k, v = case(BF16, n=6, m=6)
    qkv = np.stack([q, k.repeat(2, axis=2), v.repeat(2, axis=2)], axis=2)
    out = flash_attn_qkvpacked_func(qkv, causal=True)
    assert out.dtype == BF16
    cu = np.array([0, 6, 12], np.int32)
    packed = [x.reshape(12, *x.shape[2:]) for x in (q, k, v)]
    varlen = flash_attn_varlen_func(*packed, cu, cu, 6, 6, causal=True)
    assert varlen.dtype == BF16
    np.testing.assert_array_equal(varlen.reshape(out.shape), flash_attn_func(q, k, v, causal=True))
    k_cache = np.zeros((2, 10, 2, 8), BF16)
    v_cache = np.zeros((2, 10, 2, 8), BF16)
    got, lse = flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=0, causal=True, return_softmax_lse=True
    )
    assert got.dtype == BF16 and lse.dtype == np.float32
    np.testing.assert_array_equal(k_cache[:, :6], k)
    exact = reference(*f64(q[1], k[1].repeat(2, axis=1), v[1].repeat(2, axis=1)), causal=True)
    np.testing.assert_array_equal(got[1], exact[0].astype(BF16))


@pytest.mark.parametrize(
    ("dtypes", "name"),
    [
        ((np.float16, BF16, np.float16), "k"),
        ((BF16, BF16, np.float32), "v"),
        ((np.float32, np.float64, np.float32), "k"),
    ],
)
def test_mixed_dtypes_are_refused_by_name(dtypes, name):
    q, k, v = (a.astype(t) for a, t in zip(case(np.float64), dtypes, strict=True))
    with pytest.raises(AttnlabError, match=rf"expected {name} of q's dtype .*{name}\.dtype="):
        flash_attn_func(q, k, v)


def test_backward_refuses_a_dout_of_another_dtype():
    q, k, v = case(np.float16)
    with pytest.raises(AttnlabError, match=r"expected dout of q's dtype float16"):
        flash_attn_backward(np.zeros((2, 9, 4, 8), np.float32), q, k, v)


def test_an_output_past_float16_is_refused_not_inf():
    # Dropout scales the kept weights by 1 / (1 - p): one key of 60000 at p = 0.5 gives 120000.
    q = np.ones((1, 1, 1, 4), np.float16)
    k, v = np.ones((1, 1, 1, 4), np.float16), np.full((1, 1, 1, 4), 60000, np.float16)
    rng = np.random.default_rng(0)
    with pytest.raises(NonFiniteResultError, match="expected out to fit float16"):
        for _ in range(20):  # some draw keeps the key
            flash_attn_func(q, k, v, dropout_p=0.5, rng=rng)


@pytest.mark.parametrize("softcap", [-1.0, -30.0])
def test_a_negative_softcap_is_off_as_in_flashattention(softcap):
    q, k, v = case(np.float64, seed=3)
    q *= 4  # scores large enough that a cap would change them
    off = flash_attn_func(q, k, v, softcap=0.0)
    np.testing.assert_array_equal(flash_attn_func(q, k, v, softcap=softcap), off)
    assert not np.allclose(flash_attn_func(q, k, v, softcap=1.0), off)


def test_a_zero_dimensional_max_seqlen_is_accepted():
    q, k, v = (x[0] for x in case(np.float64, n=7, m=7))
    cu = np.array([0, 3, 7])
    want = flash_attn_varlen_func(q, k, v, cu, cu, 4, 4)
    got = flash_attn_varlen_func(q, k, v, cu, cu, np.array(4), np.int32(4))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(AttnlabError, match="max_seqlen_q"):
        flash_attn_varlen_func(q, k, v, cu, cu, np.array([4]), 4)
    with pytest.raises(AttnlabError, match="max_seqlen_k"):
        flash_attn_varlen_func(q, k, v, cu, cu, 4, np.array(True))


@pytest.mark.oracle
def test_torch_bfloat16_and_requires_grad_tensors_are_read(torch):
    q, k, v = case(np.float32)
    tq, tk, tv = (torch.from_numpy(a).to(torch.bfloat16).requires_grad_(True) for a in (q, k, v))
    got = flash_attn_func(tq, tk, tv, causal=True)
    want = flash_attn_func(*(a.astype(BF16) for a in (q, k, v)), causal=True)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, want)
    f32 = [torch.from_numpy(a).requires_grad_(True) for a in (q, k, v)]
    np.testing.assert_array_equal(flash_attn_func(*f32), flash_attn_func(q, k, v))
    cu = torch.tensor([0, 9], dtype=torch.int32)
    out = flash_attn_varlen_func(f32[0][0], f32[1][0, :9], f32[2][0, :9], cu, cu,
                                 torch.tensor(9), torch.tensor(9))  # fmt: skip
    np.testing.assert_array_equal(out, flash_attn_func(q[:1], k[:1, :9], v[:1, :9])[0])


@pytest.mark.oracle
def test_a_torch_bfloat16_cache_is_appended_in_place(torch):
    q, k, v = case(np.float32, n=2, m=2)
    k_cache = torch.zeros((2, 6, 2, 8), dtype=torch.bfloat16)
    v_cache = torch.zeros((2, 6, 2, 8), dtype=torch.bfloat16)
    tk, tv = (torch.from_numpy(a).to(torch.bfloat16) for a in (k, v))
    out = flash_attn_with_kvcache(
        torch.from_numpy(q).to(torch.bfloat16), k_cache, v_cache, tk, tv, cache_seqlens=1
    )
    assert out.dtype == BF16
    assert torch.equal(k_cache[:, 1:3], tk) and torch.equal(v_cache[:, 1:3], tv)
    assert not k_cache[:, 3:].any() and not k_cache[:, :1].any()


@pytest.mark.oracle
def test_a_cache_that_requires_grad_is_refused_by_name_when_appending(torch):
    q, k, v = case(np.float32, n=2, m=2)
    k_cache = torch.zeros((2, 6, 2, 8), requires_grad=True)
    v_cache = torch.zeros((2, 6, 2, 8))
    with pytest.raises(AttnlabError, match="expected k_cache to be a CPU tensor that does not"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=1)
    assert not k_cache.detach().any()
    # Read only (no new rows), it is read detached.
    out = flash_attn_with_kvcache(q, k_cache.detach().normal_().requires_grad_(), v_cache)
    assert np.isfinite(out).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the kernel warns first (reliability.md)
def test_scores_past_the_range_before_a_tiny_scale_answer_as_torch_does_not_nan():
    # Found by the fuzz: q·kᵀ = inf in float64, then softmax_scale=0 or 1e-30 gave NaN (and
    # was refused). The scale now goes into q first, as torch's and the blockwise kernels do:
    # one key, so the output is its value whatever the score.
    q = np.full((1, 1, 1, 1), 1.2e29)
    k, v = np.full((1, 1, 1, 1), 1.2e299), np.full((1, 1, 1, 1), 0.125)
    for scale in (0.0, 1e-30):
        out = flash_attn_func(q, k, v, softmax_scale=scale)
        np.testing.assert_array_equal(out, v)
