"""The stepper's softcap and sink steps against hand computation in numpy: the capped table is
c · tanh(s / c) of the scaled one, the mask is added to it, the sink joins each row's divisor and
its share is what the weights fall short of 1 by; a row the mask empties still says so.
(tests/web/test_models_web_oracle.py holds the same steps to transformers' Gemma 2 and gpt-oss.)"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.figures import build_stepper

RNG = np.random.default_rng(7)
Q, K, V = (RNG.normal(size=(4, 3)) * 2 for _ in range(3))


def _numbers(table) -> np.ndarray:
    return np.array([[-np.inf if x == "-inf" else np.nan if x is None else x for x in row]
                     for row in table.values], dtype=float)  # fmt: skip


def _by_hand(softcap=None, sink=None, causal=True):
    s = Q @ K.T / np.sqrt(3)  # (N, M)
    capped = s if softcap is None else softcap * np.tanh(s / softcap)
    masked = capped + np.where(np.tril(np.ones((4, 4))) > 0, 0, -np.inf) if causal else capped
    top = masked.max(axis=1, keepdims=True)
    if sink is not None:
        top = np.maximum(top, sink)
    e = np.exp(masked - top)
    extra = 0 if sink is None else np.exp(sink - top)
    total = e.sum(axis=1, keepdims=True) + extra
    return capped, masked, e / total, (extra / total).ravel() if sink is not None else None


@pytest.mark.parametrize("causal", [True, False])
def test_softcap_and_sink_against_hand_computation(causal):
    fig = build_stepper(Q, K, V, causal=causal, softcap=1.5, sink=0.7)
    capped, masked, weights, share = _by_hand(1.5, 0.7, causal)
    np.testing.assert_allclose(_numbers(fig.tables["capped"]), capped, rtol=1e-12)
    np.testing.assert_allclose(_numbers(fig.tables["masked"]), masked, rtol=1e-12)
    np.testing.assert_allclose(_numbers(fig.tables["weights"]), weights, rtol=1e-12)
    sink = _numbers(fig.tables["sink"])
    assert np.all(sink[:, 0] == 0.7)
    np.testing.assert_allclose(sink[:, 1], share, rtol=1e-12)
    np.testing.assert_allclose(sink[:, 1], 1 - weights.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(_numbers(fig.tables["output"]), weights @ V, rtol=1e-12)
    assert fig.tables["masked"].label == "Mask added: capped + M"
    assert [s.id for s in fig.steps] == ["inputs", "scores", "scaled", "capped", "masked",
                                         "weights", "output"]  # fmt: skip
    # The softmax working divides by the sink's exp too: its last entry.
    row = fig.softmax[2]
    assert row.weights[-1] == pytest.approx(share[2]) and len(row.exps) == 5


def test_a_sink_alone_keeps_the_backward_steps_and_a_cap_alone_has_no_sink():
    fig = build_stepper(Q, K, V, sink=-1.0)
    assert "grad_q" in [s.id for s in fig.steps] and "capped" not in fig.tables
    capped = build_stepper(Q, K, V, softcap=3.0)
    assert "sink" not in capped.tables and capped.softcap == 3.0 and capped.sink is None
    np.testing.assert_allclose(_numbers(capped.tables["weights"]), _by_hand(3.0)[2], rtol=1e-12)


def test_a_row_the_mask_empties_keeps_its_message_with_a_sink():
    fig = build_stepper(Q, K, V, blocked=[[0, 0]], sink=0.2, softcap=2.0)
    assert fig.row_errors[0] and fig.tables["sink"].values[0][1] is None
    _, _, weights, share = _by_hand(2.0, 0.2)
    np.testing.assert_allclose(fig.tables["sink"].values[1][1], share[1], rtol=1e-12)
    np.testing.assert_allclose(fig.tables["weights"].values[3], weights[3], rtol=1e-12)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"softcap": 0.0}, "expected softcap from above 0"),
    ({"softcap": -2.0}, "expected softcap from above 0"),
    ({"sink": float("nan")}, "expected sink within ±1000"),
    ({"sink": "big"}, "expected sink to be a number"),
])  # fmt: skip
def test_bad_variants_are_refused_by_name(kwargs, words):
    with pytest.raises(AttnlabError, match=words):
        build_stepper(Q, K, V, **kwargs)
