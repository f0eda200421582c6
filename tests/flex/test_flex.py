"""attnlab.flex_attention against flex attention written out by hand in numpy (every pair scored,
modified and masked, one softmax per row), on both kernels; the block mask's tiles, sparsity and
repr by hand; and that mask_mod is never shown a tile the block mask skips."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab import flex
from attnlab.api.attention import attention as real_attention
from attnlab.flex import attention as flex_module
from tolerances import F64

RNG = np.random.default_rng(6)


def by_hand(q, k, v, score_mod, mask_mod, scale, group):
    """Flex attention's definition, pair by pair: (out, lse)."""
    batch, heads, n, _ = q.shape
    m = k.shape[2]
    out = np.zeros((batch, heads, n, v.shape[3]))
    lse = np.full((batch, heads, n), -np.inf)
    for b in range(batch):
        for h in range(heads):
            kb, vb = k[min(b, k.shape[0] - 1), h // group], v[min(b, v.shape[0] - 1), h // group]
            for i in range(n):
                z = np.full(m, -np.inf)
                for j in range(m):
                    if mask_mod is None or mask_mod(b, h, i, j):
                        s = float(q[b, h, i] @ kb[j]) * scale
                        z[j] = s if score_mod is None else score_mod(s, b, h, i, j)
                if np.isfinite(z).any():
                    top = z.max()
                    w = np.exp(z - top)
                    lse[b, h, i] = top + np.log(w.sum())
                    out[b, h, i] = (w / w.sum()) @ vb
    return out, lse


def hand_alibi(slopes):
    return lambda s, b, h, i, j: s - slopes[h] * abs(i - j)


CASES = {
    "alibi+causal": (flex.alibi([0.5, 0.25, 0.1, 0.05]), flex.causal(), hand_alibi([0.5, 0.25, 0.1, 0.05]), lambda b, h, i, j: j <= i),
    "relative+window": (flex.relative_bias([[0.1, -0.2, 0.3]] * 4), flex.sliding_window(3, 1), lambda s, b, h, i, j: s + [0.1, -0.2, 0.3][min(max(j - i, -1), 1) + 1], lambda b, h, i, j: i - 3 <= j <= i + 1),
    "softcap+document": (flex.softcap(1.5), flex.document(np.repeat([0, 1, 2], [5, 9, 6])), lambda s, b, h, i, j: 1.5 * np.tanh(s / 1.5), lambda b, h, i, j: (i >= 5) + (i >= 14) == (j >= 5) + (j >= 14)),
    "arbitrary+empty rows": (lambda s, b, h, q, kv: s * s - h, flex.causal(-7), lambda s, b, h, i, j: s * s - h, lambda b, h, i, j: j <= i - 7),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_flex_attention_equals_the_definition(case, method):
    score_mod, mask_mod, hand_score, hand_mask = CASES[case]
    q, k, v = RNG.standard_normal((2, 4, 20, 3)), RNG.standard_normal((2, 2, 20, 3)), RNG.standard_normal((2, 2, 20, 2))  # fmt: skip
    bm = al.create_block_mask(mask_mod, None, None, 20, 20, BLOCK_SIZE=(4, 8))
    out, lse = al.flex_attention(q, k, v, score_mod, bm, enable_gqa=True, return_lse=True)
    out_h, lse_h = by_hand(q, k, v, hand_score, hand_mask, 1 / np.sqrt(3), 2)
    np.testing.assert_allclose(out, out_h, **F64)
    np.testing.assert_allclose(lse, lse_h, **F64)


def test_block_mask_by_hand():
    bm = al.create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 5, 4, BLOCK_SIZE=2)
    # Tiles of rows {0,1},{2,3},{4 + a padded row} by keys {0,1},{2,3}.
    np.testing.assert_array_equal(bm.kinds[0, 0], [[1, 0], [2, 1], [1, 1]])
    assert bm.sparsity() == pytest.approx(100 * (1 - 5 * 4 / 20))  # -> 0 %: 5 tiles of 4 pairs
    assert bm.shape == (1, 1, 5, 4)
    assert "sparsity=0.00%" in repr(bm)
    assert repr(bm).endswith("+.\n#+\n++")


def test_skipped_tiles_never_reach_mask_mod(method):
    seen = []

    def rule(b, h, q, kv):
        rows, cols = q.reshape(-1, 1), kv.reshape(1, -1)  # (r, 1), (1, c)
        seen.append(np.broadcast_arrays(rows, cols))
        return (kv <= q) & (kv > q - 6)

    bm = al.create_block_mask(rule, None, None, 32, 32, BLOCK_SIZE=4)
    seen.clear()
    q, k, v = (RNG.standard_normal((1, 1, 32, 2)) for _ in range(3))
    al.flex_attention(q, k, v, flex.softcap(3.0), bm)
    al.flex_attention(q, k, v, lambda s, b, h, qi, kv: s, bm)
    for qi, kv in seen:
        kinds = bm.kinds[0, 0][qi // 4, kv // 4]
        assert (kinds == 1).all(), "mask_mod saw a tile the block mask allows or skips whole"
    assert seen and bm.sparsity() > 50


def test_gradients_by_finite_differences(method):
    # The one oracle beside torch: central differences of sum(g ∘ out) in float64.
    q, k, v = RNG.standard_normal((1, 2, 6, 3)), RNG.standard_normal((1, 1, 6, 3)), RNG.standard_normal((1, 1, 6, 2))  # fmt: skip
    g = RNG.standard_normal((1, 2, 6, 2))
    bm = al.create_block_mask(flex.causal(), None, None, 6, 6, BLOCK_SIZE=2)
    mod = flex.relative_bias([0.3, -0.1, 0.2])
    grads = al.flex_attention_backward(q, k, v, g, mod, bm, enable_gqa=True)
    for x, grad in zip((q, k, v), grads, strict=True):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            x[idx] += 1e-6
            up = (g * al.flex_attention(q, k, v, mod, bm, enable_gqa=True)).sum()
            x[idx] -= 2e-6
            down = (g * al.flex_attention(q, k, v, mod, bm, enable_gqa=True)).sum()
            x[idx] += 1e-6
            numeric[idx] = (up - down) / 2e-6
        np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("score_mod", [None, flex.softcap(2.0), lambda s, b, h, q, kv: s - 0.1 * h])
def test_float32_stays_float32_within_float32s_error(score_mod, method):
    q, k, v = (RNG.standard_normal((1, 2, 40, 8)) for _ in range(3))
    bm = al.create_block_mask(flex.causal(), None, None, 40, 40, BLOCK_SIZE=16)
    out64, lse64 = al.flex_attention(q, k, v, score_mod, bm, return_lse=True)
    f32 = (x.astype(np.float32) for x in (q, k, v))
    out, lse = al.flex_attention(*f32, score_mod, bm, return_lse=True)
    assert out.dtype == lse.dtype == np.float32
    np.testing.assert_allclose(out, out64, rtol=0, atol=2e-5)
    np.testing.assert_allclose(lse, lse64, rtol=0, atol=2e-5)


MODS = {
    "none": (None, None),
    "softcap": (flex.softcap(1.3), lambda s, b, h, i, j: 1.3 * np.tanh(s / 1.3)),
    "alibi": (flex.alibi([0.3, 0.7]), hand_alibi([0.3, 0.7])),
    "arbitrary": (lambda s, b, h, q, kv: np.cos(s) + b - h * q, lambda s, b, h, i, j: np.cos(s) + b - h * i),
}  # fmt: skip
RULES = {
    "none": lambda b, h, i, j: True,
    "window": lambda b, h, i, j: j - 2 <= i <= j + 1,
    "checker": lambda b, h, i, j: (i + j + b + h) % 3 != 0,
    "per batch": lambda b, h, i, j: j < 2 + 3 * b,
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mod=st.sampled_from(sorted(MODS)),
    rule=st.sampled_from(sorted(RULES)),
    n=st.integers(1, 9),
    m=st.integers(1, 9),
    bq=st.integers(1, 6),
    bk=st.integers(1, 6),
    batch=st.integers(1, 2),
)
def test_any_shape_and_tiling_equals_the_definition(mod, rule, n, m, bq, bk, batch):
    score_mod, hand_score = MODS[mod]
    hand_rule = RULES[rule]

    def mask_mod(b, h, q, kv):  # the same rule on index arrays
        return np.vectorize(hand_rule)(b, h, q, kv).astype(bool)

    q = RNG.standard_normal((batch, 2, n, 3))
    k, v = RNG.standard_normal((batch, 1, m, 3)), RNG.standard_normal((batch, 1, m, 2))
    bm = al.create_block_mask(mask_mod, batch, 2, n, m, BLOCK_SIZE=(bq, bk))
    out, lse = al.flex_attention(q, k, v, score_mod, bm, enable_gqa=True, return_lse=True)
    out_h, lse_h = by_hand(q, k, v, hand_score, hand_rule, 1 / np.sqrt(3), 2)
    np.testing.assert_allclose(out, out_h, **F64)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_h))
    np.testing.assert_allclose(lse[np.isfinite(lse)], lse_h[np.isfinite(lse_h)], **F64)


def test_the_blockwise_kernel_never_renders_a_skipped_tile(monkeypatch):
    from attnlab.flex._mask import FlexMask

    rendered = []
    real_block = FlexMask.block

    def block(self, rows, cols, n, m, lead_ndim):
        rendered.append((rows, cols))
        return real_block(self, rows, cols, n, m, lead_ndim)

    monkeypatch.setattr(FlexMask, "block", block)
    q, k, v = (RNG.standard_normal((1, 2, 600, 4)) for _ in range(3))
    bm = al.create_block_mask(flex.sliding_window(40), None, None, 600, 600, BLOCK_SIZE=64)
    pinned = functools.partial(real_attention, method="blockwise")
    monkeypatch.setattr(flex_module, "attention", pinned)
    out = al.flex_attention(q, k, v, None, bm)
    for rows, cols in rendered:
        kinds = bm.kinds[0, 0, rows[0] // 64 : (rows[1] - 1) // 64 + 1, cols[0] // 64 : (cols[1] - 1) // 64 + 1]  # fmt: skip
        assert (kinds != 0).any(), f"rendered {rows} x {cols}, which the block mask skips"
    assert rendered and bm.sparsity() > 60
    window = np.abs(np.subtract.outer(np.arange(600), np.arange(600))) <= 40
    keep = window & (np.arange(600)[:, None] >= np.arange(600)[None, :])  # left=40, right=0
    np.testing.assert_allclose(out, real_attention(q, k, v, keep), **F64)
