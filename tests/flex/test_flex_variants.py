"""docs/kernels.md's table, row by row: each attnlab variant written as a score_mod / mask_mod
gives what ``attnlab.attention`` gives with the variant itself (the attention side is held to
torch by tests/api/), float64 to 1e-10."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab import flex
from attnlab.errors import AttnlabError
from attnlab.masks import ALiBi, Causal, Dense, Padding, SlidingWindow
from tolerances import F64

RNG = np.random.default_rng(66)
B, H, L, S, E = 2, 3, 10, 14, 4
Q, K, V = RNG.standard_normal((B, H, L, E)), RNG.standard_normal((B, H, S, E)), RNG.standard_normal((B, H, S, 3))  # fmt: skip
SLOPES, LENGTHS, BIAS = np.array([0.5, 0.3, 0.1]), np.array([14, 6]), RNG.standard_normal((H, L, S))  # fmt: skip
DOCS = np.repeat([0, 1, 2], [3, 4, 7])  # 14 key positions; queries are the last 10


def _flex(score_mod=None, mask_mod=None, block=4):
    bm = None if mask_mod is None else al.create_block_mask(mask_mod, B, H, L, S, block)
    return al.flex_attention(Q, K, V, score_mod, bm, return_lse=True)


ROWS = {
    "causal": (lambda: _flex(None, flex.causal()), lambda: al.attention(Q, K, V, Causal(), return_lse=True, fully_masked="zero")),
    "causal bottom_right": (lambda: _flex(None, flex.causal(S - L)), lambda: al.attention(Q, K, V, Causal("bottom_right"), return_lse=True)),
    "sliding window": (lambda: _flex(None, flex.sliding_window(3, 2)), lambda: al.attention(Q, K, V, SlidingWindow(left=3, right=2), return_lse=True)),
    "padding": (lambda: _flex(None, lambda b, h, q, kv: kv < LENGTHS[b]), lambda: al.attention(Q, K, V, Padding(LENGTHS), return_lse=True)),
    "document": (lambda: _flex(None, flex.document(DOCS[S - L:], DOCS)), lambda: al.attention(Q, K, V, DOCS[S - L:, None] == DOCS[None, :], return_lse=True)),
    "alibi": (lambda: _flex(flex.alibi(SLOPES)), lambda: al.attention(Q, K, V, ALiBi(SLOPES), return_lse=True)),
    "float bias": (lambda: _flex(lambda s, b, h, q, kv: s + BIAS[h, q, kv]), lambda: al.attention(Q, K, V, BIAS, return_lse=True)),
    "softcap": (lambda: _flex(flex.softcap(0.7)), lambda: al.attention(Q, K, V, softcap=0.7, return_lse=True)),
    "softcap then alibi": (lambda: _flex(lambda s, b, h, q, kv: 0.7 * np.tanh(s / 0.7) - SLOPES[h] * abs(q - kv)), lambda: al.attention(Q, K, V, ALiBi(SLOPES), softcap=0.7, return_lse=True)),
}  # fmt: skip


@pytest.mark.parametrize("row", sorted(ROWS))
def test_each_variant_as_a_mod_equals_attention_with_it(row):
    ours, theirs = ROWS[row]
    (out, lse), (out_a, lse_a) = ours(), theirs()
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)


def test_relative_bias_is_a_table_lookup_by_clipped_distance():
    table = RNG.standard_normal((H, 5))  # R = 2
    j, i = np.meshgrid(np.arange(S), np.arange(L))
    bias = table[:, np.clip(j - i, -2, 2) + 2]  # (H, L, S), by hand
    out, lse = _flex(flex.relative_bias(table))
    out_a, lse_a = al.attention(Q, K, V, bias, return_lse=True)
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)


def test_sinks_as_one_more_key_with_a_zero_value():
    sinks = np.array([0.5, -1.0, 2.0])
    k = np.concatenate([K, np.zeros((B, H, 1, E))], axis=2)  # (B, H, S + 1, E)
    v = np.concatenate([V, np.zeros((B, H, 1, 3))], axis=2)
    out, lse = al.flex_attention(
        Q, k, v, lambda s, b, h, q, kv: np.where(kv == S, sinks[h], s), return_lse=True
    )
    out_a, lse_a = al.attention(Q, K, V, sinks=sinks, return_lse=True)
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)


def test_per_batch_documents():
    docs = np.stack([np.repeat([0, 1], [6, 8]), np.repeat([0, 1, 2, 3], [2, 2, 5, 5])])  # (B, S)
    q_docs = docs[:, S - L :]  # the queries are the last L positions
    out, lse = _flex(None, flex.document(q_docs, docs))
    allowed = q_docs[:, None, :, None] == docs[:, None, None, :]  # (B, 1, L, S), by hand
    out_a, lse_a = al.attention(Q, K, V, allowed, return_lse=True)
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)


def test_causal_within_documents_and_or_masks():
    ids = DOCS[S - L :], DOCS
    out, lse = _flex(None, flex.and_masks(flex.causal(S - L), flex.document(*ids)))
    same_doc = ids[0][:, None] == ids[1][None, :]  # (L, S), by hand
    out_a, lse_a = al.attention(Q, K, V, Causal("bottom_right") + Dense(same_doc), return_lse=True)
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)
    # Either rule: the window, or the first key (a sink-like "global" key).
    out, lse = _flex(None, flex.or_masks(flex.sliding_window(2), lambda b, h, q, kv: kv == 0))
    j, i = np.meshgrid(np.arange(S), np.arange(L))
    out_a, lse_a = al.attention(Q, K, V, ((j >= i - 2) & (j <= i)) | (j == 0), return_lse=True)
    np.testing.assert_allclose(out, out_a, **F64)
    np.testing.assert_allclose(lse, lse_a, **F64)
    with pytest.raises(AttnlabError, match="expected every mask_mod given to and_masks"):
        flex.and_masks(flex.causal(), "causal")
