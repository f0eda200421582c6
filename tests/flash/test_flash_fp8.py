"""flash_attn_func on FlashAttention 3's FP8 inputs: the descales read per (sequence, kv head).

The oracle dequantises by hand, one (sequence, head) at a time, and runs a softmax written out
in float64 (and torch's float8 dtypes with SDPA, for the bits of the float8 formats).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import flash_attn_func, flash_attn_kvpacked_func

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)


def _case(dtype, b=2, n=5, m=7, h=4, h_k=2, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((b, n, h, d)) * 4).astype(dtype)
    k = (rng.standard_normal((b, m, h_k, d)) * 4).astype(dtype)
    v = (rng.standard_normal((b, m, h_k, d)) * 4).astype(dtype)
    scales = [rng.uniform(0.05, 0.4, (b, h_k)).astype(np.float32) for _ in range(3)]
    return q, k, v, scales


def _by_hand(q, k, v, scales, causal):
    """Loop over (sequence, query head): dequantise, softmax in float64, weights @ v."""
    b, n, h, d = q.shape
    m, h_k = k.shape[1], k.shape[2]
    out = np.zeros((b, n, h, d))
    for s in range(b):
        for i in range(h):
            g = i // (h // h_k)  # the key/value head this query head reads
            qs = q[s, :, i].astype(np.float64) * float(scales[0][s, g])
            ks = k[s, :, g].astype(np.float64) * float(scales[1][s, g])
            vs = v[s, :, g].astype(np.float64) * float(scales[2][s, g])
            sc = qs @ ks.T / np.sqrt(d)
            if causal:  # bottom-right: query r sees keys up to r + m - n
                sc[np.arange(m)[None, :] > np.arange(n)[:, None] + m - n] = -np.inf
            w = np.exp(sc - sc.max(axis=1, keepdims=True))
            out[s, :, i] = (w / w.sum(axis=1, keepdims=True)) @ vs
    return out


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_output_is_the_dequantised_attention_rounded_to_bfloat16(dtype, causal):
    q, k, v, scales = _case(dtype)
    out = flash_attn_func(q, k, v, causal=causal, q_descale=scales[0], k_descale=scales[1],
                          v_descale=scales[2])  # fmt: skip
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    want = _by_hand(q, k, v, scales, causal)
    np.testing.assert_array_equal(out, want.astype(ml_dtypes.bfloat16))


def test_scalar_descales_and_none_mean_one():
    q, k, v, _ = _case(E4M3, seed=1)
    ones = [np.ones((2, 2))] * 3
    got = flash_attn_func(q, k, v, q_descale=1.0, k_descale=np.float32(1.0))
    np.testing.assert_array_equal(got, _by_hand(q, k, v, ones, False).astype(ml_dtypes.bfloat16))


def test_lse_of_fp8_is_float32_natural_log():
    q, k, v, scales = _case(E4M3, b=1, n=3, m=3, h=2, h_k=1, d=4, seed=2)
    _, lse, _ = flash_attn_func(q, k, v, return_attn_probs=True, q_descale=scales[0],
                                k_descale=scales[1], v_descale=scales[2])  # fmt: skip
    qs = q[0, :, 1].astype(np.float64) * float(scales[0][0, 0])
    ks = k[0, :, 0].astype(np.float64) * float(scales[1][0, 0])
    want = np.log(np.exp(qs @ ks.T / 2.0).sum(axis=1))
    assert lse.dtype == np.float32
    np.testing.assert_allclose(lse[0, 1], want, rtol=1e-6)


@pytest.mark.oracle
def test_equal_to_torch_float8_dequantised(torch):
    q, k, v, scales = _case(E4M3, seed=3)
    tq, tk, tv = (
        torch.from_numpy(x.view(np.uint8).copy()).view(torch.float8_e4m3fn) for x in (q, k, v)
    )
    per_q = torch.from_numpy(np.repeat(scales[0], 2, axis=1)).double()[:, None, :, None]
    deq = [
        tq.double() * per_q,
        tk.double() * torch.from_numpy(scales[1]).double()[:, None, :, None],
        tv.double() * torch.from_numpy(scales[2]).double()[:, None, :, None],
    ]
    want = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in deq), enable_gqa=True
    ).transpose(1, 2)
    got = flash_attn_func(q, k, v, q_descale=scales[0], k_descale=scales[1], v_descale=scales[2])
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2**-8, atol=1e-6)
    # torch's own float8 tensors and descales are read through their bits, as bfloat16 is.
    ts = [torch.from_numpy(x) for x in scales]
    again = flash_attn_func(tq, tk, tv, q_descale=ts[0], k_descale=ts[1], v_descale=ts[2])
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (np.ones((2, 3)), ShapeError, r"k_descale to be a scalar or of shape .*\(2, 2\)"),
        (-1.0, AttnlabError, "k_descale finite and >= 0"),
        (np.array([[1.0, np.nan], [1.0, 1.0]]), AttnlabError, "k_descale finite"),
        ("x", AttnlabError, "k_descale to be a number"),
    ],
)
def test_bad_descales_raise_one_error_naming_it(bad, error, words):
    q, k, v, _ = _case(E4M3)
    with pytest.raises(error, match=words):
        flash_attn_func(q, k, v, k_descale=bad)


def test_descales_need_fp8_and_fp8_needs_the_fa3_entry():
    q, k, v, _ = _case(np.float32)
    with pytest.raises(AttnlabError, match="expected v_descale only with float8 inputs"):
        flash_attn_func(q, k, v, v_descale=2.0)
    q8, k8, v8, _ = _case(E5M2)
    with pytest.raises(AttnlabError, match="expected kv in a dtype of 16 bits or more"):
        flash_attn_kvpacked_func(q8, np.stack([k8, v8], axis=2))
