"""The softmax backward's row term D = rowsum(P ∘ dP): where the exact gradient is 0, 0.

Shape legend: B batch, h heads, N queries, M keys, d = d_k = d_v.

A row whose every allowed key but one is masked has weight exactly 1 on that key, so
dS = P (dP − D) is 0 in exact arithmetic: moving its query or its key changes nothing. Torch's
autograd of the softmax gets exactly 0 there (it subtracts Σ P dP from the dP it summed), and
FlashAttention's accuracy rule then allows no error at all (its tolerance is a multiple of
torch's). The dense and blockwise kernels must cancel exactly too, in both dtypes.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.masks import Causal, SlidingWindow

METHODS = ("dense", "blockwise")
DTYPES = (np.float32, np.float64)


def _draw(n: int, m: int, d: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(2, 3, s, d)).astype(dtype) for s in (n, m, m))
    g = rng.normal(size=(2, 3, n, d)).astype(dtype)  # (B, h, N, d) dO
    return q, k, v, g


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, m, d", [(1, 1, 32), (239, 1, 64), (5, 1, 40)])
def test_a_single_key_gives_exactly_zero_dq_and_dk(method, dtype, n, m, d):
    q, k, v, g = _draw(n, m, d, dtype)
    dq, dk, dv = al.attention_backward(q, k, v, g, method=method)
    assert not dq.any() and not dk.any()
    np.testing.assert_allclose(dv, g.sum(axis=-2, keepdims=True), rtol=1e-5, atol=1e-4)  # P = 1


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, m, d", [(113, 203, 40), (64, 128, 111), (799, 3, 64)])
def test_a_window_of_one_key_per_row_gives_exactly_zero_dq_and_dk(method, dtype, n, m, d):
    """Bottom-right causal with a left window of 0: row i sees key i + M − N alone (rows
    before the first key see none and get 0 with fully_masked="zero")."""
    q, k, v, g = _draw(n, m, d, dtype, seed=n + m)
    mask = Causal("bottom_right") + SlidingWindow(left=0, right=0, align="bottom_right")
    dq, dk, dv = al.attention_backward(q, k, v, g, mask, fully_masked="zero", method=method)
    assert not dq.any() and not dk.any()
    assert dv.any()


@pytest.mark.parametrize("method", METHODS)
def test_a_single_key_with_a_sink_still_has_a_gradient(method):
    """With a sink the one key's weight is below 1 and dS is not 0: the exact zero above comes
    from the cancellation, not from a rule that zeroes such rows."""
    q, k, v, g = _draw(4, 1, 16, np.float64)
    sinks = np.array([0.5, -1.0, 2.0])
    dq, dk, _ = al.attention_backward(q, k, v, g, sinks=sinks, method=method)
    p = 1 / (1 + np.exp(sinks[:, None] - (q @ np.swapaxes(k, -1, -2))[..., 0] / 4))  # (B, h, N)
    dp = (g * v).sum(-1)  # (B, h, N): dO · v of the one key
    ds = p * (dp - p * dp)  # (B, h, N): P (dP − D), D = P dP (the sink has no value)
    np.testing.assert_allclose(dq, ds[..., None] * k / 4, rtol=1e-9, atol=1e-14)
    want_dk = (ds[..., None] * q).sum(-2, keepdims=True) / 4  # (B, h, 1, d)
    np.testing.assert_allclose(dk, want_dk, rtol=1e-9, atol=1e-14)
