"""attention(): a plain-loop reference, the chapter's exercises, and the properties of §6.2-6.5."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from reference import loop_attention, loop_batched
from tolerances import F32, F64

FAST = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**32 - 1)


# -- the reference: the chapter's five steps as nested loops over i and j ------------------------


def test_loop_reference_on_the_worked_example():
    # The reference itself reproduces §6.2 before it judges anything else.
    out, w = loop_attention([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], allowed=le)
    np.testing.assert_allclose(out, [[0, -1], [0.804, 1.413]], atol=5e-4)
    np.testing.assert_allclose(w, [[1, 0], [0.196, 0.804]], atol=5e-4)


def le(i, j):
    return j <= i


# -- random problems with every kind of mask ----------------------------------------------------


@dataclass
class Case:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: object
    allowed: object  # (index, i, j) -> bool, written from the mask's definition, not its code
    bias: object
    scale: float | None


MASK_KINDS = [
    "none",
    "causal",
    "bottom_right",
    "window",
    "padding",
    "causal+padding",
    "dense_bool",
    "bool_array",
    "float_array",
]


@st.composite
def cases(draw, kinds=MASK_KINDS):
    kind = draw(st.sampled_from(kinds))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    if "padding" in kind and not lead:
        lead = (2,)
    n = draw(st.integers(1, 5))
    m = draw(st.integers(n, 6))  # N <= M keeps a key for every row under every banded mask
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    scale = draw(st.one_of(st.none(), st.floats(0.1, 2.0)))
    rng = np.random.default_rng(draw(seeds))
    # k and v may broadcast: any leading axis may be 1 for them.
    k_lead = tuple(1 if rng.random() < 0.3 else d for d in lead)
    v_lead = tuple(1 if rng.random() < 0.3 else d for d in k_lead)
    q = rng.normal(size=lead + (n, d_k))
    k = rng.normal(size=k_lead + (m, d_k))
    v = rng.normal(size=v_lead + (m, d_v))
    lengths = rng.integers(1, m + 1, size=lead[0]) if lead else None
    table = rng.random(lead + (n, m)) < 0.5
    table[..., 0] = True  # one allowed key per row
    bias = rng.normal(size=(n, m))
    bias[rng.random((n, m)) < 0.3] = -np.inf
    bias[:, -1] = 0.0

    allowed, add = None, None
    if kind == "none":
        mask = None
    elif kind == "causal":
        mask, allowed = Causal(), lambda b, i, j: j <= i
    elif kind == "bottom_right":
        mask, allowed = Causal("bottom_right"), lambda b, i, j: j <= i + m - n
    elif kind == "window":
        w = int(rng.integers(1, 4))
        mask, allowed = SlidingWindow(w), lambda b, i, j: i - w < j <= i
    elif kind == "padding":
        mask, allowed = Padding(lengths), lambda b, i, j: j < lengths[b[0]]
    elif kind == "causal+padding":
        mask = Causal() + Padding(lengths)
        allowed = lambda b, i, j: j <= i and j < lengths[b[0]]  # noqa: E731
    elif kind == "dense_bool":
        mask, allowed = Dense(table), lambda b, i, j: table[b][i, j]
    elif kind == "bool_array":
        mask, allowed = table, lambda b, i, j: table[b][i, j]
    else:  # float_array: added to the scaled scores, finite values act as a bias
        mask, add = bias, lambda b, i, j: bias[i, j]
    return Case(q, k, v, mask, allowed, add, scale)


@FAST
@given(cases())
def test_attention_equals_the_loop_reference(case):
    out, weights = al.attention(
        case.q, case.k, case.v, mask=case.mask, scale=case.scale, return_weights=True
    )
    ref_out, ref_weights = loop_batched(
        case.q, case.k, case.v, case.allowed, case.bias, scale=case.scale
    )
    np.testing.assert_allclose(out, ref_out, **F64)
    np.testing.assert_allclose(weights, ref_weights, **F64)
    assert out.shape == ref_out.shape and weights.shape == ref_weights.shape


@FAST
@given(cases())
def test_weight_rows_sum_to_one(case):
    _, weights = al.attention(case.q, case.k, case.v, mask=case.mask, return_weights=True)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, **F64)


@FAST
@given(cases(kinds=["padding", "causal+padding"]))
def test_padding_columns_get_exactly_zero_weight(case):
    _, weights = al.attention(case.q, case.k, case.v, mask=case.mask, return_weights=True)
    lengths = case.mask.lengths if isinstance(case.mask, Padding) else case.mask.parts()[1].lengths
    for b, length in enumerate(lengths):
        assert np.all(weights[b, ..., length:] == 0.0)


# -- §6.5: no positions, no order ----------------------------------------------------------------


@FAST
@given(st.integers(1, 7), st.integers(1, 6), seeds, st.booleans())
def test_self_attention_is_permutation_equivariant(n, d, seed, batched):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=((2,) if batched else ()) + (n, d))
    perm = rng.permutation(n)
    p = np.eye(n)[perm]  # the permutation matrix: (P X)[i] = X[perm[i]]
    shuffled = al.attention(p @ x, p @ x, p @ x)
    np.testing.assert_allclose(shuffled, p @ al.attention(x, x, x), **F64)


@FAST
@given(st.integers(2, 7), st.integers(1, 4), seeds)
def test_causal_row_ignores_later_tokens(n, d, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(n, d)) for _ in range(3))
    i = int(rng.integers(0, n - 1))
    q2, k2, v2 = (a.copy() for a in (q, k, v))
    for a in (q2, k2, v2):
        a[i + 1 :] = rng.normal(scale=10, size=a[i + 1 :].shape)
    before = al.attention(q, k, v, mask=Causal())
    after = al.attention(q2, k2, v2, mask=Causal())
    np.testing.assert_allclose(after[: i + 1], before[: i + 1], **F64)
    # Without the mask the same change reaches row i: the test can tell the difference.
    assert not np.allclose(al.attention(q2, k2, v2)[i], al.attention(q, k, v)[i])


# -- the chapter's exercises --------------------------------------------------------------------


def test_exercise_scores_2_0_0_with_values_1_4_7():
    # One query whose already-scaled scores against three keys are 2, 0, 0.
    out = al.attention([[2.0]], [[1.0], [0.0], [0.0]], [[1.0], [4.0], [7.0]], scale=1.0)
    assert abs(out[0, 0] - 1.959) <= 0.01  # the chapter's answer, within its 0.01
    e2 = math.exp(2)
    assert out[0, 0] == pytest.approx((e2 * 1 + 4 + 7) / (e2 + 2), abs=1e-12)


@FAST
@given(seeds, st.floats(0.1, 30))
def test_exercise_first_causal_row_is_1_0_0_whatever_the_scores(seed, spread):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(scale=spread, size=(3, 4)) for _ in range(3))
    out, weights = al.attention(q, k, v, mask=Causal(), return_weights=True)
    np.testing.assert_array_equal(weights[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(out[0], v[0])


# -- scale and dtypes ---------------------------------------------------------------------------


def _qkv(seed=0, shape=(3, 4), dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=shape).astype(dtype) for _ in range(3))


def test_scale_one_is_unscaled():
    q, k, v = _qkv(1)
    ref, _ = loop_attention(q, k, v, scale=1.0)
    np.testing.assert_allclose(al.attention(q, k, v, scale=1.0), ref, **F64)
    # Any scale c is the same as feeding c·q unscaled.
    np.testing.assert_allclose(
        al.attention(q, k, v, scale=0.3), al.attention(0.3 * q, k, v, scale=1.0), **F64
    )
    # The default is 1/sqrt(d_k), d_k = 4.
    np.testing.assert_allclose(al.attention(q, k, v), al.attention(q, k, v, scale=0.5), **F64)


def test_integers_compute_in_float64():
    q, k, v = [[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]]
    out, weights = al.attention(q, k, v, mask=Causal(), return_weights=True)
    assert out.dtype == weights.dtype == np.float64
    np.testing.assert_array_equal(
        out, al.attention(*(np.array(a, float) for a in (q, k, v)), Causal())
    )
    assert al.attention(np.array(q, np.int8), k, v).dtype == np.float64


def test_float32_stays_float32():
    q, k, v = _qkv(2, dtype=np.float32)
    out, weights = al.attention(q, k, v, mask=Causal(), return_weights=True)
    assert out.dtype == weights.dtype == np.float32
    ref, _ = loop_attention(q, k, v, allowed=le)
    np.testing.assert_allclose(out, ref, **F32)
    # An additive float64 mask does not promote float32 inputs.
    assert al.attention(q, k, v, mask=Causal().additive(3)).dtype == np.float32
    assert al.attention(q, k, v.astype(np.float64)).dtype == np.float64


def test_cross_attention_shapes():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 1, 3, 5))  # (B, 1, N, d_k)
    k = rng.normal(size=(4, 7, 5))  # (h, M, d_k)
    v = rng.normal(size=(1, 4, 7, 2))  # (1, h, M, d_v)
    out, weights = al.attention(q, k, v, return_weights=True)
    assert out.shape == (2, 4, 3, 2)
    assert weights.shape == (2, 4, 3, 7)
    ref, _ = loop_batched(q, k, v)
    np.testing.assert_allclose(out, ref, **F64)


def test_check_finite_false_lets_nan_through():
    q, k, v = _qkv(4)
    v[1, 0] = np.nan
    out = al.attention(q, k, v, check_finite=False)
    assert np.isnan(out[:, 0]).all() and np.isfinite(out[:, 1:]).all()


@pytest.mark.parametrize(
    ("q", "k"),
    [
        ([[1e200]], [[1e200], [-1e200]]),  # scores +inf and -inf: the max shift gives inf - inf
        ([[1e200, 1e200]], [[1e200, -1e200], [1.0, 1.0]]),  # inf + -inf inside one dot product
    ],
    ids=["inf", "nan"],
)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_overflowing_scores_are_refused_not_nan(q, k, method):
    v = [[1.0], [2.0]]
    with pytest.raises(al.NonFiniteInputError, match=r"overflowed .* query row \(0,\)"):
        al.attention(q, k, v, method=method)


def test_blockwise_names_the_overflowing_row_in_a_later_band():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 40, 4)), rng.normal(size=(3, 30, 4)), rng.normal(size=(3, 30, 2))
    q[2, 37, 0], k[2, 5, 0] = 1e200, 1e200
    for method in ("dense", "blockwise"):
        with pytest.raises(al.NonFiniteInputError, match=r"query row \(2, 37\), key 5"):
            al.attention(q, k, v, method=method, block_size=8)


def test_large_but_safe_inputs_pass_the_overflow_bound():
    # max|q|·max|k|·d_k·scale exceeds float32's range, but no score actually overflows.
    q = np.array([[1e30, 0.0], [0.0, 1.0]], np.float32)
    k = np.array([[0.0, 1e30], [1.0, 0.0]], np.float32)
    v = np.eye(2, dtype=np.float32)
    for method in ("dense", "blockwise"):
        out = al.attention(q, k, v, method=method)
        assert np.isfinite(out).all()


@pytest.mark.parametrize(
    ("q", "k", "dtype", "words"),
    [
        # Finite scores of ±1.7e308: the base-2 kernels' score · log2(e) would overflow (NaN, or
        # a row of -inf that passed for equal weights), so both paths refuse them alike.
        ([[1.3e154], [1.0]], [[1.3e154], [1.0]], np.float64, r"within ±6.23e\+307"),
        ([[1.3e154]], [[-1.3e154], [-1.17e154]], np.float64, r"is -1.69e\+308 in query row"),
        # Scores of 30 and 60, but q · scale · log2(e) overflows float32 before any score.
        ([[3e38]], [[1e-37], [2e-37]], np.float32, r"max\|q\|·scale below 1.18e\+38"),
    ],
    ids=["huge-score", "huge-negative-score", "huge-q"],
)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_scores_too_near_overflow_for_base_2_are_refused_by_every_path(q, k, dtype, words, method):
    q, k = np.array(q, dtype), np.array(k, dtype)
    v = np.arange(1.0, k.shape[0] + 1, dtype=dtype)[:, None]  # (M, 1)
    g = np.ones((q.shape[0], 1), dtype)
    with pytest.raises(al.NonFiniteInputError, match=words):
        al.attention(q, k, v, scale=1.0, method=method)
    with pytest.raises(al.NonFiniteInputError, match=words):
        al.attention_backward(q, k, v, g, scale=1.0, method=method)
