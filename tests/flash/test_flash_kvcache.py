"""attnlab.flash.flash_attn_with_kvcache: appending in place, pages, rotary, leftpad, batch index.

The expected cache is built here row by row, the expected output by the independent reference
on each sequence's live rows (leftpad_b .. cache_seqlens_b + N_new - 1), and rotary by complex
multiplication (tests/flash_reference.py), never by attnlab.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_flash_grid import full_grid

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


# FlashAttention's test_flash_attn_kvcache grid (seqlen pairs, head widths and every switch).
KV_PAIRS = [
    (1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048),
    (16, 20000), (1, 128 * 1024), (16, 128 * 1024), (128, 128),
]  # fmt: skip
KV_AXES = [
    KV_PAIRS,
    [32, 59, 64, 80, 128, 256],
    [False, True],
    [False, True],
    [False, True],
    [False, True],
    [True, False],
    [0.0, 0.5, 1.0],
    [False, True],
    [None, 256],
    [False, True],
    ["mha", "mqa", "gqa"],
]  # pair, d, causal, local, alibi, new_kv, seqlen_new_eq_seqlen_q, rotary_fraction,
#    rotary_interleaved, paged_kv_block_size, has_leftpad, mha_type


def rotation(axes, count, seed=0):
    """A fixed sample of the grid: each axis's values repeated to ``count`` and shuffled once
    with a fixed seed, so every value appears and the switches mix."""
    rng = np.random.default_rng(seed)
    columns = [rng.permutation(np.resize(np.arange(len(axis)), count)) for axis in axes]
    return [
        tuple(axis[col[j]] for axis, col in zip(axes, columns, strict=True)) for j in range(count)
    ]


KV_SAMPLE = rotation([[p for p in KV_PAIRS if max(p) <= 2048]] + KV_AXES[1:], 12)


def kvcache_grid_case(case, seed=0):
    (n, s), d, causal, local, alibi, new_kv, same_len, fraction, interleaved, page, pad, mha = case
    if n > s and new_kv:
        return  # FlashAttention skips these
    rng = np.random.default_rng(seed)
    h, h_k = 6, {"mha": 6, "mqa": 1, "gqa": 3}[mha]
    rotary = (int(fraction * d) // 16) * 16 if new_kv else 0  # a multiple of 16, as there
    window = tuple(int(x) for x in rng.integers(0, s, 2)) if local else (-1, -1)
    n_new = n if same_len else int(rng.integers(1, n + 1))
    q = rng.standard_normal((B, n, h, d))
    k, v = rng.standard_normal((2, B, n_new, h_k, d)) if new_kv else (None, None)
    if page is None:
        k_store, v_store = rng.standard_normal((2, B, s, h_k, d))
        table = None
        views = [
            k_store.copy(),
            v_store.copy(),
        ]  # (B, S, h_k, d): the cache as each sequence sees it
    else:
        blocks = -(-s // page) * 3
        k_store, v_store = rng.standard_normal((2, B * blocks, page, h_k, d))
        table = rng.permutation(B * blocks).reshape(B, blocks)
        views = [x[table].reshape(B, blocks * page, h_k, d) for x in (k_store, v_store)]
    reach = n if (causal or local) and rotary else (n_new if new_kv else 0)
    seqlens = rng.integers(0 if new_kv else 1, s - reach + 1, B)
    leftpad = np.array([rng.integers(0, x) if x > 0 else 0 for x in seqlens]) if pad else None
    slopes = rng.random((B, h)) * 0.3 if alibi else None
    cos = sin = None
    q_ref, k_new = q, k
    if rotary:
        angle = rng.uniform(0, 2 * np.pi, (views[0].shape[1], rotary // 2))
        cos, sin = np.cos(angle), np.sin(angle)
        steps = np.arange(n) if causal or local else np.zeros(n, int)
        q_ref = rotate(q, cos, sin, seqlens[:, None] + steps, interleaved)
        k_new = rotate(k, cos, sin, seqlens[:, None] + np.arange(n_new), interleaved)
    for b in range(B):
        if new_kv:
            views[0][b, seqlens[b] : seqlens[b] + n_new] = k_new[b]
            views[1][b, seqlens[b] : seqlens[b] + n_new] = v[b]
    out = flash_attn_with_kvcache(
        q, k_store, v_store, k, v, cos, sin, seqlens, None, leftpad, table, causal=causal,
        window_size=window, rotary_interleaved=interleaved, alibi_slopes=slopes,
    )  # fmt: skip
    after = [k_store, v_store] if table is None else [
        x[table].reshape(views[0].shape[:3] + (d,)) for x in (k_store, v_store)
    ]  # fmt: skip
    np.testing.assert_allclose(after[0], views[0], **F64)
    np.testing.assert_array_equal(after[1], views[1])
    pads = np.zeros(B, int) if leftpad is None else leftpad
    want = expected(
        q_ref, *views, np.arange(B), seqlens, pads, n_new if new_kv else 0,
        causal=causal, window=window, slopes=slopes,
    )  # fmt: skip
    np.testing.assert_allclose(out, want, **F64)


@pytest.mark.parametrize("case", KV_SAMPLE, ids=str)
def test_flash_attn_kvcache_grid(case):
    kvcache_grid_case(case)


@pytest.mark.grid
def test_flash_attn_kvcache_full_grid(request):
    full_grid(request)
    for case in itertools.product(*KV_AXES):
        kvcache_grid_case(case)
