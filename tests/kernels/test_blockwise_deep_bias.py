"""Biases far below zero (a padding convention's -10000, a long ALiBi distance) on the blockwise path.

numpy's exp2 takes a slow path for a result of 0 or a subnormal one, so the kernels clamp such
exponents at ``_tiles.exp2_floor`` before exp2 (one quick pass). These tests hold the two
promises that makes: no exponent below the floor ever reaches exp2 in a tile that carries a deep
bias, and the clamp changes no result beyond the blockwise tolerances, forward or backward, for
rows that mix deep and shallow biases, rows that are deep everywhere (their softmax is still
well defined) and biases that ramp through the floor.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal, Dense
from attnlab.kernels import _online, _tiles, blockwise_backward
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64

N, M, D = 96, 80, 8
BLOCK = 32


def tol(dtype) -> dict:
    return BLOCKWISE_F32 if np.dtype(dtype) == np.float32 else BLOCKWISE_F64


class _Exp2Spy:
    """Stands in for numpy inside a kernel module, noting the lowest exponent exp2 is handed,
    per dtype (a float32 call whose row maxima lie far from 0 runs again in float64)."""

    def __init__(self):
        self.lowest: dict = {}
        self.calls = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def exp2(self, x, *args, **kwargs):
        self.calls += 1
        dtype = np.asarray(x).dtype
        self.lowest[dtype] = min(self.lowest.get(dtype, np.inf), float(np.min(x)))
        return np.exp2(x, *args, **kwargs)

    def exp(self, x, *args, **kwargs):
        # The forward's fast pass in natural units (_tiles.natural_exp): noted in log2 units,
        # less a hair for the rounding of the floor's conversion.
        self.calls += 1
        dtype = np.asarray(x).dtype
        low = float(np.min(x)) * _tiles.LOG2E + 1e-4
        self.lowest[dtype] = min(self.lowest.get(dtype, np.inf), low)
        return np.exp(x, *args, **kwargs)


def _padding_bias(dtype) -> np.ndarray:
    """BERT's convention: 0 where a key is real, -10000 where it is padding (half the keys)."""
    bias = np.zeros((N, M), dtype)
    bias[:, M // 2 :] = -10_000.0
    return bias


def _biases(kind: str, dtype) -> np.ndarray:
    rng = np.random.default_rng(3)
    if kind == "padding":
        return _padding_bias(dtype)
    if kind == "alibi":  # a steep ALiBi ramp: -slope · distance, far past the floor
        i, j = np.arange(N)[:, None], np.arange(M)[None, :]
        return (-40.0 * np.abs(i - j)).astype(dtype)
    if kind == "deep rows":  # every key of a row deep: the softmax of those rows is still fine
        bias = _padding_bias(dtype)
        bias[: N // 3] = -10_000.0 + rng.normal(size=(N // 3, M))
        return bias.astype(dtype)
    if kind == "through the floor":  # exponents on both sides of the floor, and near it
        floor = float(_tiles.exp2_floor(dtype)) / _tiles.LOG2E  # natural units
        offsets = rng.uniform(-40.0, 40.0, size=(N, M))
        bias = np.where(rng.random((N, M)) < 0.7, floor + offsets, rng.normal(size=(N, M)))
        return bias.astype(dtype)
    raise AssertionError(kind)


def _inputs(dtype):
    rng = np.random.default_rng(11)
    q = rng.normal(size=(2, N, D)).astype(dtype)
    k = rng.normal(size=(2, M, D)).astype(dtype)
    v = rng.normal(size=(2, M, D + 3)).astype(dtype)
    g = rng.normal(size=(2, N, D + 3)).astype(dtype)
    return q, k, v, g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_only_tiles_with_deep_biases_are_clamped(dtype):
    floor = _tiles.exp2_floor(dtype)
    assert floor == np.finfo(dtype).minexp + 6
    rows, cols = (0, N), (0, M)

    def tile(mask):
        return _tiles.TileMask(mask, rows, cols, N, M, 0, dtype)

    assert tile(Dense(_padding_bias(dtype))).floor == floor
    assert tile(Dense(_biases("alibi", dtype))).floor == floor
    shallow = np.random.default_rng(0).normal(scale=3.0, size=(N, M))
    assert tile(Dense(shallow)).floor is None
    assert tile(Dense(np.where(shallow > 0, 0.0, -np.inf))).floor is None  # -inf only blocks
    assert tile(Dense(shallow > 0)).floor is None  # a boolean mask has no bias at all


@pytest.mark.parametrize("simd_exp2", [False, True])
@pytest.mark.parametrize("kind", ["padding", "alibi"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_no_exponent_below_the_floor_reaches_exp2(monkeypatch, direction, dtype, kind, simd_exp2):
    monkeypatch.setattr(_tiles, "_SIMD_EXP2", simd_exp2)  # either CPU's choice of exponential
    # The spy sees numpy's exponentials only; the compiled passes (ATTNLAB_KERNEL=numba) are
    # checked against numpy's in tests/kernels/test_fused.py.
    monkeypatch.setenv("ATTNLAB_KERNEL", "numpy")
    q, k, v, g = _inputs(dtype)
    spy = _Exp2Spy()
    module = _online if direction == "forward" else blockwise_backward
    monkeypatch.setattr(module, "np", spy)
    mask = _biases(kind, dtype)
    if direction == "forward":
        al.attention(q, k, v, mask, method="blockwise", block_size=BLOCK, threads=1)
    else:
        al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=BLOCK, threads=1)
    assert spy.calls > 0 and np.dtype(dtype) in spy.lowest
    for seen, lowest in spy.lowest.items():
        assert lowest >= _tiles.exp2_floor(seen), seen


@pytest.mark.parametrize("kind", ["padding", "alibi", "deep rows", "through the floor"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_deep_biases_match_dense_forward_and_backward(kind, dtype, causal):
    q, k, v, g = _inputs(dtype)
    bias = _biases(kind, dtype)
    mask = Dense(bias) + Causal() if causal else bias
    limits = dict(tol(dtype))
    if kind == "deep rows":
        # Where the weights themselves sit at -10000, a score added to it keeps only what
        # ulp(10000) allows (f32: 1e-3), and each path rounds it its own way (the blockwise one
        # in log2 units): the weights may differ by ~eps · 10000 relative, clamp or no clamp
        # (measured before it: 3.7e-4 in float32, 2.1e-12 in float64).
        limits["atol"] += 4 * np.finfo(dtype).eps * 10_000.0
    dense = al.attention(q, k, v, mask, method="dense")
    tiled = al.attention(q, k, v, mask, method="blockwise", block_size=BLOCK)
    np.testing.assert_allclose(tiled, dense, **limits)
    grads_dense = al.attention_backward(q, k, v, g, mask, method="dense")
    grads_tiled = al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=BLOCK)
    for name, a, b in zip("qkv", grads_tiled, grads_dense, strict=True):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a / scale, b / scale, **limits, err_msg=f"d{name}")
