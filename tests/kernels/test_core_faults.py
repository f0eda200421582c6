"""Regression tests for the faults found when the core was tried adversarially (items
1, 2, 4, 5 and 6): each failed before its fix."""

from __future__ import annotations

import multiprocessing
import sys
import threading

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import AttnlabError, FullyMaskedRowError, ShapeError
from attnlab.kernels import _threads
from attnlab.masks import Causal, Dense, Padding, SlidingWindow

METHODS = ["dense", "blockwise"]


def _qkv(n=6, m=6, d=4, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, d)).astype(dtype),
        rng.standard_normal((m, d)).astype(dtype),
        rng.standard_normal((m, 3)).astype(dtype),
    )


# -- 1. fork pools ------------------------------------------------------------------------------


def _blockwise_in_child(seed: int) -> float:
    q, k, v = _qkv(64, 64, 8, seed=seed)
    return float(al.attention(q, k, v, Causal(), method="blockwise", block_size=8, threads=2).sum())


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method is Linux's default")
# The test forks on purpose; JAX, when an oracle test imported it earlier in the process, warns
# at every fork, whatever forks.
@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")
def test_a_fork_pool_after_blockwise_returns():
    _blockwise_in_child(0)  # the parent's shared pool now has live threads
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        result = pool.map_async(_blockwise_in_child, [1, 2])
        got = result.get(timeout=60)  # hung forever before the pool was reset in the child
    assert got == pytest.approx([_blockwise_in_child(1), _blockwise_in_child(2)], rel=1e-12)


# -- 2. bounded thread pools --------------------------------------------------------------------


def test_many_thread_counts_share_one_bounded_pool():
    q, k, v = _qkv(256, 256, 8)
    before = threading.active_count()
    for threads in range(2, 65):
        al.attention(q, k, v, method="blockwise", block_size=8, threads=threads)
    grown = threading.active_count() - before
    # 63 distinct values used to leave a pool each (607 threads); now one pool of POOL_CAP.
    assert grown <= _threads.POOL_CAP
    assert sum(t.name.startswith("attnlab") for t in threading.enumerate()) <= 2 * _threads.POOL_CAP


def test_a_call_never_runs_more_items_at_once_than_it_asked_for():
    running, peak, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(3, timeout=0.2)

    def item(_):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            gate.wait()  # would let three through at once if three ran together
        except threading.BrokenBarrierError:
            pass
        with lock:
            running[0] -= 1

    _threads._shared_pool(8)  # a pool larger than this call's share
    _threads.on_threads(item, list(range(6)), 2)
    assert peak[0] == 2


# -- 4. extreme additive masks ------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_a_bias_float32_cannot_hold_is_refused_naming_the_mask(method):
    q, k, v = _qkv(dtype=np.float32)
    with pytest.raises(AttnlabError, match=r"additive mask values.*1e\+300.*Dense"):
        al.attention(q, k, v, mask=np.full((6, 6), 1e300), method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("dtype", "mask"),
    [
        (np.float32, np.full((6, 6), -1e300)),  # float32 cannot hold it: the same as -inf
        (np.float32, np.full((6, 6), np.finfo(np.float32).min)),  # the finfo.min idiom
        (np.float64, np.full((6, 6), np.finfo(np.float64).min)),
        (np.float64, np.full((6, 6), np.finfo(np.float32).min, np.float32)),  # mask's own dtype
    ],
    ids=["-1e300 on float32", "float32 min", "float64 min", "float32 min mask, float64 q"],
)
def test_finfo_min_everywhere_is_a_fully_masked_row_on_both_paths(method, dtype, mask):
    q, k, v = _qkv(dtype=dtype)
    with pytest.raises(FullyMaskedRowError, match="query row 0, 1, 2"):
        al.attention(q, k, v, mask=mask, method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finfo_min_blocks_exactly_as_minus_inf(method, dtype):
    q, k, v = _qkv(dtype=dtype)
    allowed = Causal().allowed(6)
    idiom = np.where(allowed, 0.0, np.finfo(dtype).min).astype(dtype)
    with_inf = np.where(allowed, 0.0, -np.inf)
    got = al.attention(q, k, v, mask=idiom, method=method)
    want = al.attention(q, k, v, mask=with_inf, method="dense")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == np.float32 else 1e-13, atol=0)


def test_huge_finite_biases_in_range_agree_on_both_paths():
    # -1e300 fits float64: a (huge) bias, not a block. Both paths compute the same softmax.
    q, k, v = _qkv()
    mask = np.full((6, 6), -1e300)
    dense = al.attention(q, k, v, mask=mask, method="dense")
    blockwise = al.attention(q, k, v, mask=mask, method="blockwise", block_size=4)
    assert np.isfinite(dense).all()
    np.testing.assert_allclose(blockwise, dense, rtol=1e-12, atol=1e-15)


# -- 5. precision of a float32 mask on float64 inputs -------------------------------------------


def test_a_float32_mask_keeps_float64_accuracy_on_the_blockwise_path():
    q, k, v = _qkv(40, 40, 8)
    bias = np.random.default_rng(1).normal(size=(40, 40)).astype(np.float32)
    dense = al.attention(q, k, v, mask=bias, method="dense")
    blockwise = al.attention(q, k, v, mask=bias, method="blockwise", block_size=16)
    assert dense.dtype == blockwise.dtype == np.float64
    np.testing.assert_allclose(blockwise, dense, rtol=1e-12, atol=1e-14)  # was 1e-7 off


# -- 6. every refusal is an AttnlabError naming the argument ------------------------------------


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: al.attention(np.ones((0, 3, 2)), np.ones((0, 3, 2)), np.ones((0, 3, 2))), "q"),
        (lambda: al.attention(*_qkv(), mask=[[True] * 6] * 5 + [[True] * 4]), "rectangular"),
        (lambda: SlidingWindow(2**70), "size"),
        (lambda: al.attention(*_qkv(), method="blockwise", block_size=2**62), "block_size"),
        (lambda: al.attention(*_qkv(), threads=10**9), "threads"),
        (lambda: al.scaled_dot_product_attention(*_qkv(), dropout_p=None), "dropout_p"),
        (
            lambda: al.scaled_dot_product_attention(
                np.ones((4, 3, 2)), np.ones((0, 3, 2)), np.ones((0, 3, 2)), enable_gqa=True
            ),
            "head count",
        ),
        (lambda: al.softmax(np.array([1 + 2j, 3j])), "real numbers"),
        (lambda: al.softmax(np.ones((2, 3)), axis=5), "axis"),
        (lambda: al.softmax(np.ones((2, 3)), axis=1.5), "axis"),
        (lambda: al.logsumexp(np.ones((2, 3)), axis=-3), "axis"),
        (lambda: Padding([1e30]), "lengths"),
        (lambda: al.attention(*_qkv(), memory_budget=float("inf")), "memory_budget"),
        (lambda: al.attention(*_qkv(), scale=10**400), "scale"),
        (lambda: al.attention(*_qkv(), method=["dense"]), "method"),
    ],
    ids=[
        "zero batch axis",
        "ragged mask list",
        "window 2**70",
        "block 2**62",
        "threads 1e9",
        "dropout None",
        "gqa 0 key heads",
        "softmax complex",
        "softmax axis 5",
        "softmax axis float",
        "logsumexp axis",
        "padding 1e30",
        "budget inf",
        "scale huge int",
        "method list",
    ],
)
def test_refusals_are_attnlab_errors(call, words):
    with pytest.raises(AttnlabError, match=words):
        call()


def test_masks_compare_by_value():
    assert SlidingWindow(2) == SlidingWindow(2) and SlidingWindow(2) != SlidingWindow(3)
    assert Padding([2, 3]) == Padding(np.array([2, 3])) and Padding([2]) != Padding([3])
    assert Causal() + Padding([1]) == Causal() + Padding([1])
    assert Dense(np.eye(2, dtype=bool)) == Dense(np.eye(2, dtype=bool))
    assert Dense(np.eye(2, dtype=bool)) != Dense(np.eye(2))  # bool vs additive
    assert len({Causal(), Causal(), SlidingWindow(2), SlidingWindow(2)}) == 2
    with pytest.raises(AttributeError):
        SlidingWindow(2).size = 3  # frozen


def test_dense_ragged_list_is_a_shape_error():
    with pytest.raises(ShapeError, match="rectangular"):
        Dense([[True, False], [True]])
