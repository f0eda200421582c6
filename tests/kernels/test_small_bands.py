"""The dense forwards' banded products (``_small_masks.gemm_bands``): for a mask that ends each
row's keys early, q kᵀ and P V are computed a band of rows at a time on the keys the band
reaches. Both dense paths, fast and general, make the same products, so they still agree bit
for bit.

Oracles: the general path (bit for bit), float64 attention, and the weights path, which keeps
its whole products.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal, SlidingWindow
from attnlab.kernels import _fused, _small, _small_exp, _small_masks, dense
from tolerances import F32

pytest.importorskip("numba")


@pytest.mark.parametrize("n", [64, 100, 512, 1000])
def test_the_bands_cover_every_row_with_the_keys_it_reaches(n):
    reach = np.minimum(np.arange(1, n + 1) + 3, n)  # a causal mask with a look-ahead of 3
    bands = _small_masks.gemm_bands(reach, n)
    assert bands[0][0] == 0 and bands[-1][1] == n
    assert all(b == a2 for (_, b, _), (a2, _, _) in itertools.pairwise(bands))
    size = max(_small_masks.PREFIX_BAND, -(-n // _small_masks.PREFIX_SPLIT))
    for a, b, c in bands:
        assert b - a == size or b == n
        assert c == reach[a:b].max()  # no row reaches past its band's keys


@pytest.fixture
def counted(monkeypatch):
    """Counts the banded products each path makes (under ATTNLAB_KERNEL=numba)."""
    monkeypatch.setenv(_fused.ENV, "numba")
    calls = {"fast": 0, "general": 0}

    def count(name, fn):
        def wrapped(*args):
            calls[name] += 1
            return fn(*args)

        return wrapped

    monkeypatch.setattr(_small_exp, "banded_scores", count("fast", _small_masks.banded_scores))
    monkeypatch.setattr(dense, "banded_scores", count("general", _small_masks.banded_scores))
    return calls


@pytest.mark.parametrize("mask", [Causal(), SlidingWindow(24)])
@pytest.mark.parametrize("shape", [(1, 2, 256, 16), (1, 1, 300, 8), (2, 1, 272, 32)])
def test_fast_and_general_banded_forwards_agree_bit_for_bit(counted, mask, shape):
    rng = np.random.default_rng(sum(shape))
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    out, lse = al.attention(q, k, v, mask, return_lse=True)
    general = al.attention(q, k, v, mask, return_lse=True, threads=1)
    assert counted["fast"] >= 1 and counted["general"] >= 1  # both took the banded products
    np.testing.assert_array_equal(out, general[0])
    np.testing.assert_array_equal(lse, general[1])
    wide = al.attention(*(a.astype(np.float64) for a in (q, k, v)), mask, return_lse=True)
    np.testing.assert_allclose(out, wide[0], **F32)
    np.testing.assert_allclose(lse, wide[1], **F32)
    whole, _ = al.attention(q, k, v, mask, return_weights=True)  # whole products
    np.testing.assert_allclose(out, whole, **F32)


def test_short_or_unmasked_calls_keep_whole_products(counted):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((4, 2, 128, 16)).astype(np.float32) for _ in range(3))
    al.attention(q, k, v, Causal())  # N below BANDED_ROWS
    q, k, v = (rng.standard_normal((1, 2, 256, 16)).astype(np.float32) for _ in range(3))
    al.attention(q, k, v)  # no mask: every key is reached
    al.attention(q, k, v, Causal(), return_weights=True)  # the weights are the answer
    assert counted == {"fast": 0, "general": 0}


def test_keys_past_a_band_never_reach_the_answer(counted):
    """The banded product leaves each row's tail unset; the compiled pass writes it as 0. A
    scratch table left full of NaN by an earlier use must change nothing."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 256, 16)).astype(np.float32) for _ in range(3))
    want = al.attention(q, k, v, Causal(), threads=1)
    x = _small.prepare(q, k, v, Causal(), None, "auto")
    _small_exp.scratch("scores", x.table_lead + (256, 256), np.float32).fill(np.nan)
    got = al.attention(q, k, v, Causal())
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [7, 11])  # the plan's bands are 33 rows: never aligned
def test_general_bands_that_split_the_plans_bands_give_the_same_answer(counted, monkeypatch, rows):
    """``dense_output`` cuts its own bands of rows by bytes; each must take, row by row, the
    keys of the plan's band the row belongs to, wherever the two kinds of band split. (Bit
    for bit it need not agree here: OpenBLAS rounds a product of 7 rows apart from one of 33.
    At its own band size, 16 MiB of scores, the general path takes every table the fast path
    takes in one band, and the two agree bit for bit: see the tests above.)"""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 1, 257, 8)).astype(np.float32) for _ in range(3))
    fast = al.attention(q, k, v, Causal())
    monkeypatch.setattr(dense, "_OUT_BAND_BYTES", rows * 257 * 4)  # rows of 257 float32 scores
    general = al.attention(q, k, v, Causal(), threads=1)
    assert counted["general"] == -(-257 // rows)  # one banded product per band of rows
    np.testing.assert_allclose(general, fast, **F32)
    wide = al.attention(*(a.astype(np.float64) for a in (q, k, v)), Causal())
    np.testing.assert_allclose(general, wide, **F32)
