"""The width sweep and score histograms (figure sqrt-dk-histogram, §6.3)."""

from __future__ import annotations

import math

import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import saturation, score_histogram, width_sweep

Z = 5.0  # standard errors of slack; see test_labs_variance.py


@pytest.fixture(scope="module")
def default():
    return width_sweep()


def _std_se(sigma: float, d_k: int, n: int) -> float:
    # SE of a sample standard deviation: sigma · sqrt((kurtosis - 1) / 4n), kurtosis 3 + 6/d_k.
    return sigma * math.sqrt((2 + 6 / d_k) / (4 * n))


def test_unscaled_spread_grows_like_sqrt_dk_and_scaled_stays_at_one(default):
    assert [r.width for r in default.rows] == [16, 32, 64, 128, 256]
    for r in default.rows:
        sigma = math.sqrt(r.width)
        assert abs(r.unscaled_std - sigma) <= Z * _std_se(sigma, r.width, default.draws)
        assert abs(r.scaled_std - 1.0) <= Z * _std_se(1.0, r.width, default.draws)


def test_saturation_climbs_unscaled_and_vanishes_scaled(default):
    shares = [r.unscaled_share for r in default.rows]
    assert shares == sorted(shares) and shares[0] < 0.05 < 0.3 < shares[-1]
    assert all(r.scaled_share == 0.0 for r in default.rows)


def test_each_row_repeats_the_saturation_lab(default):
    row = default.rows[3]
    lab = saturation(d_k=128, seed=0)
    assert (row.unscaled_share, row.scaled_share, row.gradient_term) == (
        lab.unscaled_share,
        lab.scaled_share,
        lab.gradient_term,
    )


def test_histograms_share_one_range_per_case(default):
    unscaled = {r.unscaled_histogram.edges for r in default.rows}
    scaled = {r.scaled_histogram.edges for r in default.rows}
    assert len(unscaled) == len(scaled) == 1
    edges = unscaled.pop()
    assert edges[0] == -edges[-1] == -default.unscaled_limit == -5 * 16
    assert len(edges) == default.bins + 1
    for r in default.rows:
        for h in (r.unscaled_histogram, r.scaled_histogram):
            assert sum(h.counts) + h.outside == h.draws == default.draws


def test_score_histogram_matches_the_sweep_and_is_seeded(default):
    h = score_histogram(64, scaled=True, seed=0)
    assert h == default.rows[2].scaled_histogram  # same draws, same range (±5)
    assert h == score_histogram(64, scaled=True, seed=0)
    assert h.counts != score_histogram(64, scaled=True, seed=1).counts


def test_score_histogram_range():
    free = score_histogram(100, scaled=False, draws=2_000, bins=10)
    assert free.edges[0] == -free.edges[-1] == -50.0  # ±5 √d_k by default
    fixed = score_histogram(100, scaled=False, draws=2_000, bins=10, limit=5.0)
    assert fixed.edges[-1] == 5.0 and fixed.outside > 1_000  # most unscaled scores lie beyond ±5
    assert fixed.std == free.std  # the spread is measured over every draw


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 0.0}, "limit"),
        ({"limit": float("nan")}, "limit"),
        ({"bins": 0}, "bins"),
        ({"draws": 1}, "draws"),
        ({"d_k": 0}, "d_k"),
    ],
)
def test_histogram_bad_arguments(kwargs, match):
    args = {"d_k": 16, "scaled": True, **kwargs}
    with pytest.raises(AttnlabError, match=match):
        score_histogram(**args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"widths": (16, 0)}, "widths"), ({"threshold": 1.0}, "threshold"), ({"keys": 1}, "keys")],
)
def test_sweep_bad_arguments(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        width_sweep(**kwargs)
