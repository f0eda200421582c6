"""The compiled softmax pass of the dense paths (``_fused_numba.softmax_rows``, taken by
kernels/_small.py and kernels/dense.py on the calls ``_fused.rows_softmax`` picks).

Oracles: numpy's own passes (scale, mask, row max, shift, exp) on the same table, which the
kernel must reproduce exactly but for exp's few ulps (``_fused.ULPS``), with the row maxima and
every blocked weight exact; float64 attention for whole calls; and the two dense paths, fast
and general, which must still agree bit for bit when both take the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal, Padding, SlidingWindow
from attnlab.kernels import _fused, _small, dense
from tolerances import F32

pytest.importorskip("numba")


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def _numpy_passes(s, scale, blocked):
    """What dense.py's numpy passes make of scores s (P, R, C): weights before the row sum,
    and each row's max (-inf for a row with no key, shifted by 0)."""
    t = s * np.float32(scale)
    if blocked is not None:
        t[:, blocked] = -np.inf
    top = t.max(-1)
    shift = np.where(np.isneginf(top), np.float32(0.0), top)[..., None]
    return np.exp(t - shift), top


@pytest.fixture
def softmax():
    kernels = _fused.warm()
    assert kernels is not None
    return kernels.softmax


@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 5), (32, 32), (64, 200), (9, 131)])
@pytest.mark.parametrize("mask", ["none", "causal", "a row with no key", "reach"])
def test_the_pass_is_numpys_but_for_exps_ulps(softmax, rows, cols, mask):
    rng = np.random.default_rng(rows * cols)
    s = (rng.standard_normal((3, rows, cols)) * 4).astype(np.float32)
    blocked, reach = None, _fused.NO_REACH
    if mask != "none":
        blocked = ~np.tri(rows, cols, dtype=bool)  # causal: row i sees keys 0..i
    if mask == "a row with no key":
        blocked[rows // 2] = True
    if mask == "reach":
        reach = np.minimum(np.arange(1, rows + 1), cols).astype(np.int64)
    want, top_want = _numpy_passes(s, 0.3, blocked)
    got, top, total = s.copy(), np.empty((3, rows), np.float32), np.empty((3, rows), np.float32)
    shut = _fused.NO_BLOCKED if blocked is None or mask == "reach" else blocked
    softmax(got, 0, rows, 0.3, shut, reach, top, total, False)
    np.testing.assert_array_equal(top, top_want)  # the max is exact, -inf where no key
    np.testing.assert_array_equal(got == 0.0, want == 0.0)  # every blocked weight exactly 0
    assert _ulps(got, want).max() <= _fused.ULPS
    np.testing.assert_array_equal(total, got.sum(-1))  # numpy's own sum of the kernel's weights


def test_a_band_of_rows_and_a_given_shift(softmax):
    rng = np.random.default_rng(3)
    s = rng.standard_normal((2, 10, 12)).astype(np.float32)
    got, top, total = s.copy(), np.empty((2, 4), np.float32), np.empty((2, 4), np.float32)
    softmax(got, 3, 7, 0.5, _fused.NO_BLOCKED, _fused.NO_REACH, top, total, False)
    np.testing.assert_array_equal(got[:, :3], s[:, :3])  # rows outside the band untouched
    np.testing.assert_array_equal(got[:, 7:], s[:, 7:])
    np.testing.assert_array_equal(top, (s[:, 3:7] * np.float32(0.5)).max(-1))  # top[p, i - a]
    np.testing.assert_array_equal(total, got[:, 3:7].sum(-1))
    lse = np.full((2, 10), 0.25, np.float32)  # given: the shift is read, not computed
    given = s.copy()
    softmax(given, 0, 10, 0.5, _fused.NO_BLOCKED, _fused.NO_REACH, lse, np.empty_like(lse), True)
    assert _ulps(given, np.exp(s * np.float32(0.5) - np.float32(0.25))).max() <= _fused.ULPS
    np.testing.assert_array_equal(lse, 0.25)


def test_the_row_sum_is_numpys_pairwise_sum_bit_for_bit():
    from attnlab.kernels._fused_numba import row_sum

    rng = np.random.default_rng(5)
    for n in [*range(0, 300), 511, 512, 513, 1000, 2048, 4097]:  # every branch of the split
        row = (rng.random(n) * rng.random(n) ** 6).astype(np.float32)  # widely spread terms
        assert row_sum(row, 0, n) == np.add.reduce(row), n
        if n > 3:
            assert row_sum(row, 3, n - 3) == np.add.reduce(row[3:]), n


def test_the_rule_is_the_tile_rule_for_plain_float32_tables(monkeypatch):
    monkeypatch.setenv(_fused.ENV, "numba")
    causal = ~np.tri(8, 8, dtype=bool)
    kernel = _fused.rows_softmax(np.float32, (2,), 8, 8, causal, ())
    assert kernel is _fused.warm().softmax
    assert _fused.rows_softmax(np.float64, (2,), 8, 8, causal, ()) is None
    assert _fused.rows_softmax(np.float32, (2,), 8, 8, None, (np.zeros((8, 8)),)) is None
    per_batch = np.zeros((2, 8, 8), bool)  # a padding mask differs between batch elements
    assert _fused.rows_softmax(np.float32, (2,), 8, 8, per_batch, ()) is None
    monkeypatch.setenv(_fused.ENV, "numpy")
    assert _fused.rows_softmax(np.float32, (2,), 8, 8, causal, ()) is None


def test_a_call_too_small_for_the_pass_draws_no_mask(monkeypatch):
    monkeypatch.delenv(_fused.ENV, raising=False)
    n = 16  # 2 * 16 * 16 pairs: far below MIN_PAIRS
    assert not _fused.may_compile(np.dtype(np.float32), (2,), n, n)
    assert _fused.may_compile(np.dtype(np.float32), (1,), 512, 512)
    assert not _fused.may_compile(np.dtype(np.float64), (1,), 512, 512)

    def drawn(*_):
        raise AssertionError("the general dense path drew the mask for the compiled pass")

    monkeypatch.setattr(dense, "mask_tables", drawn)
    q, k, v = (np.ones((2, n, 4), np.float32) for _ in range(3))
    out = al.attention(q, k, v, Causal(), threads=1, method="dense")
    np.testing.assert_allclose(out, np.ones((2, n, 4)), **F32)  # equal values: any average is 1
    monkeypatch.setenv(_fused.ENV, "numba")  # set, the rule is asked at any size
    assert _fused.may_compile(np.dtype(np.float32), (2,), n, n)


MASKS = {
    "none": None,
    "causal": Causal(),
    "window": SlidingWindow(24),
    "padding": "padding",  # per batch element: lengths made for the shape below
}


@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("shape", [(2, 4, 64, 32), (1, 2, 16, 8)])  # no threaded BLAS
def test_fast_and_general_dense_paths_agree_bit_for_bit_on_the_kernel(monkeypatch, shape, name):
    monkeypatch.setenv(_fused.ENV, "numba")  # every float32 call takes the compiled pass
    mask = MASKS[name]
    if mask == "padding":
        mask = Padding([shape[-2] - 3 - 7 * b for b in range(shape[0])])
    rng = np.random.default_rng(7)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    assert _small.small_attention(q, k, v, mask, None, "auto", False) is not None
    fast = al.attention(q, k, v, mask, return_lse=True), al.attention_backward(q, k, v, g, mask)
    general = (
        al.attention(q, k, v, mask, return_lse=True, threads=1),
        al.attention_backward(q, k, v, g, mask, threads=1),
    )
    for a, b in zip((*fast[0], *fast[1]), (*general[0], *general[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    wide = [a.astype(np.float64) for a in (q, k, v, g)]
    np.testing.assert_allclose(fast[0][0], al.attention(*wide[:3], mask), **F32)
    for a, b in zip(fast[1], al.attention_backward(*wide, mask), strict=True):
        np.testing.assert_allclose(a, b, **F32)


def test_a_training_step_on_the_saved_lse_takes_the_kernel_too(monkeypatch):
    monkeypatch.setenv(_fused.ENV, "numba")
    kernels, shifts = _fused.warm(), []

    def counted(*args):
        shifts.append(args[-1])  # given: the saved lse is the shift
        return kernels.softmax(*args)

    monkeypatch.setattr(_fused, "_loaded", [kernels._replace(softmax=counted)])
    rng = np.random.default_rng(11)
    q, k, v, g = (rng.standard_normal((4, 2, 64, 16)).astype(np.float32) for _ in range(4))
    _, lse = al.attention(q, k, v, Causal(), return_lse=True)
    assert shifts and not any(shifts)  # the forward computes its row maxima
    shifts.clear()
    saved = al.attention_backward(q, k, v, g, Causal(), lse=lse)
    assert shifts and all(shifts)
    again = al.attention_backward(q, k, v, g, Causal())
    wide = al.attention_backward(*(a.astype(np.float64) for a in (q, k, v, g)), Causal())
    for a, b, c in zip(saved, again, wide, strict=True):
        np.testing.assert_allclose(a, b, **F32)
        np.testing.assert_allclose(a, c, **F32)


def test_warm_loads_the_kernel_versions_the_dense_paths_call(monkeypatch):
    monkeypatch.setenv(_fused.ENV, "numba")
    kernels = _fused.warm()
    loaded = {name: len(getattr(kernels, name).signatures) for name in kernels._fields}
    assert all(loaded.values())  # each kernel ran once: its machine code is in memory
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal((2, 2, 96, 16)).astype(np.float32) for _ in range(4))
    for mask in (None, Causal(), SlidingWindow(9)):
        al.attention(q, k, v, mask)  # the fast path
        al.attention(q, k, v, mask, threads=1)  # the general dense path
        al.attention_backward(q, k, v, g, mask)
    # no call needed a version warm() had not loaded (each costs a load from numba's cache)
    assert len(kernels.softmax.signatures) == loaded["softmax"]
    assert len(kernels.softmax_grad_rows.signatures) == loaded["softmax_grad_rows"]
