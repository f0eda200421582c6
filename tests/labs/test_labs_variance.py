"""The variance lab (§6.3): Var(q·k)/d_k and Var(q·k/√d_k) land at 1 within their standard error."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import variance_scaling
from attnlab.labs._common import VARIANCE, rng_for
from attnlab.labs._scores import BLOCK, CHUNK_DRAWS, score_chunks

# A draw further than 5 standard errors from the truth happens about once in 1.7 million.
Z = 5.0


@pytest.fixture(scope="module")
def default():
    return variance_scaling()


def test_default_rows_land_at_one_within_their_standard_error(default):
    assert [r.width for r in default.rows] == [32, 64, 128, 256]
    assert default.draws == 200_000
    for r in default.rows:
        assert abs(r.var_ratio - 1.0) <= Z * r.var_ratio_se, r
        assert abs(r.scaled_var - 1.0) <= Z * r.scaled_var_se, r
        assert abs(r.var_ratio - 1.0) < 0.02  # the bound
        assert r.raw_var == pytest.approx(r.var_ratio * r.width, rel=1e-12)


def test_standard_error_matches_the_normal_theory(default):
    # z = sum of d products of N(0, 1) pairs has variance d and 4th moment 3d² + 6d, so the
    # sample variance of n draws has SE sqrt((2d² + 6d) / n); divided by d for the ratio.
    for r in default.rows:
        theory = math.sqrt((2 + 6 / r.width) / default.draws)
        assert r.var_ratio_se == pytest.approx(theory, rel=0.05)


def test_scaled_variance_is_the_variance_of_the_scaled_scores(default):
    # Var(c z) = c² Var(z) holds exactly for sample variances too, up to rounding.
    for r in default.rows:
        assert r.scaled_var == pytest.approx(r.var_ratio, rel=1e-9)


def test_same_seed_same_numbers_other_seed_other_numbers_in_range(default):
    again = variance_scaling(widths=(32,), draws=20_000, seed=0)
    assert again == variance_scaling(widths=(32,), draws=20_000, seed=0)
    other = variance_scaling(seed=1)
    assert other.rows != default.rows
    for r in other.rows:
        assert abs(r.var_ratio - 1.0) <= Z * r.var_ratio_se


def test_numbers_do_not_depend_on_threads_or_other_widths():
    one = variance_scaling(widths=(16, 48), draws=40_000, workers=1)
    two = variance_scaling(widths=(16, 48), draws=40_000, workers=2)
    assert one == two
    alone = variance_scaling(widths=(48,), draws=40_000, workers=2)
    assert alone.rows[0] == one.rows[1]


def test_memory_stays_bounded_by_chunking():
    # Unchunked, 16,384 pairs at d_k = 1024 would hold 268 MB of q and k at once.
    tracemalloc.start()
    try:
        variance_scaling(widths=(1024,), draws=16_384, workers=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_score_chunks_are_lazy_and_small():
    chunks = score_chunks(0, VARIANCE, (64,), 10**8, workers=1)
    first = next(chunks)  # 10^8 draws are never materialised at once
    chunks.close()
    assert first.shape == (1, CHUNK_DRAWS)


def test_more_draws_extend_fewer():
    few = next(score_chunks(0, VARIANCE, (32,), 20_000))
    many = next(score_chunks(0, VARIANCE, (32,), 40_000))
    assert np.array_equal(few, many)  # the first 16,384 pairs do not depend on draws


def test_scores_are_sums_of_products_of_seeded_normals():
    # Widths share draws: the width-20 score is the first 20 products, width 8 the first 8.
    (z,) = score_chunks(5, VARIANCE, (20, 8), 300)
    q, k = np.concatenate(
        [rng_for(5, VARIANCE, 0, b).standard_normal((2, 300, BLOCK)) for b in range(2)], axis=-1
    )  # each (300, 32)
    np.testing.assert_allclose(z[0], (q[:, :20] * k[:, :20]).sum(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(z[1], (q[:, :8] * k[:, :8]).sum(axis=1), rtol=0, atol=1e-12)


def test_progress_reaches_the_total():
    seen = []
    variance_scaling(widths=(8, 16), draws=40_000, progress=lambda done, total: seen.append(done))
    assert seen[-1] == 40_000 and len(seen) == 3  # one call per chunk of 16,384 pairs
    assert seen == sorted(seen)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"widths": (0, 32)}, "widths"),
        ({"widths": ()}, "widths"),
        ({"widths": 32}, "widths"),
        ({"widths": (1 << 17,)}, "widths"),
        ({"draws": 1}, "draws"),
        ({"draws": 2.5}, "draws"),
        ({"seed": -1}, "seed"),
        ({"seed": True}, "seed"),
        ({"workers": 0}, "workers"),
    ],
)
def test_bad_arguments_raise_attnlab_errors(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        variance_scaling(**kwargs)
