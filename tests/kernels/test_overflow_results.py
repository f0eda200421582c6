"""Finite inputs whose results overflow: one typed error naming the stage and the table, on
every path (dense, blockwise, forward, backward, trace), and dense and blockwise agreeing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import attnlab as al
from attnlab.cli import app
from attnlab.errors import AttnlabError, NonFiniteInputError, NonFiniteResultError
from attnlab.masks import Causal

Q = [[3.0, -3.0], [1.0, 1.0]]
K = [[-3.0, 3.0], [1.0, 1.0]]
V = [[0.0, -1.0], [1.0, 2.0]]
METHODS = ("dense", "blockwise")


@pytest.mark.parametrize("method", METHODS)
def test_a_backward_pass_past_float64_names_the_table_that_overflowed(method):
    # dP = dO Vᵀ: 1e308 · (1·1 + 1·2) = 3e308 is past float64's 1.8e308.
    with pytest.raises(NonFiniteResultError, match="grad_weights") as info:
        al.attention_backward(Q, K, V, np.full((2, 2), 1e308), Causal(), method=method)
    assert info.value.stage == "backward" and info.value.array == "grad_weights"
    assert "backward" in str(info.value) and "float64" in str(info.value)


@pytest.mark.parametrize("method", METHODS)
def test_a_float32_backward_pass_whose_tables_overflow_answers_from_float64(method):
    big = np.full((2, 2), 1e20, np.float32)  # dP = 1e20 · 1e20 · 2 = 2e40 > 3.4e38
    grads = al.attention_backward(np.float32(Q), np.float32(K), big, big, Causal(), method=method)
    exact = al.attention_backward(np.float64(Q), np.float64(K), np.float64(big),
                                  np.float64(big), Causal(), method=method)  # fmt: skip
    for a, b in zip(grads, exact, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b.astype(np.float32))


@pytest.mark.parametrize("method", METHODS)
def test_a_float32_backward_pass_past_float32_even_in_float64_refuses(method):
    big = np.full((2, 2), 3e38, np.float32)  # dV = Pᵀ dO: row 0 gets 1.5 · 3e38 > 3.4e38
    with pytest.raises(NonFiniteResultError, match="float32"):
        al.attention_backward(np.float32(Q), np.float32(K), big, big, Causal(), method=method)


@pytest.mark.parametrize("method", METHODS)
def test_one_dominant_key_with_a_huge_dp_gets_the_same_gradients_on_every_method(method):
    """A case the fuzz found: dP = dO Vᵀ and D pass float32's range, the row's weight is all on
    key 0, so dS = P ∘ (dP - D) is 0 and the true gradients are finite. Before the float64
    retry, dense answered and blockwise refused."""
    q = np.array([[1500.0]], np.float32)
    k = np.array([[-0.00114844], [-1.0], [-1.0], [-1.0]], np.float32)
    v = np.array([[-1.0, 1e30], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]], np.float32)
    g = np.array([[-1.0, -1e33]], np.float32)
    dq, dk, dv = al.attention_backward(q, k, v, g, method=method)
    assert not dq.any() and not dk.any()  # one key takes all the weight: no score gradient
    np.testing.assert_array_equal(dv, np.vstack([g, np.zeros((3, 2), np.float32)]))


def test_trace_names_the_backward_table_that_overflowed():
    with pytest.raises(NonFiniteResultError, match="grad_weights"):
        al.trace_attention(Q, K, V, Causal(), grad_output=np.full((2, 2), 1e308))


def test_the_cli_backward_trace_is_one_line_and_exit_2_not_a_table_of_nan():
    big = "[[1e308,1e308],[1e308,1e308]]"
    args = ["attention", "--q", str(Q), "--k", str(K), "--v", str(V), "--backward"]
    result = CliRunner().invoke(app, [*args, "--grad-output", big])
    assert result.exit_code == 2, result.output
    assert "backward pass" in result.output and "overflowed" in result.output
    assert "nan" not in result.output.lower()
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("x", [np.zeros((4, 8), np.float32), np.ones((4, 8), np.float32)])
def test_dense_and_blockwise_agree_on_values_near_float32s_top(x):
    # Every weight is 1/4: the output is 1e38 exactly, though the kernels' unnormalised sum
    # of four values reaches 4e38 > 3.4e38.
    v = np.full((4, 8), 1e38, np.float32)
    dense = al.attention(x, x, v, method="dense")
    blockwise = al.attention(x, x, v, method="blockwise")
    np.testing.assert_allclose(dense, 1e38, rtol=1e-6)
    np.testing.assert_allclose(blockwise, 1e38, rtol=1e-6)
    out, weights = al.attention(x, x, v, method="dense", return_weights=True)
    np.testing.assert_allclose(out, 1e38, rtol=1e-6)
    np.testing.assert_allclose(weights, 0.25, rtol=1e-6)


@pytest.mark.parametrize("top", [0.0, 300.0])  # the row sum near 1, and near e^300
@pytest.mark.parametrize("method", METHODS)
def test_a_dp_that_overflows_only_where_the_weight_is_negligible_is_answered(top, method):
    """float64, two keys: the second's weight is e^-700 (1e-304) and its dP = 1e232 · 1e100
    passes float64's range, while every gradient is finite (around 1e28). Gradients are linear
    in dO, so both methods answer from a scaled dO (the dense path refused, the blockwise one
    answered only when its row sum was large: a case the long fuzz found)."""
    q, k = np.array([[1.0]]), np.array([[top], [top - 700.0]])
    v, g = np.array([[1e-306], [1e100]]), np.array([[1e232]])
    dq, dk, dv = al.attention_backward(q, k, v, g, method=method)
    # Closed form in logs: P_1 = e^-700 / (1 + e^-700); dS_1 = P_1 (dP_1 - D) = P_1 P_0 dP_1
    # (dP_0 = 1e-74 is nothing beside it); dS_0 = -dS_1; dq = Σ dS_j k_j; dk_j = dS_j q.
    log_p1 = -700.0 - math.log1p(math.exp(-700.0))
    ds1 = math.exp(log_p1 + 332 * math.log(10)) * (1 - math.exp(log_p1))
    np.testing.assert_allclose(dk[:, 0], [-ds1, ds1], rtol=1e-9)
    np.testing.assert_allclose(dq[0, 0], -700.0 * ds1, rtol=1e-9)
    np.testing.assert_allclose(dv[:, 0], [1e232 * (1 - math.exp(log_p1)), 1e232 * math.exp(log_p1)],
                               rtol=1e-9)  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_a_weight_far_below_the_floor_is_zero_in_a_rescaled_backward_pass(method):
    """The key at 1e237 scores -1e240: its weight is exactly 0, so however huge its dP (1e378)
    and its k, it adds nothing to dq or dk. The blockwise pass weighed it 2^-1017 (its exp2
    floor), which times 1e378 · 1e237 overflowed dq where the dense pass answered 0 (the
    long fuzz's second case). The other keys weigh 1/3 and carry dP - D = 0."""
    q = np.array([[-1000.0]])
    k = np.array([[1e237], [-1.0], [-1.0], [-1.0]])
    v = np.array([[-1e189], [-1.0], [-1.0], [-1.0]])
    dq, dk, dv = al.attention_backward(q, k, v, np.array([[-1e189]]), method=method)
    assert np.array_equal(dq, np.zeros_like(dq)) and np.array_equal(dk, np.zeros_like(dk))
    np.testing.assert_allclose(dv[:, 0], [0.0] + [-1e189 / 3] * 3, rtol=1e-12)  # Pᵀ dO


def test_a_gradient_whose_weighted_dp_overflows_float64_is_still_refused():
    """D = rowsum(dO ∘ O) = rowsum(P ∘ dP) past float64's range: the table overflowed where the
    weights keep it and no wider dtype is left, so no rescaling is tried, even where the
    gradients are finite (dS = 0 here, the two value rows being equal), on both methods."""
    big = np.full((2, 2), 1e160)  # dP = 1e160 · 1e160 · 2 > 1.8e308
    for method in METHODS:
        with pytest.raises(NonFiniteResultError) as info:
            al.attention_backward(np.float64(Q), np.float64(K), big, big, method=method)
        assert (info.value.stage, info.value.array) == ("backward", "grad_weights")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", METHODS)
def test_values_at_the_dtypes_largest_finite_number_give_that_number_back(dtype, method):
    """v = ±finfo.max everywhere: the running sum overflows, log2(max|v| · M) must be taken in
    logarithms (the product is inf), and the weights' rounding must not carry the average past
    max|v|. Equal rows average to themselves: the answer is v's row to the weights' rounding."""
    big = np.finfo(dtype).max
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((4, 8)).astype(dtype), rng.standard_normal((6, 8)).astype(dtype)
    v = np.full((6, 8), big, dtype)
    v[:, ::2] *= -1
    out = al.attention(q, k, v, method=method)
    assert np.isfinite(out).all() and np.abs(out).max() <= big
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(out, np.broadcast_to(v[0], out.shape), rtol=16 * eps)


# -- the fuzz: magnitudes up to each dtype's largest finite value -----------------------------


def _matrix(dtype, rows: int, cols: int):
    top = int(np.log10(np.finfo(dtype).max))
    entry = st.builds(
        lambda sign, mant, exp: sign * mant * 10.0**exp,
        st.sampled_from([-1.0, 1.0]),
        st.floats(1.0, 1.7),
        st.integers(-3, top),
    )
    largest = float(np.finfo(dtype).max)  # the corner itself: v at the dtype's largest value
    entry = st.one_of(entry, st.sampled_from([largest, -largest]))
    return st.lists(entry, min_size=rows * cols, max_size=rows * cols).map(
        lambda xs: np.array(xs, dtype).reshape(rows, cols)
    )


@st.composite
def _case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    n, m = draw(st.sampled_from([(3, 2), (2, 3), (4, 1), (1, 4), (3, 3)]))  # N > M and N < M
    d_k, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    q, k = draw(_matrix(dtype, n, d_k)), draw(_matrix(dtype, m, d_k))
    v, g = draw(_matrix(dtype, m, d_v)), draw(_matrix(dtype, n, d_v))
    mask = draw(st.sampled_from([None, Causal()])) if n <= m else None
    return q, k, v, g, mask


def _outcome(fn):
    try:
        return fn()
    except (NonFiniteInputError, NonFiniteResultError) as exc:
        return type(exc)


def _scale(*arrays) -> float:
    return max(float(np.abs(a.astype(np.float64)).max()) for a in arrays)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_fuzz_no_result_is_non_finite_and_the_methods_agree(case):
    q, k, v, g, mask = case
    eps = float(np.finfo(q.dtype).eps)
    fwd = {m: _outcome(lambda m=m: al.attention(q, k, v, mask, method=m)) for m in METHODS}
    if isinstance(fwd["dense"], type) or isinstance(fwd["blockwise"], type):
        assert fwd["dense"] is fwd["blockwise"], fwd  # both refuse, for the same reason
        return
    for out in fwd.values():
        assert np.isfinite(out).all()
    # A weighted average of value rows: never past max|v|, and the methods differ by rounding.
    top = _scale(v)
    assert np.abs(fwd["dense"]).max() <= top * (1 + 64 * eps)
    assert np.abs(fwd["dense"] - fwd["blockwise"]).max() <= 256 * eps * top
    bwd = {
        m: _outcome(lambda m=m: al.attention_backward(q, k, v, g, mask, method=m)) for m in METHODS
    }
    if isinstance(bwd["dense"], type) or isinstance(bwd["blockwise"], type):
        assert bwd["dense"] is NonFiniteResultError and bwd["blockwise"] is NonFiniteResultError
        return
    for grads in bwd.values():
        assert all(np.isfinite(a).all() for a in grads)
    for a, b in zip(bwd["dense"], bwd["blockwise"], strict=True):
        # Gradients cancel (dS = P ∘ (dP − D)): compare against the size of what cancels.
        big = _scale(g) * _scale(v) * v.shape[-1] * (1 + _scale(q, k)) * k.shape[-2] * 4
        with np.errstate(over="ignore"):
            gap = float(np.abs(a.astype(np.float64) - b).max())
        assert gap <= 1024 * eps * big or not np.isfinite(big)


def test_rng_is_named_when_it_is_not_a_seed_or_a_generator():
    q = np.ones((2, 2))
    for bad in ("x", -1, 1.5, [1, -2]):
        with pytest.raises(AttnlabError, match="rng"):
            al.scaled_dot_product_attention(q, q, q, dropout_p=0.5, rng=bad)


def test_sdpa_agrees_with_attention_near_float32s_top():
    x = np.zeros((1, 4, 8), np.float32)
    v = np.full((1, 4, 8), 1e38, np.float32)
    np.testing.assert_allclose(al.scaled_dot_product_attention(x, x, v), 1e38, rtol=1e-6)
    # Dropout at 0.5 doubles the kept weights: the output may truly pass float32's range.
    try:
        out = al.scaled_dot_product_attention(x, x, v * 3, dropout_p=0.5, rng=0)
    except NonFiniteResultError as exc:
        assert exc.array == "output"
    else:
        assert np.isfinite(out).all()


@pytest.mark.parametrize("saved_lse", [False, True])
def test_a_huge_cancelling_gradient_is_zero_on_both_paths(saved_lse):
    """One key: every weight is exactly 1, so dS = P (dP − δ) is exactly 0 however large dO and V
    are (dP = δ = 1e53, past float32). The float32 call is redone in float64 on both paths; the
    blockwise redo must anchor each row at its maximum, or 1 − 2⁻⁵³ weights leave 1e37 in dS and
    dq overflows float32 where the dense path gives 0 (a case the long fuzz found)."""
    q = np.full((4, 1), -1.0, np.float32)
    k = np.array([[-100.0]], np.float32)
    v = np.array([[-1e27]], np.float32)
    g = np.array([[-1.0], [-1.0], [-1.0], [-1e26]], np.float32)
    lse = al.attention(q, k, v, return_lse=True)[1] if saved_lse else None
    for method in ("dense", "blockwise"):
        dq, dk, dv = al.attention_backward(q, k, v, g, method=method, lse=lse)
        assert np.array_equal(dq, np.zeros_like(dq)) and np.array_equal(dk, np.zeros_like(dk))
        assert dv[0, 0] == np.float32(-1e26 - 3)  # Σ_i P_i0 dO_i, P = 1


def test_a_one_hot_row_with_a_huge_dp_and_key_answers_on_both_methods():
    # The fuzz's float64 case: the query's weight is all on the last key (score 1e67), dP there
    # is -1.6e257 and k there is -1e67. Exactly, dS = P ∘ (dP − D) = 0 (D = dP on that key), so
    # dq = dk = 0 and dv puts dO on the last key. The dense pass took D = rowsum(dO ∘ O), an
    # ulp of 1.6e257 away from dP, and dq = 1e241 · 1e67 overflowed: it refused while the
    # blockwise pass answered. Its rerun now takes D from dP itself.
    q = np.array([[-1.0]])
    k = np.array([[-1.0], [-1.0], [-1.0], [-1e67]])
    v = np.array([[-1.0, -1.0, -1.0]] * 3 + [[-1.625e186, -1e9, -1.0]])
    g = np.array([[1e71, -1e232, -1.0]])
    dq, dk, dv = al.attention_backward(q, k, v, g, method="dense")
    assert (dq == 0).all() and (dk == 0).all()
    np.testing.assert_array_equal(dv, np.vstack([np.zeros((3, 3)), g]))
    bq, bk, bv = al.attention_backward(q, k, v, g, method="blockwise")
    np.testing.assert_array_equal(bv[3], g[0])
    # the blockwise pass gives the far keys its floor weight (about 2^-1016), not 0
    assert np.abs(bv[:3]).max() <= 2.0**-1000 * np.abs(g).max()
    assert np.abs(bq).max() <= 1e-40 and np.abs(bk).max() <= 1e-40


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-200])
def test_a_tiny_scale_after_a_product_that_overflows_answers_as_blockwise_does(scale):
    """q · kᵀ past float64's range (1.2e29 · 1.2e299 · 2) times a scale that brings it back: the
    dense kernel formed the product first and answered NaN. The scale now goes into q first on
    every method, so dense, blockwise and the small path agree on a finite answer: the three
    equal keys share the weight (or, at scale 0, all four do)."""
    q = np.full((3, 2), 1.2e29)
    k = np.full((4, 2), 1.2e299)
    k[1] *= -1
    v = np.arange(8.0).reshape(4, 2)
    want = v.mean(0) if scale == 0.0 else v[[0, 2, 3]].mean(0)
    for method in (*METHODS, "auto"):
        out = al.attention(q, k, v, scale=scale, method=method)
        np.testing.assert_allclose(out, np.broadcast_to(want, out.shape), rtol=1e-12)
        grads = al.attention_backward(q, k, v, np.ones((3, 2)), scale=scale, method=method)
        assert all(np.isfinite(a).all() for a in grads), method
        np.testing.assert_allclose(grads[2].sum(0), [3.0, 3.0], rtol=1e-12)  # Pᵀ dO sums to N


def test_a_dense_score_table_past_the_machines_memory_is_refused_before_any_work():
    """10^6 x 10^6 float32 scores (3.7 TB) on the dense method: refused at once, naming the
    blockwise method, instead of running for hours."""
    x = np.zeros((10**6, 4), np.float32)
    with pytest.raises(AttnlabError, match="method='blockwise'"):
        al.attention(x, x, x, method="dense")
    with pytest.raises(AttnlabError, match="method='blockwise'"):
        al.attention_backward(x, x, x, x, method="dense")
