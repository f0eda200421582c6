"""The small-problem fast path (kernels/_small.py) against the general path and against torch.

The general path is forced with ``threads=1`` (any option set skips the fast path); the fast
path is checked to have answered (``small_attention`` / ``small_backward`` not None), so a
comparison can never pass by both sides taking the same road. Forward, weights and gradients
must agree bitwise (the fast path runs the dense kernel's operations in the same order), save
where OpenBLAS threads differ (see ``assert_same``).
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import FullyMaskedRowError, NonFiniteInputError, ShapeError
from attnlab.kernels import _small, _small_cores, _small_masks
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64, for_dtype

# (q, k, v) shapes: equal leading axes, broadcasting ones, N != M, d_k != d_v.
SHAPES = [
    ((1, 1, 4, 2), (1, 1, 4, 2), (1, 1, 4, 2)),
    ((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)),
    ((3, 6, 4), (3, 7, 4), (3, 7, 2)),
    ((2, 3, 6, 4), (1, 3, 6, 4), (3, 6, 5)),
    ((2, 1, 5, 3), (2, 4, 5, 3), (2, 4, 5, 3)),
    ((4, 2), (4, 2), (4, 3)),
    ((2, 2, 40, 8), (2, 2, 40, 8), (2, 2, 40, 8)),
    # large enough to share the batch out over the cores (kernels/_small_cores.py) ...
    ((4, 2, 64, 32), (4, 2, 64, 32), (4, 2, 64, 32)),
    # ... and to run one matrix with OpenBLAS pinned to one thread
    ((1, 130, 64), (1, 130, 64), (1, 130, 64)),
]


def assert_same(fast, general, shapes):
    """Bitwise, except where OpenBLAS would run a matmul of the general path on several threads
    and the fast path runs it on one: OpenBLAS may then sum a dot product in another order."""
    (qs, ks, vs), dtype = shapes, fast.dtype
    if qs[-2] * ks[-2] * max(qs[-1], vs[-1]) <= _small_cores.BLAS_THREADED:
        np.testing.assert_array_equal(fast, general)
    else:
        np.testing.assert_allclose(
            fast, general, **(BLOCKWISE_F32 if dtype == np.float32 else BLOCKWISE_F64)
        )


def masks_for(qs, ks):
    """Every mask kind that fits these shapes: specs, sums, bool and float tables."""
    n, m = qs[-2], ks[-2]
    rng = np.random.default_rng(n * 31 + m)
    allowed = rng.random((n, m)) < 0.7
    allowed[:, 0] = True  # every row keeps a key
    bias = rng.standard_normal((n, m))
    bias[~allowed] = -np.inf
    out = [
        None,
        Causal(),
        Causal(align="bottom_right"),
        SlidingWindow(2),
        allowed,
        bias,
        bias.astype(np.float32),
        Dense(allowed[:1, :]),  # one row broadcast to every query
        Causal() + Dense(bias),
    ]
    if len(qs) >= 3:
        batch = qs[0]
        lengths = [m - i % 2 for i in range(batch)]
        out += [Padding(lengths), Causal() + Padding(lengths), SlidingWindow(3) + Padding(lengths)]
    return out


def inputs(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def cases():
    for shapes in SHAPES:
        for dtype in (np.float32, np.float64):
            for i, mask in enumerate(masks_for(shapes[0], shapes[1])):
                for scale in (None, 0.3):
                    yield pytest.param(
                        shapes, dtype, mask, scale, id=f"{shapes}-{dtype.__name__}-{i}-{scale}"
                    )


CASES = list(cases())


@pytest.mark.parametrize(("shapes", "dtype", "mask", "scale"), CASES)
def test_forward_and_weights_equal_the_general_path_bitwise(shapes, dtype, mask, scale):
    q, k, v = inputs(shapes, dtype)
    fast = _small.small_attention(q, k, v, mask, scale, "auto", False)
    assert fast is not None, "the fast path declined a call it should take"
    general = al.attention(q, k, v, mask, scale=scale, threads=1)
    assert fast.dtype == general.dtype == dtype and fast.shape == general.shape
    assert_same(fast, general, shapes)
    assert_same(al.attention(q, k, v, mask, scale=scale), general, shapes)
    out, w = al.attention(q, k, v, mask, scale=scale, return_weights=True)
    out_g, w_g = al.attention(q, k, v, mask, scale=scale, return_weights=True, threads=1)
    assert_same(w, w_g, shapes)
    assert_same(out, out_g, shapes)


@pytest.mark.parametrize(("shapes", "dtype", "mask", "scale"), CASES[::3])
def test_gradients_equal_the_general_path_bitwise(shapes, dtype, mask, scale):
    q, k, v = inputs(shapes, dtype)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    g = np.random.default_rng(9).standard_normal(lead + (q.shape[-2], v.shape[-1])).astype(dtype)
    fast = _small.small_backward(q, k, v, g, mask, scale, "auto")
    assert fast is not None, "the fast path declined a call it should take"
    general = al.attention_backward(q, k, v, g, mask, scale=scale, threads=1)
    for a, b, x in zip(fast, general, (q, k, v), strict=True):
        assert a.shape == b.shape == x.shape and a.dtype == b.dtype == dtype
        assert_same(a, b, shapes)
    for a, b in zip(al.attention_backward(q, k, v, g, mask, scale=scale), general, strict=True):
        assert_same(a, b, shapes)


def same_error(call_fast, call_general, kind):
    with pytest.raises(kind) as fast:
        call_fast()
    with pytest.raises(kind) as general:
        call_general()
    assert str(fast.value) == str(general.value)
    return str(fast.value)


def test_a_fully_masked_row_raises_the_general_error():
    q, k, v = inputs([(2, 4, 3)] * 3, np.float32)
    allowed = np.ones((4, 4), bool)
    allowed[2] = False
    assert _small.small_attention(q, k, v, allowed, None, "auto", False) is None
    message = same_error(
        lambda: al.attention(q, k, v, allowed),
        lambda: al.attention(q, k, v, allowed, threads=1),
        FullyMaskedRowError,
    )
    assert "query row" in message and "2" in message
    g = np.ones((2, 4, 3), np.float32)
    same_error(
        lambda: al.attention_backward(q, k, v, g, allowed),
        lambda: al.attention_backward(q, k, v, g, allowed, threads=1),
        FullyMaskedRowError,
    )


@pytest.mark.parametrize("where", ["q", "k", "v", "grad_output"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_the_general_error(where, bad):
    q, k, v, g = inputs([(1, 1, 4, 2)] * 4, np.float64)
    arrays = {"q": q, "k": k, "v": v, "grad_output": g}
    arrays[where][0, 0, 1, 1] = bad
    if where != "grad_output":
        assert _small.small_attention(q, k, v, Causal(), None, "auto", False) is None
        message = same_error(
            lambda: al.attention(q, k, v, Causal()),
            lambda: al.attention(q, k, v, Causal(), threads=1),
            NonFiniteInputError,
        )
        assert where in message
    assert _small.small_backward(q, k, v, g, Causal(), None, "auto") is None
    same_error(
        lambda: al.attention_backward(q, k, v, g, Causal()),
        lambda: al.attention_backward(q, k, v, g, Causal(), threads=1),
        NonFiniteInputError,
    )


def test_bad_shapes_and_masks_raise_the_general_error():
    q, k, v = inputs([(2, 4, 3), (2, 5, 3), (2, 5, 2)], np.float32)
    same_error(
        lambda: al.attention(q, k[..., :2], v),
        lambda: al.attention(q, k[..., :2], v, threads=1),
        ShapeError,
    )
    wrong = np.ones((4, 4), bool)  # M is 5
    same_error(
        lambda: al.attention(q, k, v, wrong),
        lambda: al.attention(q, k, v, wrong, threads=1),
        ShapeError,
    )
    same_error(
        lambda: al.attention(q, k, v, Padding([1, 2, 3])),
        lambda: al.attention(q, k, v, Padding([1, 2, 3]), threads=1),
        ShapeError,
    )
    g = np.ones((2, 4, 3), np.float32)  # d_v is 2
    same_error(
        lambda: al.attention_backward(q, k, v, g),
        lambda: al.attention_backward(q, k, v, g, threads=1),
        ShapeError,
    )


def test_scores_near_overflow_go_to_the_general_path():
    q, k, v = inputs([(1, 2, 3)] * 3, np.float32)
    q *= np.float32(3e19)
    k *= np.float32(3e19)  # scores near 1e39: float32 tops out at 3.4e38
    assert _small.small_attention(q, k, v, None, None, "auto", False) is None
    same_error(
        lambda: al.attention(q, k, v),
        lambda: al.attention(q, k, v, threads=1),
        NonFiniteInputError,
    )


def test_what_the_fast_path_leaves_to_the_general_one():
    q, k, v = inputs([(2, 4, 3)] * 3, np.float32)
    lists = [row.tolist() for row in (q[0], k[0], v[0])]
    assert _small.small_attention(*lists, None, None, "auto", False) is None  # lists
    assert _small.small_attention(q, k, v.astype(np.float64), None, None, "auto", False) is None
    assert _small.small_attention(q, k, v, None, None, "blockwise", False) is None
    assert _small.small_attention(q, k, v, None, True, "auto", False) is None  # scale=True
    assert _small.small_attention(q, k, v, [[True] * 4] * 4, None, "auto", False) is None
    big = np.zeros((1, 1100, 1))  # a table just over SMALL_BYTES
    assert _small.small_attention(big, big, big, None, None, "dense", False) is None
    # ... and each still gives the general path's answer through attention():
    np.testing.assert_array_equal(al.attention(*lists), al.attention(*lists, threads=1))


def test_rendered_specs_are_kept_and_read_only():
    q, k, v = inputs([(2, 6, 3)] * 3, np.float64)
    al.attention(q, k, v, Causal())
    kept = _small_masks._kept[((Causal(),), 6, 6, 1)]
    assert not kept[1].flags.writeable
    al.attention(q, k, v, Causal())
    assert _small_masks._kept[((Causal(),), 6, 6, 1)] is kept
    np.testing.assert_array_equal(kept[1], ~Causal().allowed(6))


@pytest.mark.parametrize("shape", [(64, 4, 32, 16), (8, 8, 128, 64), (1, 8, 512, 64), (1, 1, 4, 2)])
@pytest.mark.oracle
def test_the_benchmarks_shapes_against_torch(torch, shape):
    """torch's SDPA and autograd agree with the fast path at the shapes ``bench small`` times."""
    q, k, v, g = inputs([shape] * 4, np.float32, seed=3)
    assert _small.small_backward(q, k, v, g, Causal(), None, "auto") is not None
    out = al.attention(q, k, v, Causal())
    dq, dk, dv = al.attention_backward(q, k, v, g, Causal())
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))  # float32, fused
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    t_out.backward(torch.from_numpy(g))
    tol = for_dtype(np.float32)
    np.testing.assert_allclose(out, t_out.detach().numpy(), **tol)
    for ours, theirs in ((dq, tq), (dk, tk), (dv, tv)):
        grad = theirs.grad.numpy()
        np.testing.assert_allclose(ours, grad, rtol=0, atol=1e-4 * max(1.0, np.abs(grad).max()))


def test_the_large_shapes_take_the_roads_they_are_meant_to(monkeypatch):
    """The two large shapes of SHAPES cut the batch and pin OpenBLAS, as their comments say."""
    seen = []
    monkeypatch.setattr(_small_cores, "CORES", 2)
    monkeypatch.setattr(
        _small_cores, "_cut", lambda *a, _cut=_small_cores._cut: seen.append("cut") or _cut(*a)
    )
    monkeypatch.setattr(
        _small_cores,
        "one_blas_thread",
        lambda *a, _pin=_small_cores.one_blas_thread: seen.append("pin") or _pin(),
    )
    for shapes in SHAPES[-2:]:
        q, k, v = inputs(shapes, np.float32)
        assert _small.small_attention(q, k, v, Causal(), None, "auto", False) is not None
    assert seen == ["cut", "pin"]


def test_a_call_from_the_shared_pool_does_not_share_out_again(monkeypatch):
    """attention() called from the pool's own workers must not queue pieces behind itself."""
    from attnlab.kernels._threads import pool_map

    cuts = []
    monkeypatch.setattr(_small_cores, "CORES", 2)
    monkeypatch.setattr(
        _small_cores, "_cut", lambda *a, _cut=_small_cores._cut: cuts.append(1) or _cut(*a)
    )
    q, k, v = inputs(SHAPES[-2], np.float32)
    expected = al.attention(q, k, v, Causal(), threads=1)
    with pool_map(2, 2) as each:
        outs = each(lambda _: al.attention(q, k, v, Causal()), [0, 1])
    assert cuts == []
    for out in outs:
        assert_same(out, expected, SHAPES[-2])
