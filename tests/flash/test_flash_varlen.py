"""attnlab.flash's variable-length functions: each packed sequence aligned on its own lengths.

Every sequence is checked against the independent reference run on that sequence alone, so a
mask aligned on the batch's longest lengths, or rows that leak between sequences, fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.flash import (
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from flash_reference import reference
from tolerances import F64

# (query lengths, key lengths): uneven, with empty and one-row sequences, 113 x 203, 1 x 239.
LENGTHS = [
    ([113, 1, 0, 7], [203, 239, 5, 7]),
    ([1, 17, 3], [239, 3, 0]),
    ([5, 5, 1], [5, 2, 1]),
]
OPTIONS = [
    {},
    {"causal": True},
    {"window_size": (3, 2)},
    {"causal": True, "window_size": (6, -1)},
    {"softcap": 2.0, "alibi": True},
    {"causal": True, "alibi": True, "window_size": (10, 0)},
]


def cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def make_packed(lens_q, lens_k, h=4, h_k=2, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((sum(lens_q), h, d))
    k = rng.standard_normal((sum(lens_k), h_k, d))
    v = rng.standard_normal((sum(lens_k), h_k, d))
    return rng, q, k, v


def ref_options(options, rng, batch, h):
    options = dict(options)
    slopes = rng.uniform(0.05, 0.5, (batch, h)) if options.pop("alibi", False) else None
    ref = {
        "causal": options.get("causal", False),
        "window": options.get("window_size", (-1, -1)),
        "softcap": options.get("softcap", 0.0),
    }
    return {**options, "alibi_slopes": slopes}, ref, slopes


@pytest.mark.parametrize(("lens_q", "lens_k"), LENGTHS)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_each_sequence_matches_reference(lens_q, lens_k, options):
    rng, q, k, v = make_packed(lens_q, lens_k, seed=len(lens_q))
    flash, ref, slopes = ref_options(options, rng, len(lens_q), 4)
    cq, ck = cu(lens_q), cu(lens_k)
    out, lse, probs = flash_attn_varlen_func(
        q, k, v, cq, ck, max(lens_q), max(lens_k) + 3, return_attn_probs=True, **flash
    )
    assert out.shape == (sum(lens_q), 4, 8) and lse.shape == (4, sum(lens_q))
    assert probs.shape == (len(lens_q), 4, max(lens_q), max(lens_k) + 3)
    for b, (n, m) in enumerate(zip(lens_q, lens_k, strict=True)):
        rows_q, rows_k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        want_out, want_lse, want_w = reference(
            q[rows_q], k[rows_k], v[rows_k], slopes=None if slopes is None else slopes[b], **ref
        )
        np.testing.assert_allclose(out[rows_q], want_out, **F64)
        np.testing.assert_array_equal(np.isneginf(lse[:, rows_q]), np.isneginf(want_lse))
        finite = np.isfinite(want_lse)
        np.testing.assert_allclose(lse[:, rows_q][finite], want_lse[finite], **F64)
        np.testing.assert_allclose(probs[b, :, :n, :m], want_w, **F64)
        assert (probs[b, :, n:] == 0).all() and (probs[b, :, :, m:] == 0).all()


def test_paged_keys_through_a_shuffled_block_table():
    lens_q, lens_k, page = [3, 1, 6], [9, 1, 14], 4
    rng, q, k, v = make_packed(lens_q, lens_k, seed=9)
    cq, ck = cu(lens_q), cu(lens_k)
    blocks_per_seq = 4
    order = rng.permutation(3 * blocks_per_seq)  # shuffled pages of one pool
    table = order.reshape(3, blocks_per_seq).astype(np.int32)
    k_pages = rng.standard_normal((3 * blocks_per_seq, page, 2, 8))
    v_pages = rng.standard_normal((3 * blocks_per_seq, page, 2, 8))
    for b, m in enumerate(lens_k):  # lay sequence b's keys out in its pages
        for p in range(m):
            k_pages[table[b, p // page], p % page] = k[ck[b] + p]
            v_pages[table[b, p // page], p % page] = v[ck[b] + p]
    kwargs = {"causal": True, "window_size": (5, 0)}
    got = flash_attn_varlen_func(q, k_pages, v_pages, cq, ck, 6, 14, block_table=table, **kwargs)
    want = flash_attn_varlen_func(q, k, v, cq, ck, 6, 14, **kwargs)
    np.testing.assert_array_equal(got, want)
    for b in range(3):
        rows_q, rows_k = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        ref, _, _ = reference(q[rows_q], k[rows_k], v[rows_k], causal=True, window=(5, 0))
        np.testing.assert_allclose(got[rows_q], ref, **F64)


def test_packed_forms_equal_the_unpacked_call():
    lens = [4, 1, 7]
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((12, 3, 2, 8))
    c = cu(lens)
    want = flash_attn_varlen_func(
        qkv[:, 0], qkv[:, 1], qkv[:, 2], c, c, 7, 7, causal=True, window_size=(2, 1)
    )
    got = flash_attn_varlen_qkvpacked_func(qkv, c, 7, causal=True, window_size=(2, 1))
    np.testing.assert_array_equal(got, want)
    got = flash_attn_varlen_kvpacked_func(
        qkv[:, 0], qkv[:, 1:], c, c, 7, 7, causal=True, window_size=(2, 1)
    )
    np.testing.assert_array_equal(got, want)


def test_one_sequence_equals_the_fixed_length_function():
    from attnlab.flash import flash_attn_func

    _rng, q, k, v = make_packed([9], [13], seed=5)
    got = flash_attn_varlen_func(q, k, v, cu([9]), cu([13]), 9, 13, causal=True)
    want = flash_attn_func(q[None], k[None], v[None], causal=True)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
