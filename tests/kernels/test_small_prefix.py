"""The fast path's blocked tails (kernels/_small_exp.py's ``_exp_prefix``): where a mask ends every
row's keys early (a causal mask), the row max, exp and mask passes run only up to where each
band's keys end and write the exact 0 exp(-inf) gives past it.

The oracle is the same fast path with the tails switched off (``PREFIX_ROWS`` past N, so that
every pass covers whole rows as before): the answers must be equal bit for bit, as the sums
still run over whole rows. Which road ran is checked, never how fast.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.kernels import _small_cores, _small_exp, _small_masks, _small_plan
from attnlab.masks import Causal, Dense, Padding, SlidingWindow


@pytest.fixture
def roads(monkeypatch):
    """A function road(on) that switches the tails on or off and forgets kept tables, and the
    list of calls ``_exp_prefix`` saw. numpy's passes: the compiled one skips the tails too
    (tests/kernels/test_fused_softmax.py)."""
    seen: list[int] = []
    monkeypatch.setenv("ATTNLAB_KERNEL", "numpy")
    monkeypatch.setattr(
        _small_exp,
        "_exp_prefix",
        lambda x, fresh, _p=_small_exp._exp_prefix: seen.append(1) or _p(x, fresh),
    )

    def road(on: bool) -> None:
        monkeypatch.setattr(_small_masks, "PREFIX_ROWS", 64 if on else 10**9)
        _small_masks._kept.clear()

    yield road, seen
    _small_masks._kept.clear()


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(4)]


MASKS = {
    "causal": Causal(),
    "bottom right": Causal(align="bottom_right"),
    "window": SlidingWindow(20),
    "table": Dense(np.tril(np.ones((128, 128), bool))),
    "causal + ragged table": Causal() + Dense(np.arange(128)[None, :] < 100),
}


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("shape", [(2, 3, 128, 16), (1, 2, 128, 8)])
def test_the_tails_change_no_bit(roads, monkeypatch, shape, name, dtype, cores):
    road, seen = roads
    monkeypatch.setattr(_small_cores, "CORES", cores)
    q, k, v, g = _inputs(shape, dtype)
    mask = MASKS[name]
    road(False)
    full = al.attention(q, k, v, mask, return_lse=True), al.attention_backward(q, k, v, g, mask)
    assert seen == []
    road(True)
    cut = al.attention(q, k, v, mask, return_lse=True), al.attention_backward(q, k, v, g, mask)
    assert seen, "the blocked tails were not skipped"
    for a, b in zip((*full[0], *full[1]), (*cut[0], *cut[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    # ... and both are the general path's answer (exactly: one thread, the same matmuls)
    np.testing.assert_array_equal(cut[0][0], al.attention(q, k, v, mask, threads=1))


@pytest.mark.parametrize("shape", [(8, 8, 128, 64), (1, 8, 512, 64)])
def test_the_benchmarks_shapes_change_no_bit(roads, monkeypatch, shape):
    road, seen = roads
    q, k, v, _ = _inputs(shape, np.float32, seed=1)
    road(False)
    full = al.attention(q, k, v, Causal())
    road(True)
    cut = al.attention(q, k, v, Causal())
    assert seen
    np.testing.assert_array_equal(full, cut)


def test_reach_is_where_each_rows_keys_end():
    n = 70
    tables = _small_masks.mask_tables(Causal(), n, n, (2,), np.dtype(np.float32))
    np.testing.assert_array_equal(tables[4], np.arange(1, n + 1))  # row i sees keys 0..i
    right = _small_masks.mask_tables(Causal(align="bottom_right"), n, n + 10, (), np.float64)
    np.testing.assert_array_equal(right[4], np.arange(11, n + 11))
    with pytest.raises(ValueError):  # the kept table is shared: nobody may write it
        tables[4][0] = 5


@pytest.mark.parametrize(
    ("mask", "why"),
    [
        (None, "no mask"),
        (Causal() + Dense(np.zeros((70, 70))), "a float part moves the scores"),
        (Padding([70, 60]), "the mask differs along the batch"),
        (SlidingWindow(left=3, right=100), "no row ends before half the keys"),
    ],
)
def test_no_tail_is_skipped_where_it_cannot_be(mask, why):
    tables = _small_masks.mask_tables(mask, 70, 70, (2,), np.dtype(np.float64))
    assert tables[4] is None, why


def test_short_rows_keep_numpys_whole_table_path(roads):
    road, seen = roads
    road(True)
    tables = _small_masks.mask_tables(Causal(), 32, 32, (64, 4), np.dtype(np.float32))
    np.testing.assert_array_equal(tables[4], np.arange(1, 33))  # the compiled pass uses it
    q, k, v, _ = _inputs((64, 4, 32, 16), np.float32)
    al.attention(q, k, v, Causal())
    assert seen == []  # 32 rows: numpy's banded calls would cost more than they save


@pytest.mark.parametrize(("n", "row_bytes"), [(64, 4096), (130, 4096), (512, 2**17), (512, 16)])
def test_the_band_plan_covers_every_row_once_with_its_keys(n, row_bytes):
    reach = np.minimum(np.arange(1, n + 1) + 3, n)
    plan = _small_masks.gemm_bands(reach, n, _small_exp._BAND_BYTES // row_bytes)
    assert [a for a, _, _ in plan] == [b for _, b, _ in [(0, 0, 0), *plan[:-1]]]
    assert plan[-1][1] == n
    for a, b, c in plan:
        assert c == reach[a:b].max()
        assert (b - a) * row_bytes <= max(row_bytes, _small_exp._BAND_BYTES)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_peak_is_not_finite_exactly_when_a_value_is_not(bad):
    a = np.arange(-5.0, 4.0)
    assert _small_plan.peak(a) == 5.0
    a[3] = bad
    assert not np.isfinite(_small_plan.peak(a))
