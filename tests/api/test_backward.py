"""attention_backward without torch: finite differences, blockwise == dense, the trace's chain
rule and the chapter's example by hand, errors, dispatch, dtypes and memory."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.api import backward
from attnlab.kernels import blockwise_backward
from attnlab.kernels._threads import pool_map
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import BLOCKWISE_F64, CHAPTER, F64

# Central differences with step 1e-6 on float64: truncation ~1e-12, round-off ~1e-10.
FINITE_DIFF = {"rtol": 0.0, "atol": 1e-7}
FAST = settings(max_examples=30, deadline=None)

Q = [[3, -3], [1, 1]]
K = [[-3, 3], [1, 1]]
V = [[0, -1], [1, 2]]


# -- finite differences: the gradient of L = Σ output ∘ grad_output, independent of torch ------


def _loss(q, k, v, g, mask, scale):
    return float(np.sum(al.attention(q, k, v, mask, scale=scale, method="dense") * g))


def _numeric(q, k, v, g, mask, scale, eps=1e-6):
    grads = []
    for which in range(3):
        args = [q.copy(), k.copy(), v.copy()]
        x = args[which]
        grad = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            x[i] += eps
            up = _loss(*args, g, mask, scale)
            x[i] -= 2 * eps
            down = _loss(*args, g, mask, scale)
            x[i] += eps
            grad[i] = (up - down) / (2 * eps)
        grads.append(grad)
    return grads


FD_CASES = {
    "none": (None, (), 3, 4),
    "causal": (Causal(), (), 4, 4),
    "window": (SlidingWindow(2), (2,), 4, 5),
    "padding+causal": (Padding([2, 4]) + Causal(), (2,), 4, 4),
    "additive": (Dense(np.array([[0.0, -np.inf, 0.5], [1.0, 0.0, -np.inf]])), (), 2, 3),
}


@pytest.mark.parametrize("method", ["dense", "blockwise"])
@pytest.mark.parametrize("name", sorted(FD_CASES))
def test_gradients_match_central_differences(name, method):
    mask, lead, n, m = FD_CASES[name]
    rng = np.random.default_rng(len(name))
    q, k = rng.normal(size=lead + (n, 3)), rng.normal(size=(m, 3))  # k broadcast over lead
    v, g = rng.normal(size=lead + (m, 2)), rng.normal(size=lead + (n, 2))
    got = al.attention_backward(q, k, v, g, mask, scale=0.8, method=method, block_size=(2, 3))
    for a, b in zip(got, _numeric(q, k, v, g, mask, 0.8), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, **FINITE_DIFF)


def test_finite_differences_can_fail():
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.normal(size=(3, 2)) for _ in range(4))
    wrong = al.attention_backward(q, k, v, g, scale=0.5)[1]  # the gradient at another scale
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(wrong, _numeric(q, k, v, g, None, 0.8)[1], **FINITE_DIFF)


# -- blockwise == dense ---------------------------------------------------------------------------


@st.composite
def problems(draw):
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n = draw(st.integers(1, 12))
    m = draw(st.integers(n, 14))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["none", "causal", "window", "padding", "bool", "additive"]))
    mask = {
        "none": None,
        "causal": Causal(),
        "window": SlidingWindow(int(rng.integers(1, m + 1))) + Causal(align="bottom_right"),
        "padding": Padding(rng.integers(1, m + 1, size=2).tolist()),
        "bool": Dense(np.tril(np.ones((n, m), bool)) | (rng.random((n, m)) < 0.5)),
        "additive": Dense(np.where(rng.random((n, m)) < 0.3, -np.inf, rng.normal(size=(n, m)))),
    }[kind]
    if kind == "padding":
        lead = (2,) + lead[1:]
    if kind == "additive":
        mask.array[:, 0] = 0.0  # every row keeps key 0
    q = rng.normal(size=lead + (n, d_k)) * draw(st.sampled_from([0.1, 1.0, 4.0]))
    k, v = rng.normal(size=(m, d_k)), rng.normal(size=lead + (m, d_v))
    g = rng.normal(size=lead + (n, d_v))
    block = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    return q, k, v, g, mask, block, draw(st.sampled_from([1, 2]))


@FAST
@given(problems())
def test_blockwise_equals_dense(p):
    q, k, v, g, mask, block, threads = p
    dense = al.attention_backward(q, k, v, g, mask, method="dense")
    tiles = al.attention_backward(
        q, k, v, g, mask, method="blockwise", block_size=block, threads=threads
    )
    for a, b in zip(tiles, dense, strict=True):
        np.testing.assert_allclose(a, b, **BLOCKWISE_F64)


def test_row_logsumexp_of_the_forward_pass():
    from attnlab.core._validate import validate
    from attnlab.kernels import blockwise

    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(2, 9, 4)) * 3, rng.normal(size=(2, 11, 4)), rng.normal(size=(11, 3))
    x = validate(q, k, v, Causal(align="bottom_right"), scale=0.9)
    lse = np.empty((2, 9))
    blockwise.run(x, 2, 3, 2, lse=lse)
    t = al.trace_attention(q, k, v, Causal(align="bottom_right"), scale=0.9)
    np.testing.assert_allclose(lse, al.logsumexp(t.masked), **BLOCKWISE_F64)


# -- the trace: the chain rule's tables ----------------------------------------------------------


def test_trace_tables_satisfy_the_chain_rule():
    rng = np.random.default_rng(5)
    q, k, v, g = rng.normal(size=(5, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2)), None
    g = rng.normal(size=(5, 2))
    t = al.trace_attention(q, k, v, SlidingWindow(3, align="bottom_right"), grad_output=g)
    p, dp, ds = t.weights, t.grad_weights, t.grad_scores
    np.testing.assert_array_equal(t.grad_output, g)
    np.testing.assert_allclose(t.grad_v, p.T @ g, **F64)  # dV = Pᵀ dO
    np.testing.assert_allclose(dp, g @ v.T, **F64)  # dP = dO Vᵀ
    np.testing.assert_allclose(ds, p * (dp - (dp * p).sum(-1, keepdims=True)), **F64)
    np.testing.assert_allclose(t.grad_q, ds @ k * t.scale, **F64)  # dQ = dS K · scale
    np.testing.assert_allclose(t.grad_k, ds.T @ q * t.scale, **F64)  # dK = dSᵀ Q · scale
    # softmax ignores a shift of its row: the gradient of each row of scores sums to 0
    np.testing.assert_allclose(ds.sum(-1), 0.0, **F64)
    assert np.all(ds[np.isneginf(t.masked)] == 0.0)  # blocked pairs: no gradient at all
    grads = al.attention_backward(q, k, v, g, t.mask)
    for a, b in zip((t.grad_q, t.grad_k, t.grad_v), grads, strict=True):
        np.testing.assert_allclose(a, b, **F64)


def test_trace_backward_of_the_chapters_example_by_hand():
    # §6.2's two tokens, causal, L = sum of the output (grad_output all ones).
    t = al.trace_attention(Q, K, V, Causal(), grad_output=np.ones((2, 2)))
    w = 1 / (1 + math.exp(math.sqrt(2)))  # row 2's weight on key 1: 0.196
    # dV = Pᵀ dO = [[1, w], [0, 1 - w]] @ ones: each key's total weight, in both columns
    np.testing.assert_allclose(t.grad_v, [[1 + w, 1 + w], [1 - w, 1 - w]], **F64)
    np.testing.assert_allclose(t.grad_v, [[1.196, 1.196], [0.804, 0.804]], **CHAPTER)
    np.testing.assert_allclose(t.grad_weights, [[-1, 3], [-1, 3]], **F64)  # dO Vᵀ: Σ of v_j
    # Row 1 sees one key: its weight is 1 whatever its score, so its gradient is 0.
    r = 4 * w * (1 - w)  # row 2: P ∘ (dP − D) with D = 3 − 4w
    np.testing.assert_allclose(t.grad_scores, [[0, 0], [-r, r]], **F64)
    np.testing.assert_allclose(t.grad_q, [[0, 0], [4 * r / math.sqrt(2), -2 * r / math.sqrt(2)]])
    np.testing.assert_allclose(t.grad_q, [[0, 0], [1.780, -0.890]], **CHAPTER)
    np.testing.assert_allclose(t.grad_k, [[-0.445, -0.445], [0.445, 0.445]], **CHAPTER)


def test_trace_renders_the_backward_tables():
    t = al.trace_attention(Q, K, V, Causal(), grad_output=np.ones((2, 2)))
    names = [name for name, _, _ in t.stages()]
    assert names[5:] == ["grad_output", "grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k"]
    text = str(t)
    assert "7. grad_v  dV = Aᵀ dO" in text and "1.196" in text and "backward:" in text
    assert t._repr_html_().count("<table>") == 11


def test_trace_without_grad_output_is_unchanged():
    t = al.trace_attention(Q, K, V, Causal())
    assert [name for name, _, _ in t.stages()][-1] == "output" and len(t.stages()) == 5
    assert t.grad_output is None and t.grad_q is None and "grad" not in str(t)


# -- errors, dtypes, dispatch --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_bad_grad_output_shape_is_named(method):
    with pytest.raises(al.ShapeError, match=r"grad_output.*\(2, 2\).*grad_output.shape=\(2, 3\)"):
        al.attention_backward(Q, K, V, np.ones((2, 3)), method=method)
    with pytest.raises(al.ShapeError, match="grad_output"):
        al.attention_backward(Q, K, V, [1.0, 1.0], method=method)
    with pytest.raises(al.ShapeError, match="grad_output"):
        al.trace_attention(Q, K, V, grad_output=np.ones((1, 2, 2)))


def test_non_finite_grad_output_is_named():
    with pytest.raises(al.NonFiniteInputError, match=r"grad_output.*\(1, 0\)"):
        al.attention_backward(Q, K, V, [[1.0, 1.0], [np.nan, 1.0]])
    with pytest.raises(al.AttnlabError, match="grad_output"):
        al.attention_backward(Q, K, V, [["a", "b"], ["c", "d"]])


@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_fully_masked_row_raises_as_in_the_forward_pass(method):
    q = np.ones((2, 3, 2))
    with pytest.raises(al.FullyMaskedRowError, match="Padding"):
        al.attention_backward(q, q, q, q, Padding([3, 0]), method=method, block_size=2)


def test_other_errors_are_attentions():
    with pytest.raises(al.ShapeError, match="d_k"):
        al.attention_backward([[1, 2]], [[1, 2, 3]], [[1]], [[1.0]])
    with pytest.raises(al.AttnlabError, match="method"):
        al.attention_backward(Q, K, V, np.ones((2, 2)), method="fast")
    with pytest.raises(al.NonFiniteInputError, match="q"):
        al.attention_backward([[np.inf, 0]], K, V, [[1.0, 1.0]])


def test_dtypes_follow_the_forward_pass():
    q32 = np.asarray(Q, np.float32)
    for method in ("dense", "blockwise"):
        assert {a.dtype for a in al.attention_backward(q32, q32, q32, q32, method=method)} == {
            np.dtype(np.float32)
        }
        ints = al.attention_backward(Q, K, V, [[1, 1], [1, 1]], method=method)
        assert {a.dtype for a in ints} == {np.dtype(np.float64)}


def test_auto_switches_to_blockwise_over_the_budget(monkeypatch):
    calls = []
    real = blockwise_backward.run
    monkeypatch.setattr(
        backward.blockwise_backward, "run", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    g = np.ones((2, 2))
    small = al.attention_backward(Q, K, V, g, Causal())
    assert calls == []  # a 32-byte table fits the default budget
    big = al.attention_backward(Q, K, V, g, Causal(), memory_budget=31)
    assert calls == [1]  # it does not fit 31 bytes
    for a, b in zip(small, big, strict=True):
        np.testing.assert_allclose(a, b, **BLOCKWISE_F64)


# -- memory: the blockwise backward grows with N, not N x M -------------------------------------


def _extra_bytes(n: int, mask=None, d: int = 16) -> int:
    """Peak bytes traced during one blockwise backward, beyond its inputs and outputs."""
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, n, d), dtype=np.float32) for _ in range(4))
    # One thread, so the tile buffers are this thread's, made by the first call (with two, a
    # pool thread that had no work before makes its own during the traced call). An open
    # pool_map keeps OpenBLAS to one thread, as threads=2 would: unpinned, its own threads
    # fight over the small tile matmuls (measured 20x slower on a loaded 2-core machine).
    call = dict(mask=mask, method="blockwise", block_size=256, threads=1)
    with pool_map(2, 2):
        al.attention_backward(q, k, v, g, **call)  # tile buffers exist before we look
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            grads = al.attention_backward(q, k, v, g, **call)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak - before - sum(a.nbytes for a in grads)


def test_blockwise_memory_grows_linearly():
    e1, e2, e4 = (_extra_bytes(n) for n in (512, 1024, 2048))
    # Doubling N adds about as much again (linear); an N x M table would add 3x, then 12x.
    assert e4 - e2 < 3 * (e2 - e1)
    table = 2048 * 2048 * 4  # the dense score table at N = 2048: 16 MiB
    assert e4 < table / 8
    assert _extra_bytes(2048, Causal()) < table / 8  # a rendered diagonal tile's mask: 0.3 MiB
