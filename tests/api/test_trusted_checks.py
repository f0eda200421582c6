"""The checks trusted numerical suites run: gradients against central finite differences in
float64 (first order, as torch.autograd.gradcheck does, and second order through the traced
backward tables), and invariances: threads, tiles, Dask chunks and orders give the same result
to the last bit where the maths computes the same sums, within a named tolerance otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.masks import Causal, Padding, SlidingWindow
from tolerances import GRADCHECK, HESSIAN, REORDERED_F64

MASKS = {
    "none": None,
    "causal": Causal(),
    "window": SlidingWindow(2),
    "padding": Padding([4, 3]),
    "bias": np.random.default_rng(9).standard_normal((5, 4)),
}
METHODS = [("dense", None), ("blockwise", (2, 3))]  # tiles of 2 x 3: every row crosses tiles


def _inputs(seed=0, n=5, m=4, d_k=3, d_v=2, batch=(2,)):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (n, d_k))
    k = rng.standard_normal(batch + (m, d_k))
    v = rng.standard_normal(batch + (m, d_v))
    g = rng.standard_normal(batch + (n, d_v))  # L = Σ output ∘ g
    return q, k, v, g


def _loss(q, k, v, g, mask) -> float:
    return float(np.sum(al.attention(q, k, v, mask, method="dense") * g))


@pytest.mark.parametrize(("method", "block"), METHODS)
@pytest.mark.parametrize("mask", list(MASKS))
def test_gradients_match_central_differences(method, block, mask):
    q, k, v, g = _inputs()
    m = MASKS[mask]
    grads = al.attention_backward(q, k, v, g, m, method=method, block_size=block)
    eps = GRADCHECK["eps"]
    for which, (x, analytic) in enumerate(zip((q, k, v), grads, strict=True)):
        numeric = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            args = [q, k, v]
            up, down = x.copy(), x.copy()
            up[i] += eps
            down[i] -= eps
            args[which] = up
            high = _loss(*args, g, m)
            args[which] = down
            numeric[i] = (high - _loss(*args, g, m)) / (2 * eps)
        gap = np.abs(analytic - numeric)
        assert (gap <= GRADCHECK["atol"] + GRADCHECK["rtol"] * np.abs(numeric)).all(), (
            "qkv"[which],
            float(gap.max()),
        )


def _flat_grad(x: np.ndarray, shapes, g, mask) -> np.ndarray:
    """∂L/∂(q, k, v) from trace_attention's backward tables, at the flat point x."""
    q, k, v = _split(x, shapes)
    t = al.trace_attention(q, k, v, mask, grad_output=g)
    return np.concatenate([t.grad_q.ravel(), t.grad_k.ravel(), t.grad_v.ravel()])


def _split(x, shapes):
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(x[start : start + size].reshape(shape))
        start += size
    return out


@pytest.mark.parametrize("mask", ["none", "causal", "bias"])
def test_second_order_the_traced_gradient_has_a_symmetric_hessian_matching_the_loss(mask):
    q, k, v, g = _inputs(seed=3, batch=())
    m = MASKS[mask] if mask != "bias" else MASKS["bias"]
    shapes = [q.shape, k.shape, v.shape]
    x = np.concatenate([q.ravel(), k.ravel(), v.ravel()])
    rng = np.random.default_rng(4)
    h = HESSIAN["eps"]

    def loss(y):
        return _loss(*_split(y, shapes), g, m)

    def hvp_from_gradient(u, w):  # uᵀ H w: the traced gradient's change along w, read along u
        return float(
            u @ (_flat_grad(x + h * w, shapes, g, m) - _flat_grad(x - h * w, shapes, g, m))
        ) / (2 * h)

    for _ in range(4):
        u, w = rng.standard_normal(x.size), rng.standard_normal(x.size)
        uw, wu = hvp_from_gradient(u, w), hvp_from_gradient(w, u)
        from_loss = (
            loss(x + h * u + h * w) - loss(x + h * u - h * w) - loss(x - h * u + h * w)
            + loss(x - h * u - h * w)
        ) / (4 * h * h)  # fmt: skip
        tol = HESSIAN["atol"] + HESSIAN["rtol"] * abs(from_loss)
        assert abs(uw - wu) <= tol, (uw, wu)  # a Hessian is symmetric
        assert abs(uw - from_loss) <= 100 * tol, (uw, from_loss)  # from_loss rounds more


# -- invariances -------------------------------------------------------------------------------


def _big(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.standard_normal((2, 2, 200, 8)) for _ in range(4))
    return q, k, v, g


@pytest.mark.parametrize("mask", [None, Causal()])
def test_threads_change_no_bit_of_the_forward_and_only_the_rounding_of_gradients(mask):
    q, k, v, g = _big()
    outs = [
        al.attention(q, k, v, mask, method="blockwise", block_size=32, threads=t) for t in (1, 2, 3)
    ]
    for out in outs[1:]:
        assert np.array_equal(out, outs[0])  # each query block is computed by one thread
    dense = [al.attention(q, k, v, mask, method="dense", threads=t) for t in (1, 2)]
    assert np.array_equal(dense[0], dense[1])
    grads = [
        al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=32, threads=t)
        for t in (1, 2, 3)
    ]
    for got in grads[1:]:
        # The backward pass shares the key blocks' gradients among threads and adds their
        # shares in the order they finish: the same maths, other sums.
        for a, b in zip(got, grads[0], strict=True):
            np.testing.assert_allclose(a, b, **REORDERED_F64)


@pytest.mark.parametrize("mask", [None, Causal(), SlidingWindow(17)])
def test_block_sizes_agree_within_rounding(mask):
    q, k, v, g = _big(1)
    ref = al.attention(q, k, v, mask, method="dense")
    ref_grads = al.attention_backward(q, k, v, g, mask, method="dense")
    for block in (1, 7, 32, (16, 64), (200, 13), 512):
        out = al.attention(q, k, v, mask, method="blockwise", block_size=block)
        np.testing.assert_allclose(out, ref, **REORDERED_F64)
        grads = al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=block)
        for a, b in zip(grads, ref_grads, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)


def test_batch_and_query_orders_permute_the_result_bit_for_bit():
    q, k, v, _ = _big(2)
    out = al.attention(q, k, v, Causal(), method="blockwise", block_size=32)
    batch = np.array([1, 0])
    shuffled = al.attention(
        q[batch], k[batch], v[batch], Causal(), method="blockwise", block_size=32
    )
    assert np.array_equal(shuffled, out[batch])  # batch entries never meet
    rows = np.random.default_rng(0).permutation(200)
    free = al.attention(q, k, v, method="dense")
    assert np.array_equal(al.attention(q[..., rows, :], k, v, method="dense"), free[..., rows, :])


def test_key_order_changes_only_the_rounding():
    # Softmax and the weighted sum are sums over keys: another key (tile) order, another order
    # of additions.
    q, k, v, _ = _big(3)
    keys = np.random.default_rng(1).permutation(200)
    for method in ("dense", "blockwise"):
        ref = al.attention(q, k, v, method=method, block_size=None if method == "dense" else 32)
        got = al.attention(q, k[..., keys, :], v[..., keys, :], method=method,
                           block_size=None if method == "dense" else 32)  # fmt: skip
        np.testing.assert_allclose(got, ref, **REORDERED_F64)


def test_dask_chunks_agree_bitwise_along_queries_and_within_rounding_along_keys():
    dist = pytest.importorskip("attnlab.distributed")
    q, k, v, _ = _big(4)
    one = dist.attention(q, k, v, q_chunks=1, kv_chunks=1)
    np.testing.assert_allclose(one, al.attention(q, k, v), **REORDERED_F64)
    for qc in (2, 5):  # without a mask, query chunks are independent rows: the same sums
        assert np.array_equal(dist.attention(q, k, v, q_chunks=qc, kv_chunks=1), one)
    causal = dist.attention(q, k, v, Causal(), q_chunks=1, kv_chunks=1)
    for qc, kc in ((1, 3), (4, 2), (5, 1)):  # key chunks merge partials; causal tiles shift
        got = dist.attention(q, k, v, Causal(), q_chunks=qc, kv_chunks=kc)
        np.testing.assert_allclose(got, causal, **REORDERED_F64)
