"""The stepper's backward steps (dV, dA, dS, dQ, dK), their numbers and their errors.

Oracles: torch.autograd on the same small cases (float64, 1e-10), central finite differences of
the stepper's own forward output, and the chapter's example worked by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.errors import AttnlabError
from attnlab.figures.stepper import build_stepper
from tolerances import F64

GRADS = ("grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k")


def _table(fig, name) -> np.ndarray:
    return np.array(fig.tables[name].values, dtype=float)


def _torch_grads(torch, q, k, v, allowed, g, scale):
    """dV, dA, dS, dQ, dK by autograd, with the weights and scores kept to read their grads."""
    t = {
        n: torch.tensor(a, dtype=torch.float64, requires_grad=True)
        for n, a in (("q", q), ("k", k), ("v", v))
    }
    scores = t["q"] @ t["k"].T * scale
    scores.retain_grad()
    masked = scores.masked_fill(~torch.tensor(allowed), float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    weights.retain_grad()
    (weights @ t["v"]).backward(torch.tensor(g, dtype=torch.float64))
    return {
        "grad_v": t["v"].grad.numpy(),
        "grad_weights": weights.grad.numpy(),
        "grad_scores": scores.grad.numpy(),
        "grad_q": t["q"].grad.numpy(),
        "grad_k": t["k"].grad.numpy(),
    }  # fmt: skip


def test_chapter_example_by_hand():
    # Causal: query 1 sees key 1 only (weight 1); query 2 weighs keys [0.1956, 0.8044].
    fig = build_stepper()
    a2 = np.exp([0.0, math.sqrt(2)]) / np.exp([0.0, math.sqrt(2)]).sum()
    da = np.array([[-1.0, 3.0], [-1.0, 3.0]])  # dO Vᵀ with dO all ones: row sums of V
    np.testing.assert_allclose(_table(fig, "grad_weights"), da, **F64)
    delta2 = a2 @ da[1]
    ds2 = a2 * (da[1] - delta2)
    np.testing.assert_allclose(_table(fig, "grad_scores"), [[0, 0], ds2], **F64)
    np.testing.assert_allclose(fig.grad_delta, [-1.0, delta2], **F64)
    np.testing.assert_allclose(_table(fig, "grad_v"), [[1 + a2[0]] * 2, [a2[1]] * 2], **F64)
    k, q = np.array([[-3.0, 3.0], [1.0, 1.0]]), np.array([[3.0, -3.0], [1.0, 1.0]])
    c = 1 / math.sqrt(2)
    np.testing.assert_allclose(_table(fig, "grad_q"), [[0, 0], c * ds2 @ k], **F64)
    np.testing.assert_allclose(_table(fig, "grad_k"), c * np.outer(ds2, q[1]), **F64)


def test_steps_follow_the_output_in_chain_rule_order():
    fig = build_stepper()
    assert [s.id for s in fig.steps][6:] == list(GRADS)
    assert [s.phase for s in fig.steps] == ["forward"] * 6 + ["backward"] * 5
    assert all(set(s.inputs) <= set(fig.tables) for s in fig.steps)
    assert all(s.result in fig.tables for s in fig.steps[1:])
    # The formula and the words follow the scaling toggle.
    assert fig.steps[-1].formula == "dK = dSᵀ Q · 1/√d_k"
    unscaled = build_stepper(scaled=False)
    assert unscaled.steps[-1].formula == "dK = dSᵀ Q · 1"
    assert "scaling is off" in unscaled.steps[-2].explain
    assert "all ones" in fig.steps[6].explain
    assert "all ones" not in build_stepper(grad_output=[[1, 2], [3, 4]]).steps[6].explain


def _cases():
    n = st.integers(1, 4)
    return st.tuples(
        n,
        n,
        st.integers(1, 3),
        st.integers(1, 3),
        st.booleans(),
        st.booleans(),
        st.integers(0, 2**31 - 1),
    )


@settings(max_examples=40, deadline=None)
@given(_cases())
def test_every_backward_table_matches_autograd(torch, case):
    n, m, d_k, d_v, causal, scaled, seed = case
    rng = np.random.default_rng(seed)
    q, k = rng.integers(-3, 4, (n, d_k)).astype(float), rng.integers(-3, 4, (m, d_k)).astype(float)
    v, g = rng.normal(size=(m, d_v)), rng.normal(size=(n, d_v))
    # Block a few pairs by hand, keeping key 1 open so every row has a key.
    blocked = [[i, j] for i in range(n) for j in range(1, m) if rng.random() < 0.3]
    fig = build_stepper(q, k, v, causal=causal, scaled=scaled, blocked=blocked, grad_output=g)
    allowed = np.ones((n, m), dtype=bool)
    if causal:
        allowed &= np.tri(n, m, dtype=bool)
    for i, j in blocked:
        allowed[i, j] = False
    want = _torch_grads(torch, q, k, v, allowed, g, 1 / math.sqrt(d_k) if scaled else 1.0)
    for name in GRADS:
        np.testing.assert_allclose(_table(fig, name), want[name], **F64, err_msg=name)
    np.testing.assert_allclose(_table(fig, "grad_scores").sum(axis=1), 0, **F64)
    np.testing.assert_allclose(_table(fig, "grad_scores")[~allowed], 0, rtol=0, atol=0)


def test_gradients_match_finite_differences_of_the_stepper_itself():
    # No framework: the loss L = Σ dO ∘ output, nudged entry by entry.
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    g = rng.normal(size=(3, 2))
    fig = build_stepper(q, k, v, grad_output=g)

    def loss(**arrays) -> float:
        out = build_stepper(**{"q": q, "k": k, "v": v, **arrays}).tables["output"].values
        return float((np.array(out) * g).sum())

    h = 1e-6
    for name, base in (("q", q), ("k", k), ("v", v)):
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            up, down = base.copy(), base.copy()
            up[idx] += h
            down[idx] -= h
            numeric[idx] = (loss(**{name: up}) - loss(**{name: down})) / (2 * h)
        np.testing.assert_allclose(_table(fig, f"grad_{name}"), numeric, rtol=0, atol=1e-7)


def test_an_empty_row_sends_nothing_back(torch):
    # Query 2 has every key blocked by hand: no weights, so no dA, dS or dQ row, and dK and
    # dV are those of the other rows alone.
    q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    k = [[0.5, 1.0], [1.0, -1.0], [2.0, 0.0]]
    v = [[1.0, 2.0], [3.0, -1.0], [0.0, 1.0]]
    g = [[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]]
    fig = build_stepper(q, k, v, causal=False, blocked=[[1, 0], [1, 1], [1, 2]], grad_output=g)
    assert fig.row_errors[1] and "no gradient" in fig.row_errors[1]
    assert fig.grad_delta[1] is None
    for name in ("grad_weights", "grad_scores", "grad_q"):
        assert fig.tables[name].values[1] == [None] * len(fig.tables[name].values[1])
    keep = [0, 2]
    want = _torch_grads(
        torch, np.array(q)[keep], np.array(k), np.array(v), np.ones((2, 3), bool),
        np.array(g)[keep], 1 / math.sqrt(2),
    )  # fmt: skip
    for name in ("grad_v", "grad_k"):
        np.testing.assert_allclose(_table(fig, name), want[name], **F64)
    np.testing.assert_allclose(_table(fig, "grad_q")[keep], want["grad_q"], **F64)


def test_every_row_empty_leaves_no_numbers():
    fig = build_stepper(causal=False, blocked=[[0, 0], [0, 1], [1, 0], [1, 1]])
    for name in GRADS:
        assert all(x is None for row in fig.tables[name].values for x in row), name
    assert fig.tables["grad_output"].values == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize(
    ("grad_output", "words"),
    [
        ([[1, 2, 3], [4, 5, 6]], "shape (N, d_v) = (2, 2), but got shape (2, 3)"),
        ([[1, 2]], "(2, 2), but got shape (1, 2)"),
        ([[1, 2], [3, float("nan")]], "dO row 2, column 2: expected a number within ±1000"),
        ([[1, 2], [3, 1e4]], "dO row 2, column 2"),
        ([[1, "x"], [3, 4]], "rectangular matrix of numbers"),
    ],
)
def test_a_bad_upstream_gradient_is_named(grad_output, words):
    with pytest.raises(AttnlabError, match=None) as err:
        build_stepper(grad_output=grad_output)
    assert words in str(err.value)


def test_key_value_mismatch_is_named_before_the_gradient():
    with pytest.raises(AttnlabError) as err:
        build_stepper(v=[[1.0, 2.0]], grad_output=[[1.0]])
    assert "grad_output" not in str(err.value)
