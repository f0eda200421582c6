"""The fast path's results written in place: each piece of a cut batch writes its share of
arrays allocated whole (``_small_cores.on_cores(shapes=...)``), the backward's three gradients
share one block of memory, and steps 3-4 of the backward run as one compiled pass
(``_fused_numba.softmax_grad_rows``).

Oracles: numpy's own passes for the compiled one (bit for bit), the same call on one core and
without the compiled pass (bit for bit), and float64 attention.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal
from attnlab.kernels import _fused, _small, _small_cores
from tolerances import F32

SHAPE = (64, 4, 32, 16)  # a tiny transformer's batch: past KEEP_FROM, cut over the cores


def _inputs(shape=SHAPE, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]


@pytest.mark.parametrize("cols", [1, 5, 8, 16, 64, 129, 300])
def test_the_fused_gradient_pass_is_numpys_four_passes_bit_for_bit(cols):
    pytest.importorskip("numba")
    kernels = _fused.warm()
    rng = np.random.default_rng(cols)
    rows = 37
    dp, p = (rng.standard_normal((rows, cols)).astype(np.float32) * 3 for _ in range(2))
    want = dp.copy()
    want -= np.sum(dp * p, axis=-1, keepdims=True)  # dense_backward's steps 3 and 4
    want *= p
    kernels.softmax_grad_rows(dp, p)
    np.testing.assert_array_equal(dp, want)


def test_the_backward_takes_the_fused_pass_with_the_same_bits(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv(_fused.ENV, "numba")
    kernels, calls = _fused.warm(), []

    def counted(*args):
        calls.append(args[0].shape)
        return kernels.softmax_grad_rows(*args)

    q, k, v, g = _inputs()
    monkeypatch.setattr(_fused, "_loaded", [kernels._replace(softmax_grad_rows=counted)])
    fused = al.attention_backward(q, k, v, g, Causal())
    assert calls  # every piece of the batch took it
    monkeypatch.setattr(_fused, "_loaded", [kernels._replace(softmax_grad_rows=None)])
    plain = al.attention_backward(q, k, v, g, Causal())
    for a, b in zip(fused, plain, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cores", [1, 2])
def test_gradients_written_in_place_match_the_general_path(monkeypatch, cores):
    monkeypatch.setattr(_small_cores, "CORES", cores)
    q, k, v, g = _inputs()
    mask = Causal()
    assert _small.small_backward(q, k, v, g, mask, None, "auto") is not None
    fast = al.attention_backward(q, k, v, g, mask)
    general = al.attention_backward(q, k, v, g, mask, threads=1)
    wide = al.attention_backward(*(a.astype(np.float64) for a in (q, k, v, g)), mask)
    for a, b, c, x in zip(fast, general, wide, (q, k, v), strict=True):
        assert a.shape == x.shape and a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, **F32)


def test_the_three_gradients_share_a_block_but_no_element():
    q, k, v, g = _inputs()
    dq, dk, dv = al.attention_backward(q, k, v, g, Causal())
    assert dq.base is not None and dq.base is dk.base is dv.base  # one block: see _outputs
    assert not any(np.shares_memory(a, b) for a, b in ((dq, dk), (dk, dv), (dq, dv)))
    keep_k, keep_v = dk.copy(), dv.copy()
    dq[...] = np.nan  # writing one gradient leaves the others as they were
    np.testing.assert_array_equal(dk, keep_k)
    np.testing.assert_array_equal(dv, keep_v)


def test_forward_results_are_arrays_of_their_own():
    q, k, v, _ = _inputs()
    out, weights, lse = al.attention(q, k, v, Causal(), return_weights=True, return_lse=True)
    # dropping the large weights must free them, whatever the output does
    assert weights.base is None or not np.shares_memory(weights, out)
    assert not np.shares_memory(out, lse)
    wide = al.attention(*(a.astype(np.float64) for a in (q, k, v)), Causal(), return_lse=True)
    np.testing.assert_allclose(out, wide[0], **F32)
    np.testing.assert_allclose(lse, wide[1], **F32)
    general = al.attention(q, k, v, Causal(), return_weights=True, return_lse=True, threads=1)
    for a, b in zip((out, weights, lse), general, strict=True):
        np.testing.assert_array_equal(a, b)


def test_small_results_keep_numpys_own_arrays():
    assert _small_cores._outputs([(4, 2)], 1, np.float32, True) is None  # the worked example
    block = _small_cores._outputs([(32, 16), (32, 16)], 64, np.float32, True)
    assert [a.shape for a in block] == [(64, 32, 16)] * 2 and block[0].base is block[1].base
    apart = _small_cores._outputs([(32, 16), (32, 16)], 64, np.float32, False)
    assert apart[0].base is None and apart[1].base is None


def _head_views(b, h, n, e, seed):
    """(B, h, N, e) transposed views of (B, N, h·e) arrays: how a transformer's projections
    hand attention its heads (``transformer/_blocks.heads_of``)."""
    rng = np.random.default_rng(seed)
    flat = [rng.standard_normal((b, n, h * e)).astype(np.float32) for _ in range(4)]
    return [a.reshape(b, n, h, e).transpose(0, 2, 1, 3) for a in flat]


@pytest.mark.parametrize("cores", [2, 3])
@pytest.mark.parametrize("dims", [(32, 4, 32, 16), (1, 8, 64, 16), (3, 2, 48, 8), (2, 4, 24, 8)])
def test_a_batch_of_strided_heads_is_cut_without_copies_and_matches(monkeypatch, cores, dims):
    monkeypatch.setattr(_small_cores, "CORES", cores)
    monkeypatch.setattr(_small_cores, "SPLIT_WORK", 1)  # every one of these is cut
    seen = []
    monkeypatch.setattr(
        _small_cores, "_cut_axis", lambda *a, f=_small_cores._cut_axis: seen.append(a[3]) or f(*a)
    )
    q, k, v, g = _head_views(*dims, seed=sum(dims))
    assert not q.flags.c_contiguous
    out, lse = al.attention(q, k, v, Causal(), return_lse=True)
    grads = al.attention_backward(q, k, v, g, Causal(), lse=lse)
    again = al.attention_backward(q, k, v, g, Causal())
    b = dims[0]
    # the first leading axis longer than 1, when it has an entry for every core
    axis = 0 if b > 1 else 1
    assert seen == ([axis] * 3 if dims[axis] >= cores else [])
    general = al.attention(q, k, v, Causal(), return_lse=True, threads=1)
    np.testing.assert_array_equal(out, general[0])
    np.testing.assert_array_equal(lse, general[1])
    for a, c in zip(again, al.attention_backward(q, k, v, g, Causal(), threads=1), strict=True):
        np.testing.assert_array_equal(a, c)
    wide = [a.astype(np.float64) for a in (q, k, v, g)]
    np.testing.assert_allclose(out, al.attention(*wide[:3], Causal()), **F32)
    for a, c in zip(grads, al.attention_backward(*wide, Causal()), strict=True):
        np.testing.assert_allclose(a, c, **F32)


def test_a_padding_mask_is_sliced_with_its_piece(monkeypatch):
    monkeypatch.setattr(_small_cores, "CORES", 2)
    monkeypatch.setattr(_small_cores, "SPLIT_WORK", 1)
    from attnlab.core.masks import Padding

    q, k, v, g = _head_views(4, 2, 24, 8, seed=5)
    mask = Padding([24, 17, 9, 3])  # one length per batch element: differs across the cut
    out = al.attention(q, k, v, mask)
    grads = al.attention_backward(q, k, v, g, mask)
    np.testing.assert_array_equal(out, al.attention(q, k, v, mask, threads=1))
    for a, c in zip(grads, al.attention_backward(q, k, v, g, mask, threads=1), strict=True):
        np.testing.assert_array_equal(a, c)
