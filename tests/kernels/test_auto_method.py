"""method="auto": which exact path it picks, by shape, dtype, mask and memory budget (not speed).

The crossover constants themselves are measurements (benchmarks/crossover.py, docs/bench.md);
these tests hold the rule that uses them and check that "auto" returns exactly what the path it
picked returns when named explicitly.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.api.attention import AUTO_BLOCKWISE_PAIRS, choose_method
from attnlab.core.masks import Causal, Padding, SlidingWindow
from attnlab.errors import AttnlabError
from attnlab.kernels import _small, blockwise, blockwise_backward

BUDGET = blockwise.DEFAULT_MEMORY_BUDGET
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def pick(lead, n, m=None, dtype=F32, *, budget=BUDGET, weights=False, mask=None):
    return choose_method("auto", lead, n, n if m is None else m, dtype, budget, weights, mask)


def test_the_chapter_sizes_stay_dense_and_long_sequences_go_blockwise():
    assert pick((1, 8), 64) == "dense"
    assert pick((1, 8), 4096) == "blockwise"  # a 512 MiB table would also pass the budget
    assert pick((1, 8), 2048) == "blockwise"  # 128 MiB: within the budget, past the crossover
    assert pick((1, 8), 2048, dtype=F64) == "blockwise"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_the_crossover_is_counted_in_pairs_per_matrix_and_depends_on_the_dtype(dtype):
    pairs = AUTO_BLOCKWISE_PAIRS[dtype]
    side = int(np.sqrt(pairs))
    assert side * side == pairs
    lead = (64,)  # enough matrices that every table here is past the small path's reach
    assert pick(lead, side, dtype=dtype) == "blockwise"
    assert pick(lead, side, side - 1, dtype=dtype) == "dense"  # one pair short per row
    assert pick(lead, side - 1, side, dtype=dtype) == "dense"
    assert pick(lead, 2 * side, side // 2, dtype=dtype) == "blockwise"  # cross-attention: N·M
    assert AUTO_BLOCKWISE_PAIRS[F64] < AUTO_BLOCKWISE_PAIRS[F32]


def test_a_table_the_small_path_answers_stays_dense_whatever_its_pairs():
    side = int(np.sqrt(AUTO_BLOCKWISE_PAIRS[F32]))
    assert side * side * 4 <= _small.SMALL_BYTES < 3 * side * side * 4
    assert pick((), side) == "dense"  # 4 MiB: the small path's, and dense there
    assert pick((3,), side) == "blockwise"  # 12 MiB


@pytest.mark.parametrize("mask", [Causal(), SlidingWindow(64)])
def test_a_mask_whose_tiles_blockwise_skips_crosses_over_sooner(mask):
    side = int(np.sqrt(AUTO_BLOCKWISE_PAIRS[F32]))
    half = side // 2  # a quarter of the pairs
    lead = (64,)
    assert pick(lead, half) == "dense"
    assert pick(lead, half, mask=mask) == "blockwise"
    assert pick(lead, half - 1, mask=mask) == "dense"
    assert pick(lead, half, mask=Padding(np.full(64, half))) == "dense"  # skips nothing


def test_the_gradients_cross_over_sooner():
    from attnlab.api.attention import AUTO_BLOCKWISE_PAIRS_BACKWARD

    side = int(np.sqrt(AUTO_BLOCKWISE_PAIRS_BACKWARD))
    assert side * side == AUTO_BLOCKWISE_PAIRS_BACKWARD < AUTO_BLOCKWISE_PAIRS[F64]
    for dtype in (F32, F64):
        assert choose_method("auto", (64,), side, side, dtype, BUDGET, False) == "dense"
        assert choose_method("auto", (64,), side, side, dtype, BUDGET, False, backward=True) == (
            "blockwise"
        )
        assert (
            choose_method("auto", (64,), side - 1, side, dtype, BUDGET, False, backward=True)
            == "dense"
        )
    assert choose_method("auto", (1,), side, side, F32, BUDGET, False, backward=True) == "dense"


def test_the_memory_budget_still_forces_blockwise_and_weights_still_force_dense():
    assert pick((1, 8), 64, budget=1024) == "blockwise"  # 128 KiB table, 1 KiB budget
    assert pick((1, 8), 2048, weights=True) == "dense"  # the table is the answer
    with pytest.raises(AttnlabError, match="memory budget"):
        pick((1, 8), 4096, weights=True)
    with pytest.raises(AttnlabError, match="return_weights"):
        choose_method("blockwise", (1, 8), 64, 64, F32, BUDGET, True)
    assert choose_method("dense", (1, 8), 4096, 4096, F32, BUDGET, False) == "dense"


def _spy(monkeypatch, module):
    calls = []
    run = module.run

    def counted(*args, **kwargs):
        calls.append(args[0].n)
        return run(*args, **kwargs)

    monkeypatch.setattr(module, "run", counted)
    return calls


def _inputs(lead, n, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(lead + (n, d)).astype(dtype) for _ in range(3)]


@pytest.mark.parametrize(
    ("lead", "n", "dtype", "mask"),
    [
        ((3,), 1024, np.float32, None),
        ((9,), 512, np.float32, Causal()),
        ((5,), 512, np.float64, None),
    ],
)
def test_auto_past_the_crossover_is_the_blockwise_result_bit_for_bit(
    monkeypatch, lead, n, dtype, mask
):
    q, k, v = _inputs(lead, n, 4, dtype)
    calls = _spy(monkeypatch, blockwise)
    out = al.attention(q, k, v, mask)
    assert calls == [n]  # the default call ran the blockwise kernel, once
    assert np.array_equal(out, al.attention(q, k, v, mask, method="blockwise"))
    dense = al.attention(q, k, v, mask, method="dense")
    np.testing.assert_allclose(out, dense, rtol=0, atol=2e-5 if dtype == np.float32 else 1e-12)


def test_auto_below_the_crossover_is_the_dense_result_bit_for_bit(monkeypatch):
    q, k, v = _inputs((2, 8), 64, 8, np.float32)
    calls = _spy(monkeypatch, blockwise)
    for options in ({}, {"threads": 2}):  # the small path, and the general one
        out = al.attention(q, k, v, Causal(), **options)
        assert np.array_equal(out, al.attention(q, k, v, Causal(), method="dense", **options))
    assert calls == []


def test_return_weights_keeps_auto_dense_past_the_crossover(monkeypatch):
    q, k, v = _inputs((3,), 1024, 4, np.float32)
    calls = _spy(monkeypatch, blockwise)
    out, weights = al.attention(q, k, v, return_weights=True)
    assert calls == [] and weights.shape == (3, 1024, 1024)
    dense_out, dense_weights = al.attention(q, k, v, method="dense", return_weights=True)
    assert np.array_equal(out, dense_out) and np.array_equal(weights, dense_weights)


def test_the_backward_pass_goes_blockwise_past_the_crossover(monkeypatch):
    q, k, v = _inputs((3,), 1024, 4, np.float32)
    g = np.random.default_rng(1).standard_normal(q.shape).astype(np.float32)
    calls = _spy(monkeypatch, blockwise_backward)
    grads = al.attention_backward(q, k, v, g)
    assert calls == [1024]
    # dk and dv sum over query blocks in the order threads finish: equal within rounding.
    explicit = al.attention_backward(q, k, v, g, method="dense")
    for got, want in zip(grads, explicit, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
