"""FlashMLA's dense paged decoding, its backward, and its sparse prefill, held to loops by hand.

The oracle walks each (sequence, query, head) in float64: gather the keys through the block
table (or the query's indices), V = the first dv columns of K, a softmax written out; torch's
autograd (V a slice of K) is the oracle of the backward.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import flash_mla_backward, flash_mla_sparse_fwd, flash_mla_with_kvcache

B, S_Q, H_Q, H_KV, D, DV, PAGE, BLOCKS = 2, 3, 4, 1, 12, 8, 4, 9


def _dense_case(seed=0, lens=(7, 10)):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, S_Q, H_Q, D))
    cache = rng.standard_normal((BLOCKS, PAGE, H_KV, D))
    table = np.array([[7, 2, 5], [0, 8, 3]], np.int32)  # scattered pages, out of order
    return q, cache, table, np.array(lens, np.int32)


def _dense_by_hand(q, cache, table, lens, causal, scale):
    out = np.zeros((B, S_Q, H_Q, DV))
    lse = np.full((B, H_Q, S_Q), np.inf)
    for b in range(B):
        keys = np.array([cache[table[b, p // PAGE], p % PAGE] for p in range(lens[b])])
        for i in range(S_Q):
            for h in range(H_Q):
                g = h // (H_Q // H_KV)
                seen = [j for j in range(lens[b]) if not causal or j <= i + lens[b] - S_Q]
                if not seen:
                    continue
                s = np.array([q[b, i, h] @ keys[j, g] * scale for j in seen])
                w = np.exp(s - s.max())
                out[b, i, h] = sum(
                    wj * keys[j, g, :DV] for wj, j in zip(w / w.sum(), seen, strict=True)
                )
                lse[b, h, i] = s.max() + np.log(w.sum())
    return out, lse


@pytest.mark.parametrize("causal", [False, True])
def test_dense_equals_the_loop_with_scattered_pages(causal):
    q, cache, table, lens = _dense_case(lens=(2, 10))  # sequence 0: 2 keys for 3 queries
    out, lse = flash_mla_with_kvcache(q, cache, table, lens, DV, None, None, causal=causal)
    want_out, want_lse = _dense_by_hand(q, cache, table, lens, causal, 1 / np.sqrt(D))
    np.testing.assert_allclose(out, want_out, atol=1e-12)
    assert lse.dtype == np.float64
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6)
    if causal:  # query 0 of sequence 0 sees key 2 - 3 = -1: no key, FlashMLA's 0 and +inf
        assert np.isposinf(lse[0, :, 0]).all() and not out[0, 0].any()


def test_dense_takes_the_scale_and_bfloat16():
    import ml_dtypes

    q, cache, table, lens = _dense_case(seed=1)
    out, lse = flash_mla_with_kvcache(
        q.astype(ml_dtypes.bfloat16), cache.astype(ml_dtypes.bfloat16), table, lens, DV,
        softmax_scale=0.3,
    )  # fmt: skip
    assert lse.dtype == np.float32
    qb, cb = (x.astype(ml_dtypes.bfloat16).astype(np.float64) for x in (q, cache))
    want, _ = _dense_by_hand(qb, cb, table, lens, False, 0.3)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out, want.astype(ml_dtypes.bfloat16))


@pytest.mark.oracle
def test_backward_adds_the_key_and_value_uses_of_each_row(torch):
    q, cache, table, lens = _dense_case(seed=2)
    dout = np.random.default_rng(3).standard_normal((B, S_Q, H_Q, DV))
    tq = torch.tensor(q, requires_grad=True)
    tc = torch.tensor(cache, requires_grad=True)
    total = 0
    for b in range(B):
        rows = np.arange(lens[b])
        k = tc[torch.tensor(table[b][rows // PAGE]), torch.tensor(rows % PAGE)]  # (L, h_kv, D)
        kk = k.permute(1, 0, 2).repeat_interleave(H_Q // H_KV, 0)  # (H_Q, L, D)
        o = torch.nn.functional.scaled_dot_product_attention(
            tq[b].transpose(0, 1), kk, kk[..., :DV], is_causal=False
        )  # (H_Q, S_Q, DV)
        total = total + (o * torch.tensor(dout[b]).transpose(0, 1)).sum()
    total.backward()
    dq, dk = flash_mla_backward(dout, q, cache, table, lens, DV)
    np.testing.assert_allclose(dq, tq.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(dk, tc.grad.numpy(), atol=1e-12)
    assert not dk[[1, 4, 6]].any()  # pages no sequence reads


def _sparse_case(seed=0, s_q=5, s_kv=11, h_q=4, h_kv=2, topk=4):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((s_q, h_q, D))
    kv = rng.standard_normal((s_kv, h_kv, D))
    idx = rng.integers(0, s_kv, (s_q, h_kv, topk))
    idx[0, 0, 1] = -1  # no key
    idx[1, 1, 2] = s_kv + 3  # past the end: also no key (FlashMLA's convention)
    idx[2, 0, :] = -1  # a row that sees nothing
    return q, kv, idx


def test_sparse_equals_the_loop():
    q, kv, idx = _sparse_case()
    s_q, h_q, _ = q.shape
    h_kv = kv.shape[1]
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, idx, 0.2, d_v=DV)
    for i in range(s_q):
        for h in range(h_q):
            g = h // (h_q // h_kv)
            keys = [j for j in idx[i, g] if 0 <= j < kv.shape[0]]
            if not keys:
                assert not out[i, h].any() and np.isneginf(max_logits[i, h])
                assert np.isposinf(lse[i, h])
                continue
            s = np.array([q[i, h] @ kv[j, g] * 0.2 for j in keys])
            w = np.exp(s - s.max())
            want = sum(wj * kv[j, g, :DV] for wj, j in zip(w / w.sum(), keys, strict=True))
            np.testing.assert_allclose(out[i, h], want, atol=1e-12)
            assert max_logits[i, h] == pytest.approx(s.max(), rel=1e-6)
            assert lse[i, h] == pytest.approx(s.max() + np.log(w.sum()), rel=1e-6)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda q, c, t, n: flash_mla_with_kvcache(q, c, t * 0 + [[7, 2, 5], [0, 9, 3]], n, DV),
         AttnlabError, r"expected block_table\[1\] to index pages 0..8"),
        (lambda q, c, t, n: flash_mla_with_kvcache(q, c, t, n, D + 1), AttnlabError,
         "head_dim_v to be an integer from 1"),
        (lambda q, c, t, n: flash_mla_with_kvcache(q, c, t, [7, 13], DV), AttnlabError,
         "sequence 1's 13 keys to fit its block_table row"),
        (lambda q, c, t, n: flash_mla_with_kvcache(q, c[..., :5], t, n, DV), ShapeError,
         "expected k_cache of shape"),
    ],
)  # fmt: skip
def test_dense_refusals_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call(*_dense_case())


def test_sparse_refusals_name_the_argument():
    q, kv, idx = _sparse_case()
    idx[3, 1, 0] = -7
    with pytest.raises(AttnlabError, match=r"expected indices from 0 to s_kv - 1 = 10.*-7"):
        flash_mla_sparse_fwd(q, kv, idx, 0.2, d_v=DV)
    with pytest.raises(ShapeError, match="expected indices to be an integer array of shape"):
        flash_mla_sparse_fwd(q, kv, idx[:, :1], 0.2, d_v=DV)
    with pytest.raises(ShapeError, match=r"at least one slot per query \(topk >= 1\)"):
        flash_mla_sparse_fwd(q, kv, idx[..., :0], 0.2, d_v=DV)
    with pytest.raises(AttnlabError, match="expected sm_scale to be None or a finite number"):
        flash_mla_sparse_fwd(q, kv, np.zeros_like(idx), "x", d_v=DV)
