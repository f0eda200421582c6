"""A training step that keeps the forward's log-sum-exp: ``attention(..., return_lse=True)``
then ``attention_backward(..., lse=lse)`` takes the weights from the lse, exp(score − lse),
and computes no row maximum or row sum again.

Work is counted, not timed: the fast path's row reductions (``kernels/_small_exp.py``'s ``_max`` and
``_sum``) are wrapped to record the size of every (..., N, M) table they reduce. Gradients are
checked against the same call without lse and against torch's autograd.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.kernels import _small, _small_exp
from attnlab.masks import Causal, Padding
from attnlab.transformer import TinyTransformer, _blocks
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64, for_dtype

SHAPES = [(1, 1, 4, 2), (3, 2, 8, 4), (64, 4, 32, 16)]


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(4)]


def _table_reductions(monkeypatch) -> list[int]:
    """Sizes of the (..., N, M) tables the fast path reduces along its rows (max or sum)."""
    seen: list[int] = []

    def counted(reduce):
        def wrapper(a, *args, **kwargs):
            if np.ndim(a) >= 2 and a.shape[-1] == a.shape[-2]:  # the square score tables here
                seen.append(a.size)
            return reduce(a, *args, **kwargs)

        return wrapper

    # numpy's passes, whose reductions are counted (the compiled pass fuses the row max:
    # tests/kernels/test_fused_softmax.py checks that its backward reads the saved lse).
    monkeypatch.setenv("ATTNLAB_KERNEL", "numpy")
    monkeypatch.setattr(_small_exp, "_max", counted(np.maximum.reduce))
    monkeypatch.setattr(_small_exp, "_sum", counted(np.add.reduce))

    # The score tables the fast path builds, so that no test passes by another path answering.
    def made(x, fresh=False, _scores=_small_exp.scores):
        seen.append("scores")
        return _scores(x, fresh)

    monkeypatch.setattr(_small, "scores", made)
    monkeypatch.setattr(_small_exp, "scores", made)
    return seen


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_backward_with_lse_reduces_no_table(monkeypatch, shape, dtype):
    q, k, v, g = _inputs(shape, dtype)
    _, lse = al.attention(q, k, v, Causal(), return_lse=True)
    seen = _table_reductions(monkeypatch)
    without = al.attention_backward(q, k, v, g, Causal())
    work_without = list(seen)
    seen.clear()
    with_lse = al.attention_backward(q, k, v, g, Causal(), lse=lse)
    # Without lse: the row max and row sum of the weights (one of each per band of rows).
    reduced = [n for n in work_without if n != "scores"]
    assert "scores" in work_without and sum(reduced) >= 2 * q.size // shape[-1] * shape[-2]
    assert set(seen) == {"scores"}  # with it: the fast path's scores, and no reduction of them
    tol = BLOCKWISE_F32 if dtype == np.float32 else BLOCKWISE_F64
    for a, b in zip(with_lse, without, strict=True):
        np.testing.assert_allclose(a, b, **tol)


def test_the_fast_path_answers_with_lse_and_its_lse_is_the_general_paths():
    q, k, v, g = _inputs((2, 3, 6, 4), np.float64)
    mask = Causal() + Padding([6, 5])
    out, lse = _small.small_attention(q, k, v, mask, None, "auto", False, True)
    out_g, lse_g = al.attention(q, k, v, mask, return_lse=True, threads=1)  # the general path
    np.testing.assert_array_equal(out, out_g)
    np.testing.assert_array_equal(lse, lse_g)
    assert _small.small_backward(q, k, v, g, mask, None, "auto", lse) is not None


def test_an_unusable_lse_goes_to_the_general_path():
    q, k, v, g = _inputs((1, 2, 4, 2), np.float32)
    _, lse = al.attention(q, k, v, Causal(), return_lse=True)
    for bad in (lse.astype(np.float64), lse[..., :3], lse.tolist(), np.full_like(lse, 40.0)):
        assert _small.small_backward(q, k, v, g, Causal(), None, "auto", bad) is None
    wide = np.full_like(lse, 40.0)  # past ±WIDE: the general path's answer, not the fast one's
    np.testing.assert_allclose(
        al.attention_backward(q, k, v, g, Causal(), lse=wide)[2],
        al.attention_backward(q, k, v, g, Causal(), lse=wide, threads=1)[2],
        **BLOCKWISE_F32,
    )


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_from_the_lse_match_torch(torch, dtype):
    q, k, v, g = _inputs((64, 4, 32, 16), dtype, seed=5)
    _, lse = al.attention(q, k, v, Causal(), return_lse=True)
    dq, dk, dv = al.attention_backward(q, k, v, g, Causal(), lse=lse)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    out.backward(torch.from_numpy(g))
    atol = 1e-4 if dtype == np.float32 else for_dtype(dtype)["atol"]
    for ours, theirs in ((dq, tq), (dk, tk), (dv, tv)):
        grad = theirs.grad.numpy()
        np.testing.assert_allclose(ours, grad, rtol=0, atol=atol * max(1.0, np.abs(grad).max()))


def test_the_transformer_hands_its_forward_lse_to_the_backward(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("lse"))
        return al.attention_backward(*args, **kwargs)

    monkeypatch.setattr(_blocks, "attention_backward", spy)
    model = TinyTransformer(vocab_size=7, context=6, layers=2, heads=2, d_model=8, seed=1)
    tokens = np.random.default_rng(0).integers(0, 7, (3, 6))
    loss, grads = model.loss_and_grads(tokens, tokens)
    assert len(calls) == 2 and all(lse is not None and lse.shape == (3, 2, 6) for lse in calls)
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in grads.values())
