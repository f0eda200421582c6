"""The optional compiled tile passes (kernels/_fused.py, the ``fast`` extra) against numpy's.

The compiled exp is checked against numpy's float32 exp and against float64 exp rounded to
float32 (the correctly rounded answer, nearly always), within ``_fused.ULPS``; the compiled
dS pass bit for bit against numpy's two passes; whole forward and backward calls on both
paths against each other and against the dense path; and the switch: ATTNLAB_KERNEL, auto's
rule, the fall-back when numba is missing, and no numba at ``import attnlab``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal, SlidingWindow
from attnlab.errors import AttnlabError
from attnlab.kernels import _fused, _tiles
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64, REORDERED_F64

# The two paths differ by the exp's few ulps in every weight, then by the same sums: within
# the blockwise-against-dense float32 tolerance, which covers a different summation order.
PATHS_F32 = BLOCKWISE_F32


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float32 units in the last place (both finite and >= 0, as exp's are)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


@pytest.fixture
def numba_kernels():
    pytest.importorskip("numba")
    kernels = _fused.warm()
    assert kernels is not None
    return kernels


@pytest.fixture
def kernel(monkeypatch):
    """Set ATTNLAB_KERNEL for one test."""

    def set_to(value: str) -> None:
        monkeypatch.setenv(_fused.ENV, value)

    return set_to


def test_exp_is_within_named_ulps_of_numpy_and_of_float64(numba_kernels):
    # Every float32 exp from 0 (below -104) through the subnormal results to inf (past 88.72).
    x = np.linspace(-110.0, 90.0, 401 * 997, dtype=np.float32).reshape(401, 997)
    got = x.copy()
    numba_kernels.exp(got, 1.0)
    with np.errstate(over="ignore"):
        want = np.exp(x)
        exact = np.exp(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite)  # overflow to inf exactly where numpy's
    assert _ulps(got[finite], want[finite]).max() <= _fused.ULPS
    assert _ulps(got[finite], exact[finite]).max() <= _fused.ULPS
    assert (got[x < -103.98] == 0).all() and (got[x > 88.73] == np.inf).all()


def test_exp_scales_first_and_keeps_special_values(numba_kernels):
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1.0, -1.0]], np.float32)
    got = x.copy()
    numba_kernels.exp(got, np.float32(_tiles.LN2))
    with np.errstate(invalid="ignore"):
        want = np.exp(x * np.float32(_tiles.LN2))  # numpy's two steps, as the backward's
    assert np.isnan(got[0, 0])
    assert got[0, 1] == np.inf and got[0, 2] == 0.0
    assert (got[0, 3:6] == 1.0).all()  # exp(0) is exactly 1
    assert _ulps(got[0, 6:], want[0, 6:]).max() <= _fused.ULPS
    np.testing.assert_allclose(got[0, 6:], [2.0, 0.5], rtol=4e-7)  # exp(±ln 2), closed form


def test_exp_refuses_a_non_contiguous_tile_instead_of_writing_a_copy(numba_kernels):
    tile = np.zeros((4, 8), np.float32)[:, :4]
    with pytest.raises(Exception, match="contiguous"):
        numba_kernels.exp(tile, 1.0)


def test_softmax_grad_is_numpys_two_passes_bit_for_bit(numba_kernels):
    rng = np.random.default_rng(0)
    p = rng.random((37, 53), dtype=np.float32)
    dp = rng.standard_normal((37, 53), dtype=np.float32) * 1e3
    d = rng.standard_normal(37, dtype=np.float32) * 1e3
    want = dp.copy()
    want -= d[:, None]
    want *= p
    numba_kernels.softmax_grad(dp, p, d)
    assert np.array_equal(dp, want)


def _inputs(dtype, lead=(2, 3), n=200, m=230, d=16, seed=0):
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal(lead + (s, d)).astype(dtype) for s in (n, m))
    v = rng.standard_normal(lead + (m, d + 3)).astype(dtype)
    g = rng.standard_normal(lead + (n, d + 3)).astype(dtype)
    return q, k, v, g


def _both(q, k, v, g, mask, dtype):
    out, lse = al.attention(q, k, v, mask, method="blockwise", block_size=(64, 96), return_lse=True)
    grads = al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=(64, 96))
    return (out, lse, *grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask", [None, Causal(), SlidingWindow(40)], ids=str)
def test_both_paths_agree_forward_and_backward(numba_kernels, kernel, dtype, mask):
    q, k, v, g = _inputs(dtype)
    kernel("numpy")
    plain = _both(q, k, v, g, mask, dtype)
    kernel("numba")
    compiled = _both(q, k, v, g, mask, dtype)
    dense = (
        *al.attention(q, k, v, mask, method="dense", return_lse=True),
        *al.attention_backward(q, k, v, g, mask, method="dense"),
    )
    for a, b, want in zip(plain, compiled, dense, strict=True):
        if dtype == np.float64:  # float64 always runs numpy's passes; only the order in which
            np.testing.assert_allclose(b, a, **REORDERED_F64)  # threads add dK, dV may differ
            np.testing.assert_allclose(b, want, **BLOCKWISE_F64)
        else:
            np.testing.assert_allclose(b, a, **PATHS_F32)
            np.testing.assert_allclose(b, want, **BLOCKWISE_F32)


def test_the_compiled_passes_are_the_ones_that_run(numba_kernels, kernel, monkeypatch):
    calls = {"exp": 0, "softmax_grad": 0, "softmax": 0}

    def counted(name):
        def run(*args):
            calls[name] += 1
            return getattr(numba_kernels, name)(*args)

        return run

    monkeypatch.setattr(
        _fused,
        "_loaded",
        [_fused.Kernels(counted("exp"), counted("softmax_grad"), counted("softmax"))],
    )
    q, k, v, g = _inputs(np.float32, lead=(1,), n=128, m=192)
    kernel("numba")
    al.attention(q, k, v, method="blockwise", block_size=64)
    assert calls["exp"] == 2 * 3  # two query blocks, three key tiles each
    al.attention_backward(q, k, v, g, method="blockwise", block_size=64)
    assert calls["softmax_grad"] == 2 * 3 and calls["exp"] > 6
    kernel("numpy")
    before = dict(calls)
    al.attention_backward(q, k, v, g, method="blockwise", block_size=64)
    assert calls == before


def test_auto_reads_the_call_the_cpu_and_the_dtype(kernel, monkeypatch):
    kernel("auto")
    marker = _fused.Kernels(len, len, len)  # any loaded kernels: auto's rule is what is checked
    monkeypatch.setattr(_fused, "_loaded", [marker])
    monkeypatch.setattr(_tiles, "_SIMD_EXP2", False)  # numpy's exp is the scalar one
    assert _fused.tile_kernels(np.float32, _fused.MIN_PAIRS) is marker
    assert _fused.tile_kernels(np.float32, _fused.MIN_PAIRS - 1) is None
    assert _fused.tile_kernels(np.float64, 2 * _fused.MIN_PAIRS) is None
    monkeypatch.setattr(_tiles, "_SIMD_EXP2", True)  # numpy's exp2 vectorised (AVX-512)
    assert _fused.tile_kernels(np.float32, 2 * _fused.MIN_PAIRS) is None
    kernel("numba")  # forced: any float32 call, whatever the CPU
    assert _fused.tile_kernels(np.float32, 1) is marker
    kernel(" NumPy ")
    assert _fused.tile_kernels(np.float32, 2 * _fused.MIN_PAIRS) is None


def test_auto_falls_back_to_numpy_when_numba_is_missing(kernel, monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "attnlab.kernels._fused_numba", raising=False)
    monkeypatch.setattr(_fused, "_loaded", [])
    monkeypatch.setattr(_tiles, "_SIMD_EXP2", False)
    kernel("auto")
    assert _fused.tile_kernels(np.float32, 4 * _fused.MIN_PAIRS) is None
    assert _fused.warm() is None
    q, k, v, _ = _inputs(np.float32, lead=(1,), n=64, m=64)
    want = al.attention(q, k, v, method="dense")
    np.testing.assert_allclose(al.attention(q, k, v, method="blockwise"), want, **BLOCKWISE_F32)
    kernel("numba")
    with pytest.raises(AttnlabError, match=r"ATTNLAB_KERNEL=numba.*attnlab\[fast\]"):
        al.attention(q, k, v, method="blockwise")


def test_a_bad_setting_is_refused_by_name(kernel):
    kernel("fastest")
    q = np.ones((8, 4), np.float32)
    with pytest.raises(AttnlabError, match=r"ATTNLAB_KERNEL.*auto, numpy, numba.*'fastest'"):
        al.attention(q, q, q, method="blockwise")


def test_import_attnlab_does_not_import_numba():
    code = "import sys, attnlab; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
