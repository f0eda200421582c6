"""A refused flash_attn_with_kvcache call leaves the caller's cache as it was, and
apply_rotary refuses a bad argument by name instead of indexing past its tables."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError, NonFiniteInputError, NonFiniteResultError, ShapeError
from attnlab.flash import apply_rotary, flash_attn_with_kvcache

B, S, H, H_K, D = 2, 8, 4, 2, 8


def arrays(seed=0, dtype=np.float64, n=3, n_new=2):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, n, H, D)).astype(dtype)
    k_cache, v_cache = (rng.standard_normal((B, S, H_K, D)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((B, n_new, H_K, D)).astype(dtype) for _ in range(2))
    return q, k_cache, v_cache, k, v


def poisoned(name, value):
    q, k_cache, v_cache, k, v = arrays()
    {"q": q, "k": k, "v": v}[name][1, 1, 0, 3] = value
    return q, k_cache, v_cache, k, v


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_input_refused_before_the_cache_is_written(name, value):
    q, k_cache, v_cache, k, v = poisoned(name, value)
    before = k_cache.copy(), v_cache.copy()
    with pytest.raises(NonFiniteInputError, match=f"in {name}\\b"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=[2, 5], causal=True)
    np.testing.assert_array_equal(k_cache, before[0])
    np.testing.assert_array_equal(v_cache, before[1])


def test_non_finite_rows_in_the_cache_are_named_and_nothing_is_appended():
    q, k_cache, v_cache, k, v = arrays()
    k_cache[1, 4, 0, 0] = np.nan  # sequence 1's live rows are 0 .. 4
    before = k_cache.copy(), v_cache.copy()
    with pytest.raises(NonFiniteInputError, match="k_cache's live rows of sequence 1"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=[2, 5])
    np.testing.assert_array_equal(k_cache, before[0])
    np.testing.assert_array_equal(v_cache, before[1])


def test_a_nan_row_that_the_append_overwrites_is_not_a_key():
    q, k_cache, v_cache, k, v = arrays()
    k_cache[0, 2] = np.nan  # sequence 0's new rows land at 2 and 3
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=[2, 5])
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(k_cache[0, 2:4], k[0])


def test_a_paged_cache_is_untouched_by_a_refused_call():
    q, _, _, k, v = arrays()
    rng = np.random.default_rng(1)
    pages_k, pages_v = (rng.standard_normal((6, 4, H_K, D)) for _ in range(2))
    table = np.array([[5, 0], [3, 1]])
    q[0, 0, 0, 0] = np.nan
    before = pages_k.copy(), pages_v.copy()
    with pytest.raises(NonFiniteInputError, match=r"in q\b"):
        flash_attn_with_kvcache(q, pages_k, pages_v, k, v, cache_seqlens=3, block_table=table)
    np.testing.assert_array_equal(pages_k, before[0])
    np.testing.assert_array_equal(pages_v, before[1])


def test_a_refusal_from_the_attention_itself_puts_the_overwritten_rows_back():
    # Finite inputs whose scores overflow float32: refused by the attention, after the append.
    q, k_cache, v_cache, k, v = arrays(dtype=np.float32)
    q *= np.float32(1e20)
    k *= np.float32(1e20)
    before = k_cache.copy(), v_cache.copy()
    with pytest.raises(AttnlabError):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=[2, 5])
    np.testing.assert_array_equal(k_cache, before[0])
    np.testing.assert_array_equal(v_cache, before[1])


def test_turned_keys_past_the_caches_dtype_are_refused_before_the_append():
    q, k_cache, v_cache, k, v = arrays(dtype=np.float16)
    k[:] = 60000
    cos = np.full((S, D // 2), 2.0)  # a pair (a, a) turns to (0, 4a): past float16's 65504
    before = k_cache.copy()
    with pytest.raises(NonFiniteResultError, match=r"expected k to fit float16"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, cos, cache_seqlens=[2, 5])
    np.testing.assert_array_equal(k_cache, before)


# apply_rotary on its own.
X = np.random.default_rng(2).standard_normal((2, 3, 4, 8))
COS, SIN = np.cos(np.ones((6, 2))), np.sin(np.ones((6, 2)))
POS = np.array([[0, 1, 2], [3, 4, 5]])


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((X, COS, SIN, POS + 1), AttnlabError, r"positions from 0 to 5 .* position 6"),
        ((X, COS, SIN, POS - 1), AttnlabError, r"positions from 0 to 5 .* position -1"),
        ((X[0], COS, SIN, POS), ShapeError, r"expected x of shape"),
        ((X, COS[0], SIN, POS), ShapeError, r"expected cos of shape"),
        ((X, COS, SIN[:, :1], POS), ShapeError, r"cos and sin of one shape"),
        ((X, COS, SIN, POS[0]), ShapeError, r"expected positions"),
        ((X, COS, SIN, POS[:, :2]), ShapeError, r"positions to be integers of shape \(2, 3\)"),
        ((X, COS, SIN, POS * 1.0), ShapeError, r"positions to be integers"),
    ],
)
def test_apply_rotary_names_the_bad_argument(args, error, match):
    with pytest.raises(error, match=match):
        apply_rotary(*args, interleaved=True)


def test_apply_rotary_still_turns_within_its_tables():
    got = apply_rotary(X, COS, SIN, POS, interleaved=False)
    angle = 1.0  # every table row holds the angle 1 (cos(1), sin(1))
    pairs = X[..., :2] + 1j * X[..., 2:4]  # features (0, 2) and (1, 3) turn together
    turned = pairs * np.exp(1j * angle)
    np.testing.assert_allclose(got[..., :2], turned.real, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[..., 2:4], turned.imag, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[..., 4:], X[..., 4:])


# Found by tests/flash/test_flash_fuzz.py.
def test_rotary_tables_with_nan_or_inf_are_refused_before_the_append():
    q, k_cache, v_cache, k, v = arrays()
    cos, sin = np.cos(np.ones((S, 2))), np.sin(np.ones((S, 2)))
    sin[3, 1] = np.inf
    before = k_cache.copy()
    with pytest.raises(NonFiniteInputError, match="rotary_sin"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=[2, 5])
    np.testing.assert_array_equal(k_cache, before)


def test_rotary_into_an_integer_cache_is_refused():
    q, k_cache, v_cache, k, v = (a.astype(np.int64) for a in arrays())
    cos, sin = np.cos(np.ones((S, 2))), np.sin(np.ones((S, 2)))
    with pytest.raises(AttnlabError, match="floating-point cache with rotary"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=1)


def test_an_empty_batch_with_rotary_returns_an_empty_output():
    q, k_cache, v_cache, k, v = (a[:0] for a in arrays())
    cos, sin = np.cos(np.ones((S, 2))), np.sin(np.ones((S, 2)))
    try:
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=1)
    except AttnlabError:  # attnlab may refuse an empty axis, by name; never a numpy ValueError
        return
    assert out.shape == (0, 3, H, D)
