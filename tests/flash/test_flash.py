"""attnlab.flash's fixed-length functions against an independent FlashAttention reference.

The reference (tests/flash_reference.py) builds each (N, M) table with explicit index
comparisons, head by head; attnlab.flash must match it to 1e-10 in float64 on the dense and the
blockwise path, over seqlen pairs from FlashAttention's own grid and every option it has.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnlab.flash import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
)
from attnlab.kernels import blockwise
from flash_reference import allowed_table, reference_batch
from tolerances import F32, F64

PAIRS = [(1, 239), (113, 203), (239, 1), (3, 17), (17, 3), (64, 64)]
OPTIONS = [
    {},
    {"causal": True},
    {"window_size": (5, 3)},
    {"causal": True, "window_size": (4, -1)},
    {"window_size": (0, 0)},
    {"window_size": (-1, 2)},
    {"softcap": 3.0},
    {"alibi": True},
    {"causal": True, "softcap": 2.0, "alibi": True},
    {"window_size": (6, 2), "alibi": True, "softcap": 4.0},
]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA


def make_case(n, m, heads, seed, d=8, d_v=8, batch=2, dtype=np.float64):
    rng = np.random.default_rng(seed)
    h, h_k = heads
    q = rng.standard_normal((batch, n, h, d)).astype(dtype)
    k = rng.standard_normal((batch, m, h_k, d)).astype(dtype)
    v = rng.standard_normal((batch, m, h_k, d_v)).astype(dtype)
    return rng, q, k, v


def split_options(options, rng, batch, h):
    """FlashAttention's keyword arguments and the reference's, from one option dict."""
    options = dict(options)
    slopes = None
    if options.pop("alibi", False):
        slopes = rng.uniform(0.05, 0.5, (batch, h))
    flash = {**options, "alibi_slopes": slopes}
    ref = {
        "causal": options.get("causal", False),
        "window": options.get("window_size", (-1, -1)),
        "softcap": options.get("softcap", 0.0),
        "slopes": slopes,
    }
    return flash, ref


@pytest.fixture(params=["dense", "blockwise"])
def path(request, monkeypatch):
    if request.param == "blockwise":
        # A zero budget makes method="auto" choose the blockwise path for every call.
        monkeypatch.setattr(blockwise, "DEFAULT_MEMORY_BUDGET", 0)
    return request.param


CASES = [
    (pair, options, HEADS[i % len(HEADS)])
    for i, (pair, options) in enumerate(itertools.product(PAIRS, OPTIONS))
]


@pytest.mark.parametrize(("pair", "options", "heads"), CASES)
def test_matches_reference_float64(pair, options, heads):
    rng, q, k, v = make_case(*pair, heads, seed=len(str(options)) + pair[0])
    flash, ref = split_options(options, rng, q.shape[0], heads[0])
    out, lse, probs = flash_attn_func(q, k, v, return_attn_probs=True, **flash)
    want_out, want_lse, want_probs = reference_batch(q, k, v, **ref)
    np.testing.assert_allclose(out, want_out, **F64)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    np.testing.assert_allclose(lse[np.isfinite(lse)], want_lse[np.isfinite(want_lse)], **F64)
    np.testing.assert_allclose(probs, want_probs, **F64)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_both_paths_serve_it(options, path):
    rng, q, k, v = make_case(113, 203, (4, 2), seed=7)
    flash, ref = split_options(options, rng, 2, 4)
    out = flash_attn_func(q, k, v, softmax_scale=0.3, **flash)
    want, _, _ = reference_batch(q, k, v, scale=0.3, **ref)
    np.testing.assert_allclose(out, want, **F64)


def test_float32_stays_float32_within_tolerance():
    _rng, q, k, v = make_case(40, 70, (4, 2), seed=3, dtype=np.float32)
    out = flash_attn_func(q, k, v, causal=True, window_size=(9, 2), softcap=5.0)
    want, _, _ = reference_batch(q, k, v, causal=True, window=(9, 2), softcap=5.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, want, **F32)


def test_rows_that_see_no_key_are_zero_with_lse_minus_inf():
    # Causal with N > M, bottom-right: the first N - M rows see no key (FlashAttention's docstring
    # draws this case); a window (2, 0) with N = 5, M = 2 leaves 3 empty rows too.
    _, q, k, v = make_case(5, 2, (2, 2), seed=1)
    for kwargs in ({"causal": True}, {"window_size": (2, 0)}):
        out, lse, probs = flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
        assert not allowed_table(5, 2, causal=True)[:3].any()
        assert (out[:, :3] == 0).all() and np.isneginf(lse[:, :, :3]).all()
        assert (probs[:, :, :3] == 0).all()
        assert np.isfinite(lse[:, :, 3:]).all() and (out[:, 3:] != 0).any()


def test_no_keys_at_all_gives_zero():
    _, q, k, v = make_case(3, 0, (2, 1), seed=2)
    out = flash_attn_func(q, k, v)
    assert out.shape == (2, 3, 2, 8) and (out == 0).all()


def test_value_width_may_differ_from_head_width():
    _rng, q, k, v = make_case(6, 9, (2, 1), seed=4, d=8, d_v=5)
    out = flash_attn_func(q, k, v, causal=True)
    want, _, _ = reference_batch(q, k, v, causal=True)
    assert out.shape == (2, 6, 2, 5)
    np.testing.assert_allclose(out, want, **F64)


def test_packed_forms_equal_the_unpacked_call():
    _rng, q, k, v = make_case(11, 11, (3, 3), seed=5)
    qkv = np.stack([q, k, v], axis=2)  # (B, N, 3, h, d)
    kv = np.stack([k, v], axis=2)  # (B, M, 2, h, d)
    want = flash_attn_func(q, k, v, causal=True, softcap=2.5)
    np.testing.assert_array_equal(flash_attn_qkvpacked_func(qkv, causal=True, softcap=2.5), want)
    np.testing.assert_array_equal(flash_attn_kvpacked_func(q, kv, causal=True, softcap=2.5), want)
    got = flash_attn_qkvpacked_func(qkv, 0.0, None, True, (-1, -1), 2.5, None, False, True)
    assert len(got) == 3
    np.testing.assert_allclose(got[0], want, **F64)  # the weights path: same to rounding


def test_dropout_keeps_the_drawn_pattern_and_rescales():
    _rng, q, k, v = make_case(20, 30, (2, 1), seed=6)
    p = 0.3
    out, lse, probs = flash_attn_func(
        q, k, v, p, causal=True, return_attn_probs=True, rng=np.random.default_rng(11)
    )
    _want_out, want_lse, weights = reference_batch(q, k, v, causal=True)
    kept = probs >= 0  # FlashAttention's code: a negative probability was dropped
    np.testing.assert_allclose(np.abs(probs), weights, **F64)
    dropped = weights * kept / (1 - p)  # (B, h, N, M)
    v_rep = np.repeat(v, 2, axis=2)  # (B, M, h, d_v)
    np.testing.assert_allclose(out, np.einsum("bhnm,bmhd->bnhd", dropped, v_rep), **F64)
    np.testing.assert_allclose(lse, want_lse, **F64)
    allowed = weights > 0
    assert 0.2 < 1 - kept[allowed].mean() < 0.4  # about p of the allowed weights dropped
    again = flash_attn_func(q, k, v, p, causal=True, rng=np.random.default_rng(11))
    np.testing.assert_array_equal(again, out)  # same generator state, same mask
