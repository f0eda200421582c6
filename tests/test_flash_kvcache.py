"""attnlab.flash.flash_attn_with_kvcache: appending in place, pages, rotary, leftpad, batch index.

The expected cache is built here row by row, the expected output by the independent reference
on each sequence's live rows (leftpad_b .. cache_seqlens_b + N_new - 1), and rotary by complex
multiplication (tests/flash_reference.py), never by attnlab.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnlab.flash import flash_attn_with_kvcache
from flash_reference import reference, rotate
from tolerances import F64

B, H, H_K, D = 2, 4, 2, 16


def make(n, s, n_new, seed, batch_cache=B):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, n, H, D))
    k_cache = rng.standard_normal((batch_cache, s, H_K, D))
    v_cache = rng.standard_normal((batch_cache, s, H_K, D))
    k = rng.standard_normal((B, n_new, H_K, D)) if n_new else None
    v = rng.standard_normal((B, n_new, H_K, D)) if n_new else None
    return rng, q, k_cache, v_cache, k, v


def expected(q, cache_k, cache_v, rows, seqlens, leftpad, n_new, **ref):
    """The reference output, sequence by sequence, over each one's live cache rows."""
    slopes = ref.pop("slopes", None)
    out = np.zeros(q.shape)
    for b in range(q.shape[0]):
        live = slice(leftpad[b], seqlens[b] + n_new)
        out[b], _, _ = reference(
            q[b],
            cache_k[rows[b], live],
            cache_v[rows[b], live],
            slopes=None if slopes is None else slopes[b],
            **ref,
        )
    return out


GRID = list(
    itertools.product(
        [(1, 40, 1), (3, 40, 3), (5, 32, 2), (4, 20, 0)],  # (N, cache rows, N_new)
        [False, True],  # causal
        [(-1, -1), (6, 2)],  # window
        [None, True, False],  # rotary: off, interleaved, GPT-NeoX
        [False, True],  # leftpad
        [False, True],  # cache_batch_idx
    )
)
# A fixed rotation through the grid keeps the default run short; each axis keeps every value.
SAMPLED = GRID[::7]


@pytest.mark.parametrize(("sizes", "causal", "window", "rotary", "leftpad", "batch_idx"), SAMPLED)
def test_append_and_attend(sizes, causal, window, rotary, leftpad, batch_idx):
    n, s, n_new = sizes
    if rotary is not None and not n_new:
        rotary = None  # rotary needs new keys, as FlashAttention's
    rng, q, k_cache, v_cache, k, v = make(n, s, n_new, seed=n + s, batch_cache=4)
    seqlens = rng.integers(1, s - max(n, n_new) + 1, B)
    pad = np.array([rng.integers(0, length) for length in seqlens]) if leftpad else np.zeros(B, int)
    rows = rng.permutation(4)[:B] if batch_idx else np.arange(B)
    want_k, want_v = k_cache.copy(), v_cache.copy()
    q_ref, k_new = q, k
    cos = sin = None
    if rotary is not None:
        angle = rng.uniform(0, 2 * np.pi, (s, 6))  # rotary dim 12 of 16
        cos, sin = np.cos(angle), np.sin(angle)
        local = causal or window != (-1, -1)
        steps = np.arange(n) if local else np.zeros(n, int)
        q_ref = rotate(q, cos, sin, seqlens[:, None] + steps, rotary)
        k_new = rotate(k, cos, sin, seqlens[:, None] + np.arange(n_new), rotary)
    for b in range(B):  # the cache as it must look after the append
        if n_new:
            want_k[rows[b], seqlens[b] : seqlens[b] + n_new] = k_new[b]
            want_v[rows[b], seqlens[b] : seqlens[b] + n_new] = v[b]
    out, lse = flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cos,
        sin,
        seqlens,
        cache_batch_idx=rows if batch_idx else None,
        cache_leftpad=pad if leftpad else None,
        causal=causal,
        window_size=window,
        rotary_interleaved=bool(rotary),
        return_softmax_lse=True,
    )
    np.testing.assert_allclose(k_cache, want_k, **F64)  # appended in place, nothing else moved
    np.testing.assert_array_equal(v_cache, want_v)
    want = expected(q_ref, want_k, want_v, rows, seqlens, pad, n_new, causal=causal, window=window)
    np.testing.assert_allclose(out, want, **F64)
    assert lse.shape == (B, H, n)


@pytest.mark.parametrize(
    "features", [{"softcap": 3.0}, {"alibi": True}, {"softcap": 1.5, "alibi": True}]
)
def test_softcap_and_alibi_on_the_cache(features):
    rng, q, k_cache, v_cache, k, v = make(3, 30, 2, seed=8)
    seqlens = np.array([10, 25])
    slopes = rng.uniform(0.1, 0.6, (B, H)) if features.get("alibi") else None
    softcap = features.get("softcap", 0.0)
    out = flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cache_seqlens=seqlens,
        causal=True,
        softcap=softcap,
        alibi_slopes=slopes,
    )
    want = expected(
        q,
        k_cache,
        v_cache,
        np.arange(B),
        seqlens,
        [0, 0],
        2,
        causal=True,
        softcap=softcap,
        slopes=slopes,
    )
    np.testing.assert_allclose(out, want, **F64)


@pytest.mark.parametrize("rotary", [None, True, False])
def test_paged_cache_with_shuffled_pages(rotary):
    page, blocks = 8, 4  # each sequence may hold 32 rows
    rng = np.random.default_rng(21)
    n, n_new = 2, 2
    q = rng.standard_normal((B, n, H, D))
    k_pages = rng.standard_normal((3 * blocks, page, H_K, D))
    v_pages = rng.standard_normal((3 * blocks, page, H_K, D))
    table = rng.permutation(3 * blocks)[: B * blocks].reshape(B, blocks)
    k, v = rng.standard_normal((2, B, n_new, H_K, D))
    seqlens = np.array([13, 29])
    # The contiguous view of each sequence, before and after the append.
    contiguous = [p[table].reshape(B, blocks * page, H_K, D) for p in (k_pages, v_pages)]
    cos = sin = None
    k_new = k
    if rotary is not None:
        angle = rng.uniform(0, 2 * np.pi, (blocks * page, D // 2))
        cos, sin = np.cos(angle), np.sin(angle)
        k_new = rotate(k, cos, sin, seqlens[:, None] + np.arange(n_new), rotary)
    for b in range(B):
        contiguous[0][b, seqlens[b] : seqlens[b] + n_new] = k_new[b]
        contiguous[1][b, seqlens[b] : seqlens[b] + n_new] = v[b]
    untouched = np.setdiff1d(np.arange(3 * blocks), table)
    before = k_pages[untouched].copy()
    out = flash_attn_with_kvcache(
        q,
        k_pages,
        v_pages,
        k,
        v,
        cos,
        sin,
        seqlens,
        block_table=table,
        causal=True,
        rotary_interleaved=bool(rotary),
    )
    np.testing.assert_allclose(k_pages[table].reshape(contiguous[0].shape), contiguous[0], **F64)
    np.testing.assert_array_equal(v_pages[table].reshape(contiguous[1].shape), contiguous[1])
    np.testing.assert_array_equal(k_pages[untouched], before)
    q_ref = q if rotary is None else rotate(q, cos, sin, seqlens[:, None] + np.arange(n), rotary)
    want = expected(q_ref, *contiguous, np.arange(B), seqlens, [0, 0], n_new, causal=True)
    np.testing.assert_allclose(out, want, **F64)


def test_without_seqlens_the_whole_cache_is_attended():
    _rng, q, k_cache, v_cache, _, _ = make(2, 12, 0, seed=4)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, causal=True)
    want = expected(q, k_cache, v_cache, np.arange(B), [12, 12], [0, 0], 0, causal=True)
    np.testing.assert_allclose(out, want, **F64)


def test_an_int_seqlen_serves_every_sequence():
    _rng, q, k_cache, v_cache, k, v = make(1, 12, 1, seed=5)
    out = flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k, v, cache_seqlens=7)
    same = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=np.array([7, 7]))
    np.testing.assert_array_equal(out, same)
    assert (k_cache[:, 7] == k[:, 0]).all()
