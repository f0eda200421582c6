"""The blockwise kernels' per-CPU choice of exponential: either choice gives the same answers.

numpy vectorises float32 exp2 only with AVX-512, so the fast pass exponentiates with np.exp
elsewhere (``_tiles.natural_exp``). Whatever this machine picks, both choices are run here by
setting the CPU flag the choice reads, against the dense path and torch-free closed forms.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import ALiBi, Causal
from attnlab.kernels import _tiles
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64


def tol(dtype) -> dict:
    return BLOCKWISE_F32 if np.dtype(dtype) == np.float32 else BLOCKWISE_F64


@pytest.fixture(params=[False, True], ids=["avx2-exp", "avx512-exp2"])
def simd_exp2(request, monkeypatch):
    monkeypatch.setattr(_tiles, "_SIMD_EXP2", request.param)
    return request.param


def test_the_choice_follows_the_cpu_and_only_for_float32(simd_exp2):
    assert _tiles.natural_exp(np.float32) is (not simd_exp2)
    assert _tiles.natural_exp(np.float64) is False  # float64 exp and exp2 cost the same


def _inputs(dtype, lead=(2, 3), n=150, m=170, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(lead + (n, d)).astype(dtype)
    k = rng.standard_normal(lead + (m, d)).astype(dtype)
    v = rng.standard_normal(lead + (m, d + 2)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "mask", [None, Causal(), ALiBi(np.array([0.5, 0.25, 2.0])), "bias"], ids=str
)
def test_forward_and_backward_match_dense_with_either_exponential(simd_exp2, dtype, mask):
    q, k, v = _inputs(dtype)
    if mask == "bias":  # a float mask with deep entries: the clamp in natural units
        mask = np.where(np.random.default_rng(1).random((150, 170)) < 0.3, -1e4, 0.5)
        mask = mask.astype(dtype)
    out, lse = al.attention(q, k, v, mask, method="blockwise", block_size=(64, 48), return_lse=True)
    want, want_lse = al.attention(q, k, v, mask, method="dense", return_lse=True)
    np.testing.assert_allclose(out, want, **tol(dtype))
    np.testing.assert_allclose(lse, want_lse, **tol(dtype))
    g = np.random.default_rng(2).standard_normal(out.shape).astype(dtype)
    grads = al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=(64, 48))
    wants = al.attention_backward(q, k, v, g, mask, method="dense")
    for got, exp in zip(grads, wants, strict=True):
        np.testing.assert_allclose(got, exp, **tol(dtype))


def test_softcap_with_either_exponential_matches_its_closed_form(simd_exp2):
    q, k, v = _inputs(np.float64, lead=(), n=40, m=50)
    cap = 3.0
    s = cap * np.tanh(q @ k.T / np.sqrt(q.shape[-1]) / cap)  # (N, M), the capped scores
    w = np.exp(s - s.max(axis=1, keepdims=True))
    want = (w / w.sum(axis=1, keepdims=True)) @ v
    out = al.attention(q, k, v, method="blockwise", block_size=16, softcap=cap)
    np.testing.assert_allclose(out, want, **BLOCKWISE_F64)
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    out32 = al.attention(q32, k32, v32, method="blockwise", block_size=16, softcap=cap)
    np.testing.assert_allclose(out32, want, **BLOCKWISE_F32)


def test_threads_never_change_a_bit_with_either_exponential(simd_exp2):
    q, k, v = _inputs(np.float32, lead=(4,), n=300, m=300)
    outs = [
        al.attention(q, k, v, Causal(), method="blockwise", block_size=64, threads=t)
        for t in (1, 2, 3)
    ]
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])


def test_scores_past_the_float32_range_still_take_the_exact_pass(simd_exp2):
    # Scaled scores near 100 (natural units) overflow a float32 exp and exp2 at base 0 alike:
    # the block must be redone exactly, and the result is that of the shifted softmax.
    q = np.array([[10.0, 0.0], [0.0, 1.0]], np.float32)
    k = np.array([[20.0, 0.0], [19.0, 0.0], [0.0, 0.0]], np.float32)  # (3, 2)
    v = np.array([[1.0], [2.0], [3.0]], np.float32)
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / np.sqrt(2.0)  # up to 141
    w = np.exp(s - s.max(axis=1, keepdims=True))
    want = (w / w.sum(axis=1, keepdims=True)) @ v
    out = al.attention(q, k, v, method="blockwise", block_size=2)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, **BLOCKWISE_F32)
