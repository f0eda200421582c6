"""merge_attention_states: split-K partial states joined equal attention over all keys.

The oracle is a softmax over all the keys written out here in float64 (and torch's SDPA, which
never splits); each split's state is computed the same plain way over its own keys.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError


def _plain(q, k, v, allowed):
    """Attention by hand over the allowed keys: (out (..., N, d), natural lse (..., N))."""
    s = np.where(allowed, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    top = s.max(axis=-1, keepdims=True)
    safe = np.where(np.isneginf(top), 0.0, top)
    e = np.exp(s - safe)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, (e / np.where(total > 0, total, 1)) @ v, 0.0)
        lse = np.where(total[..., 0] > 0, safe[..., 0] + np.log(total[..., 0]), -np.inf)
    return out, lse


def _split_states(q, k, v, allowed, bounds):
    states = []
    for a, b in itertools.pairwise(bounds):
        part = np.zeros_like(allowed)
        part[..., a:b] = allowed[..., a:b]
        states.append(_plain(q, k, v, part))
    return [s[0] for s in states], [s[1] for s in states]


@pytest.mark.parametrize("causal", [False, True])
def test_merged_splits_equal_full_attention_in_float64(causal):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 6, 4)) for _ in range(3))  # (B, h, N, d)
    n = m = 6
    allowed = np.ones((n, m), bool)
    if causal:  # top-left causal: the last split holds no key for the first rows
        allowed = np.tril(allowed)
    full_out, full_lse = _plain(q, k, v, allowed)
    outs, lses = _split_states(q, k, v, allowed, [0, 2, 3, 6])
    if causal:
        assert np.isneginf(lses[2][..., 0]).all()  # empty splits are really exercised
    out, lse = al.merge_attention_states(outs, lses)
    np.testing.assert_allclose(out, full_out, rtol=0, atol=1e-13)
    np.testing.assert_allclose(lse, full_lse, rtol=0, atol=1e-13)
    # The stacked form gives the same.
    out2, _ = al.merge_attention_states(np.stack(outs), np.stack(lses))
    np.testing.assert_array_equal(out2, out)


def test_base_two_lses_merge_to_base_two():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((5, 3)) for _ in range(3))
    allowed = np.ones((5, 5), bool)
    full_out, full_lse = _plain(q, k, v, allowed)
    outs, lses = _split_states(q, k, v, allowed, [0, 1, 5])
    out, lse2 = al.merge_attention_states(outs, [x / np.log(2) for x in lses], base="2")
    np.testing.assert_allclose(out, full_out, atol=1e-13)
    np.testing.assert_allclose(lse2, full_lse / np.log(2), atol=1e-13)


@pytest.mark.oracle
def test_equal_to_torch_sdpa(torch):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 7, 8)) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in (q, k, v))
    ).numpy()
    outs, lses = _split_states(q, k, v, np.ones((7, 7), bool), [0, 3, 4, 7])
    out, _ = al.merge_attention_states(outs, lses)
    np.testing.assert_allclose(out, want, atol=1e-12)


def test_empty_states_add_nothing_and_all_empty_is_zero():
    outs = np.array([[[1.0, 2.0]], [[np.nan, np.nan]]])  # (S=2, N=1, d=2): the second empty
    out, lse = al.merge_attention_states(outs, np.array([[0.5], [-np.inf]]))
    np.testing.assert_array_equal(out, [[1.0, 2.0]])
    assert lse[0] == 0.5
    out, lse = al.merge_attention_states(outs, np.full((2, 1), -np.inf))
    np.testing.assert_array_equal(out, [[0.0, 0.0]])
    assert np.isneginf(lse[0])


def test_two_equal_states_weigh_half_each():
    # By hand: lse log(e^0 + e^0) = log 2, out the mean of the two.
    out, lse = al.merge_attention_states([np.array([[2.0]]), np.array([[4.0]])], [[0.0], [0.0]])
    assert out[0, 0] == pytest.approx(3.0) and lse[0] == pytest.approx(np.log(2.0))


@pytest.mark.parametrize(
    ("outs", "lses", "base", "error", "words"),
    [
        (np.zeros((2, 3, 4)), np.zeros((2, 4)), "e", ShapeError, "expected lses of shape"),
        (np.zeros((2, 3, 4)), np.zeros((2, 3)), "10", AttnlabError, "expected base"),
        (np.zeros((2, 3, 4)), np.full((2, 3), np.nan), "e", NonFiniteInputError, "lses"),
        (np.zeros((2, 3, 4)), np.full((2, 3), np.inf), "e", NonFiniteInputError, "lses"),
        (np.full((2, 3, 4), np.nan), np.zeros((2, 3)), "e", NonFiniteInputError, "outs"),
        (np.zeros((0, 3, 4)), np.zeros((0, 3)), "e", ShapeError, "at least one state"),
        (
            [np.zeros((2, 3)), np.zeros((3, 3))],
            np.zeros((2, 2)),
            "e",
            ShapeError,
            r"one shape, but got \[\(2, 3\), \(3, 3\)\] instead",
        ),
    ],
)
def test_bad_states_raise_one_error_naming_them(outs, lses, base, error, words):
    with pytest.raises(error, match=words):
        al.merge_attention_states(outs, lses, base=base)
