"""Blockwise attention keeps the dense contract: same results, same errors, less memory.

The dense path (``method="dense"``) is the reference: blockwise must match it within
BLOCKWISE_F64 / BLOCKWISE_F32 for every shape, tile size, dtype, scale and mask, and raise the
same error with the same message whenever dense raises.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.core.masks import Causal, Dense, Padding, SlidingWindow, as_mask
from attnlab.kernels import _tiles, blockwise
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64

PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tol(dtype) -> dict:
    return BLOCKWISE_F32 if np.dtype(dtype) == np.float32 else BLOCKWISE_F64


def outcome(fn):
    """The result of fn(), or the type and message of the AttnlabError it raised."""
    try:
        return fn()
    except al.AttnlabError as exc:
        return type(exc), str(exc)


def assert_same(dense, tiled, dtype):
    if isinstance(dense, tuple):
        assert tiled == dense  # the same error, word for word
    else:
        assert not isinstance(tiled, tuple), tiled
        assert tiled.dtype == dense.dtype and tiled.shape == dense.shape
        np.testing.assert_allclose(tiled, dense, **tol(dtype))


# -- strategies ---------------------------------------------------------------------------------


@st.composite
def masks(draw, lead: tuple[int, ...], n: int, m: int):
    """None, one of every mask kind, or a sum of two or three of them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def one():
        kind = draw(
            st.sampled_from(["causal", "window", "padding", "dense_bool", "dense_float", "array"])
        )
        align = draw(st.sampled_from(["top_left", "bottom_right"]))
        if kind == "causal":
            return Causal(align)
        if kind == "window":
            return SlidingWindow(draw(st.integers(1, m + 1)), align)
        if kind == "padding" and lead:
            return Padding(rng.integers(1, m + 1, size=lead[0]))
        # A table with its own leading axes (some of size 1) or none; mostly allowed, so that
        # most draws leave every row a key, but some rows end up fully masked.
        shape = tuple(draw(st.sampled_from([1, s])) for s in lead)[: draw(st.integers(0, 2))]
        shape = shape + (draw(st.sampled_from([1, n])), draw(st.sampled_from([1, m])))
        allowed = rng.random(shape) < draw(st.sampled_from([0.5, 0.9, 1.0]))
        allowed[..., 0] |= draw(st.booleans())  # often keep key 0 for every row
        if kind in ("dense_bool", "padding"):
            return Dense(allowed)
        bias = np.where(allowed, rng.normal(scale=2.0, size=shape), -np.inf)
        return bias if kind == "array" else Dense(bias)

    count = draw(st.integers(0, 3))
    if count == 0:
        return None
    if count == 1:
        return one()  # a plain array stays an array: attention() wraps it itself
    total = as_mask(one())
    for _ in range(count - 1):
        total = total + as_mask(one())
    return total


@st.composite
def problems(draw):
    """q, k, v with broadcasting leading axes, a mask, a scale, a tile size."""
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n, m = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    dk, dv = draw(st.integers(1, 6)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def arr(rows, width):
        # Each input keeps or drops (to 1) each leading axis: they broadcast to ``lead``.
        own = tuple(s if draw(st.booleans()) else 1 for s in lead)[
            draw(st.integers(0, len(lead))) :
        ]
        return rng.normal(size=own + (rows, width)).astype(dtype)

    q, k, v = arr(n, dk), arr(m, dk), arr(m, dv)
    big = dtype == np.float64  # float64 keeps 1e-12 even where scores reach the hundreds
    scale = draw(
        st.one_of(
            st.none(),
            st.floats(-30, 30) if big else st.floats(-2, 2),
        )
    )
    bq = draw(st.sampled_from([1, 2, 3, 7, 16, 64]))
    bk = draw(st.sampled_from([1, 2, 5, 8, 16, 64]))
    return q, k, v, draw(masks(lead, n, m)), scale, (bq, bk), dtype


# -- equivalence --------------------------------------------------------------------------------


@PROPERTY
@given(problems(), st.sampled_from([1, 2]))
def test_blockwise_equals_dense(problem, threads):
    q, k, v, mask, scale, block, dtype = problem
    dense = outcome(lambda: al.attention(q, k, v, mask, scale=scale, method="dense"))
    tiled = outcome(
        lambda: al.attention(
            q, k, v, mask, scale=scale, method="blockwise", block_size=block, threads=threads
        )
    )
    assert_same(dense, tiled, dtype)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 3, 4]))
def test_rows_blocked_in_most_tiles_but_not_overall(seed, block):
    # Each row may see one key, chosen at random: in every other tile the row has nothing, and
    # the online softmax must carry it through those tiles without a NaN.
    rng = np.random.default_rng(seed)
    n, m = 13, 17
    allowed = np.zeros((n, m), bool)
    allowed[np.arange(n), rng.integers(0, m, size=n)] = True
    q, k, v = rng.normal(size=(n, 3)), rng.normal(size=(m, 3)), rng.normal(size=(m, 2))
    dense = al.attention(q, k, v, allowed, method="dense")
    tiled = al.attention(q, k, v, allowed, method="blockwise", block_size=block)
    np.testing.assert_allclose(tiled, dense, **BLOCKWISE_F64)
    np.testing.assert_allclose(tiled, v[allowed.argmax(axis=1)], **BLOCKWISE_F64)


@pytest.mark.parametrize(
    "block", [1, 2, 5, (3, 7), (7, 3), 1000, (1000, 1)], ids=lambda b: f"block={b}"
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ragged_and_oversized_tiles(block, dtype):
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 11, 4)).astype(dtype) for _ in range(3))
    for mask in (None, Causal(), SlidingWindow(3), Padding([5, 11]) + Causal()):
        dense = al.attention(q, k, v, mask, method="dense")
        tiled = al.attention(q, k, v, mask, method="blockwise", block_size=block)
        np.testing.assert_allclose(tiled, dense, **tol(dtype))


@pytest.mark.parametrize(
    "mask",
    [Causal(), Causal("bottom_right"), SlidingWindow(50), SlidingWindow(70, "bottom_right")],
    ids=repr,
)
def test_diagonal_tiles_cut_into_strips(mask):
    # 128-row blocks: partial tiles are cut into 32-row strips, each trimmed to its columns.
    rng = np.random.default_rng(9)
    q = rng.normal(size=(2, 300, 8)).astype(np.float32)
    k, v = (rng.normal(size=(2, 333, 8)).astype(np.float32) for _ in range(2))
    dense = al.attention(q, k, v, mask, method="dense")
    tiled = al.attention(q, k, v, mask, method="blockwise", block_size=128)
    np.testing.assert_allclose(tiled, dense, **BLOCKWISE_F32)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 40.0, 400.0, -60.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scores_far_from_zero_take_the_careful_update(scale, dtype):
    # Scores of hundreds overflow exp2 against the starting base of 0, and scores spread over
    # hundreds underflow it once the base has moved: both take the exact step and agree.
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(3, 40, 4)).astype(dtype) for _ in range(3))
    if dtype == np.float32:
        scale = float(np.clip(scale, -2, 2))  # float32 keeps 2e-5 only for moderate scores
    dense = al.attention(q, k, v, Causal(), scale=scale, method="dense")
    tiled = al.attention(q, k, v, Causal(), scale=scale, method="blockwise", block_size=(8, 6))
    np.testing.assert_allclose(tiled, dense, **tol(dtype))


def test_a_large_positive_bias_is_exact():
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(16, 4)) for _ in range(3))
    bias = rng.normal(scale=300.0, size=(16, 16))
    dense = al.attention(q, k, v, bias, method="dense")
    np.testing.assert_allclose(
        al.attention(q, k, v, bias, method="blockwise", block_size=4), dense, **BLOCKWISE_F64
    )


def test_threads_do_not_change_a_single_bit():
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(3, 2, 50, 8)).astype(np.float32) for _ in range(3))
    one = al.attention(q, k, v, Causal(), method="blockwise", block_size=8, threads=1)
    three = al.attention(q, k, v, Causal(), method="blockwise", block_size=8, threads=3)
    np.testing.assert_array_equal(one, three)


def test_the_chapter_example_by_tiles_of_one():
    q, k, v = [[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]]
    out = al.attention(q, k, v, Causal(), method="blockwise", block_size=1)
    np.testing.assert_allclose(out, [[0, -1], [0.804, 1.413]], atol=5e-4)
    assert out.dtype == np.float64


# -- errors -------------------------------------------------------------------------------------

BAD_INPUTS = {
    "d_k": lambda: (np.ones((3, 4)), np.ones((3, 5)), np.ones((3, 2)), None),
    "rows": lambda: (np.ones((3, 4)), np.ones((3, 4)), np.ones((2, 2)), None),
    "finite": lambda: (np.full((3, 4), np.nan), np.ones((3, 4)), np.ones((3, 2)), None),
    "finite before mask": lambda: (
        np.ones((3, 4)),
        np.full((3, 4), np.inf),
        np.ones((3, 2)),
        np.ones((2, 3), bool),
    ),
    "mask shape": lambda: (
        np.ones((3, 4)),
        np.ones((3, 4)),
        np.ones((3, 2)),
        np.ones((2, 3), bool),
    ),
    "fully masked": lambda: (
        np.ones((2, 5, 4)),
        np.ones((2, 5, 4)),
        np.ones((2, 5, 2)),
        Padding([0, 5]),
    ),
    "bottom right": lambda: (
        np.ones((9, 4)),
        np.ones((4, 4)),
        np.ones((4, 2)),
        Causal("bottom_right"),
    ),
    "v broadcast": lambda: (
        np.ones((3, 4)),
        np.ones((3, 4)),
        np.ones((2, 3, 2)),
        np.array([[True, True, True], [False, False, False], [True, False, False]]),
    ),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_errors_are_the_dense_errors_word_for_word(name):
    q, k, v, mask = BAD_INPUTS[name]()
    dense = outcome(lambda: al.attention(q, k, v, mask, method="dense"))
    tiled = outcome(lambda: al.attention(q, k, v, mask, method="blockwise", block_size=2))
    assert isinstance(dense, tuple), "each case must make the dense path raise"
    assert tiled == dense


def test_return_weights_is_refused_with_the_reason():
    with pytest.raises(al.AttnlabError, match="return_weights=False with the blockwise"):
        al.attention(
            np.ones((2, 2)),
            np.ones((2, 2)),
            np.ones((2, 2)),
            method="blockwise",
            return_weights=True,
        )
    with pytest.raises(al.AttnlabError, match="N x M table"):
        blockwise.blockwise_attention(
            np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), return_weights=True
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "fast"}, "method to be one of"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": (4, 4, 4)}, "block_size"),
        ({"block_size": True}, "block_size"),
        ({"block_size": 2.5}, "block_size"),
        ({"threads": 0}, "threads"),
        ({"threads": "2"}, "threads"),
        ({"memory_budget": -1}, "memory_budget"),
        ({"memory_budget": "1GB"}, "memory_budget"),
    ],
)
def test_options_are_validated_at_the_boundary(kwargs, match):
    with pytest.raises(al.AttnlabError, match=match):
        al.attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), **kwargs)


# -- the automatic switch -----------------------------------------------------------------------


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls into the blockwise kernel."""
    seen = []
    real = blockwise.run

    def spy(*args, **kwargs):
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(blockwise, "run", spy)
    return seen


def test_auto_is_dense_under_the_budget_and_blockwise_over_it(calls):
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=(2, 16, 4)) for _ in range(3))
    table = 2 * 16 * 16 * 8  # bytes of the float64 score table
    small = al.attention(q, k, v, Causal(), memory_budget=table)
    assert calls == []
    big = al.attention(q, k, v, Causal(), memory_budget=table - 1)
    assert len(calls) == 1
    np.testing.assert_allclose(big, small, **BLOCKWISE_F64)


def test_auto_follows_the_module_default(calls, monkeypatch):
    monkeypatch.setattr(blockwise, "DEFAULT_MEMORY_BUDGET", 100)
    al.attention(np.ones((8, 2)), np.ones((8, 2)), np.ones((8, 1)))
    assert len(calls) == 1
    al.attention(np.ones((8, 2)), np.ones((8, 2)), np.ones((8, 1)), method="dense")
    assert len(calls) == 1


def test_default_budget_keeps_small_inputs_dense(calls):
    # Below the measured crossover (N·M of 1024² in float32, 512² in float64) auto stays dense.
    assert blockwise.DEFAULT_MEMORY_BUDGET == 256 * 2**20
    f32 = np.ones((1, 8, 512, 4), np.float32)
    al.attention(f32, f32, f32)
    f64 = np.ones((1, 8, 256, 4))
    al.attention(f64, f64, f64)
    assert calls == []


def test_auto_with_weights_stays_dense_or_refuses_over_budget(calls):
    q = np.ones((8, 2))
    _, weights = al.attention(q, q, q, return_weights=True, memory_budget=8 * 8 * 8)
    assert weights.shape == (8, 8) and calls == []
    with pytest.raises(al.AttnlabError, match=r"memory budget.*method='dense'"):
        al.attention(q, q, q, return_weights=True, memory_budget=100)
    # Insisting on dense computes the table whatever the budget.
    al.attention(q, q, q, return_weights=True, method="dense", memory_budget=100)


def test_trace_is_always_dense(calls, monkeypatch):
    monkeypatch.setattr(blockwise, "DEFAULT_MEMORY_BUDGET", 1)
    al.trace_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 1)))
    assert calls == []


# -- memory and threads -------------------------------------------------------------------------


def test_memory_grows_with_n_not_n_squared():
    n, d = 2048, 16
    rng = np.random.default_rng(6)
    q, k, v = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(3))
    table = n * n * 4  # the dense score table: 16 MiB
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        tracemalloc.reset_peak()
        al.attention(q, k, v, Causal(), method="blockwise", block_size=256, threads=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < table / 8, f"peak {peak / 2**20:.1f} MiB"


def test_blas_threads_are_restored():
    before = blockwise.blas_info()
    rng = np.random.default_rng(7)
    q = rng.normal(size=(4, 64, 8))
    al.attention(q, q, q, method="blockwise", block_size=16, threads=2)
    assert blockwise.blas_info() == before


def _area(mask, n, block):
    steps = [(r0, _tiles.plan(mask, (r0, r0 + block), n, n, block)) for r0 in range(0, n, block)]
    area = sum((b - a) * (c1 - c0) for _, plan in steps for a, b, (c0, c1), _ in plan)
    return area, steps


def test_work_a_mask_blocks_is_never_done():
    n = 1024
    area, steps = _area(Causal(), n, 128)
    assert n * n / 2 < area < 0.54 * n * n  # half, plus 3/8 of a triangle per diagonal tile
    # Tiles below the diagonal need no mask arithmetic; only the diagonal's strips do.
    assert all(not masked for r0, plan in steps for a, b, (c0, c1), masked in plan if c1 <= r0)
    area, _ = _area(SlidingWindow(64), n, 128)
    assert area < 2.5 * 64 * n  # O(N · window)
    area, _ = _area(None, n, 128)
    assert area == n * n


def test_a_bias_that_blocks_nothing_is_still_added():
    # Every tile of this float mask is OPEN (nothing blocked), yet each carries a bias.
    rng = np.random.default_rng(8)
    q, k, v = (rng.normal(size=(12, 4)) for _ in range(3))
    bias = rng.normal(scale=3.0, size=(12, 12))
    dense = al.attention(q, k, v, bias + Causal().additive(12), method="dense")
    tiled = al.attention(q, k, v, Dense(bias) + Causal(), method="blockwise", block_size=4)
    np.testing.assert_allclose(tiled, dense, **BLOCKWISE_F64)
