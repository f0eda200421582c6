"""Head scores of an encoder (no causal mask): previous-token and next-token both, duplicate
copies on either side, and padded positions left out; each checked against sums done by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnlab.models import ENCODER_KINDS, head_scores

# One layer, one head, four tokens: ids 5, 7, 5, 9 (tokens 0 and 2 are copies of each other).
A = np.array(
    [
        [0.1, 0.2, 0.3, 0.4],
        [0.5, 0.1, 0.3, 0.1],
        [0.2, 0.2, 0.2, 0.4],
        [0.0, 0.1, 0.6, 0.3],
    ]
)


def _run(weights, ids, causal=False, keys=None):
    return SimpleNamespace(
        ids=np.asarray([ids]),
        attention=[np.asarray(weights)[None, None]],  # (B=1, h=1, N, N)
        layers=[SimpleNamespace(causal=causal)],
        keys=None if keys is None else np.asarray([keys], bool),
    )


def test_encoder_kinds_by_hand():
    s = head_scores(_run(A, [5, 7, 5, 9]))
    assert tuple(s.scores) == ENCODER_KINDS
    assert s.scores["previous_token"][0, 0] == pytest.approx((0.5 + 0.2 + 0.6) / 3)
    assert s.scores["next_token"][0, 0] == pytest.approx((0.2 + 0.3 + 0.4) / 3)
    assert s.scores["duplicate_token"][0, 0] == pytest.approx((0.3 + 0.2) / 2)  # both sides
    assert s.scores["first_token"][0, 0] == pytest.approx((0.5 + 0.2 + 0.0) / 3)
    # TransformerLens's measure: the pattern's share of the whole table (4 rows of weight 1).
    assert s.transformer_lens["next_token"][0, 0] == pytest.approx((0.2 + 0.3 + 0.4) / 4)
    assert s.transformer_lens["duplicate_token"][0, 0] == pytest.approx((0.3 + 0.2) / 4)


def test_a_causal_run_keeps_the_decoder_kinds():
    s = head_scores(_run(np.tril(A), [5, 7, 5, 9], causal=True))
    assert tuple(s.scores) == ("previous_token", "induction", "duplicate_token", "first_token")
    assert s.scores["duplicate_token"][0, 0] == pytest.approx(0.2)  # only the earlier copy


def test_padding_is_neither_query_nor_key():
    # Token 3 is padding: its row and column go, and previous/next are among tokens 0..2.
    padded = A.copy()
    padded[:, 3] = 0.0
    s = head_scores(_run(padded, [5, 7, 5, 9], keys=[1, 1, 1, 0]))
    assert s.ids.tolist() == [5, 7, 5]
    assert s.scores["next_token"][0, 0] == pytest.approx((0.2 + 0.3) / 2)
    assert s.scores["previous_token"][0, 0] == pytest.approx((0.5 + 0.2) / 2)
