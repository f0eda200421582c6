"""Figure ``sqrt-dk-histogram``: why scores are divided by √d_k (§6.3).

Two panels, both computed by lab 2b in ``attnlab.labs``:
  * the distribution of q·k for random q and k (entries N(0, 1)) at one width d_k, raw or
    scaled by 1/√d_k (``labs.score_histogram``);
  * softmax trials over 64 keys: the share of trials whose largest weight exceeds 0.99, and the
    mean gradient term p_max(1 - p_max) in the saturated unscaled trials (``labs.saturation``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from attnlab import labs
from attnlab.errors import AttnlabError
from attnlab.figures._data import as_dict, vector

__all__ = [
    "DRAWS",
    "D_K_DEFAULT",
    "D_K_MAX",
    "D_K_MIN",
    "D_K_STEP",
    "GAPS",
    "GAP_PAIRS",
    "KEYS",
    "THRESHOLD",
    "TRIALS",
    "Curve",
    "GapShare",
    "HistogramFigure",
    "Series",
    "build_histogram",
]

FIGURE_ID = "sqrt-dk-histogram"
D_K_MIN, D_K_MAX = 16, 256
D_K_STEP = 16  # the page's slider step: 16 widths, each computed ahead by warm()
D_K_DEFAULT = 64  # the width the page starts on
DRAWS = 10_000  # scores in the histogram: plenty for its shape, and fast enough to drag
BINS = 60
# Fixed bin ranges, so moving the slider shows the widening: ±5 spreads at the widest d_k
# unscaled (5·√256 = 80), ±5 scaled (the spread is 1 at every width).
LIMITS = {False: 5.0 * math.sqrt(D_K_MAX), True: 5.0}
KEYS = 64  # keys per softmax trial, as in the chapter's measurement
TRIALS = 500
THRESHOLD = 0.99


@dataclass(frozen=True)
class Series:
    """One histogram as a density (draws per unit of score / all draws), so raw and scaled
    scores share one axis even though their bins differ in width."""

    scaled: bool
    edges: list[float]
    density: list[float]
    std: float
    predicted_std: float


@dataclass(frozen=True)
class Curve:
    """Saturation against width: at each slider width, the share of saturated trials."""

    d_k: list[int]
    unscaled_share: list[float]
    scaled_share: list[float]


@dataclass(frozen=True)
class GapShare:
    """How often two random scores of one query differ by more than ``gap`` (§6.3: a gap g
    makes one softmax weight e^g times the other)."""

    gap: float
    ratio: float  # e^gap
    unscaled_share: float  # share of score pairs q·k1, q·k2 with |difference| > gap
    scaled_share: float  # the same pairs divided by √d_k


@dataclass(frozen=True)
class HistogramFigure:
    figure: str
    d_k: int
    scaled: bool
    draws: int
    edges: list[float]  # BINS + 1 bin edges
    counts: list[float]  # scores per bin
    outside: int  # scores beyond the bins' range
    std: float  # measured spread of the scores shown
    predicted_std: float  # §6.3's proof: √d_k raw, 1 scaled
    keys: int
    trials: int
    threshold: float
    saturated_share: float  # share of trials with p_max > threshold, in the mode shown
    unscaled_share: float  # share of unscaled trials with p_max > threshold
    scaled_share: float  # the same with scaling
    gradient_term: float | None  # mean p_max(1 - p_max) over saturated unscaled trials
    seed: int
    series: list[Series]  # raw and scaled scores at this width, on a common density scale
    curve: Curve  # saturation share at every slider width, raw and scaled
    gaps: list[GapShare]  # how often a pair of scores differs by more than each of GAPS

    def as_dict(self) -> dict:
        return as_dict(self)


# The labs are seeded, so each result is a pure function of its arguments: keeping the recent
# ones makes dragging the slider back and forth, or toggling scaling, cost nothing. Bounded:
# a ScoreHistogram is ~60 numbers, a SaturationResult ~1,000.
@lru_cache(maxsize=256)
def _scores(d_k: int, scaled: bool, seed: int):
    return labs.score_histogram(
        d_k, scaled=scaled, draws=DRAWS, bins=BINS, seed=seed, limit=LIMITS[scaled]
    )


@lru_cache(maxsize=128)
def _saturation(d_k: int, seed: int):
    return labs.saturation(d_k=d_k, keys=KEYS, trials=TRIALS, threshold=THRESHOLD, seed=seed)


def _series(d_k: int, scaled: bool, seed: int) -> Series:
    hist = _scores(d_k, scaled, seed)
    edges = vector(hist.edges)
    width = edges[1] - edges[0]
    return Series(
        scaled=scaled,
        edges=edges,
        density=[float(c) / (DRAWS * width) for c in hist.counts],
        std=float(hist.std),
        predicted_std=1.0 if scaled else math.sqrt(d_k),
    )


def _curve(seed: int) -> Curve:
    widths = list(range(D_K_MIN, D_K_MAX + 1, D_K_STEP))
    sats = [_saturation(w, seed) for w in widths]
    return Curve(
        d_k=widths,
        unscaled_share=[float(s.unscaled_share) for s in sats],
        scaled_share=[float(s.scaled_share) for s in sats],
    )


#: The gaps the figure reports: weight ratios of e^2 ≈ 7, e^5 ≈ 148, e^10 ≈ 22,000, e^20 ≈ 5e8.
GAPS = (2.0, 5.0, 10.0, 20.0)
GAP_PAIRS = 8192  # score pairs per width: a share's standard error is at most 0.006
_GAP_STREAM = 101  # the random stream's tag, apart from the labs' own


@lru_cache(maxsize=64)
def _gaps(d_k: int, seed: int) -> tuple[GapShare, ...]:
    """Shares of score pairs (q·k1, q·k2), one query and two keys with N(0, 1) entries, whose
    difference passes each gap, raw and divided by √d_k, from the same draws."""
    rng = np.random.default_rng([seed, _GAP_STREAM, d_k])  # keyed as the labs key theirs
    diff = np.empty(GAP_PAIRS)  # (P,): q·k1 − q·k2 = q·(k1 − k2)
    for a in range(0, GAP_PAIRS, 1024):  # 1,024 pairs at a time: at most 6 MiB at d_k = 256
        q, k1, k2 = rng.standard_normal((3, min(1024, GAP_PAIRS - a), d_k))  # (3, P', d_k)
        diff[a : a + len(q)] = np.einsum("pd,pd->p", q, k1 - k2)
    gap = np.abs(diff)
    scaled = gap / math.sqrt(d_k)  # §6.3: the same pairs after the 1/√d_k
    return tuple(
        GapShare(g, math.exp(g), float(np.mean(gap > g)), float(np.mean(scaled > g))) for g in GAPS
    )


def warm(widths=None, seed: int = 0) -> None:
    """Compute the figure ahead for the given widths (default: every slider step, the page's
    starting width first, so the first view is served from the cache)."""
    if widths is None:
        steps = range(D_K_MIN, D_K_MAX + 1, D_K_STEP)
        widths = [D_K_DEFAULT, *(w for w in steps if w != D_K_DEFAULT)]
    for d_k in widths:
        for scaled in (False, True):
            build_histogram(d_k, scaled=scaled, seed=seed)


def build_histogram(
    d_k: int = D_K_DEFAULT, *, scaled: bool = False, seed: int = 0
) -> HistogramFigure:
    """Both panels of the figure at head width ``d_k`` (16 to 256).

    Args:
        d_k: query/key width.
        scaled: show scores divided by √d_k.
        seed: seed of both labs; the same seed gives the same figure.

    >>> wide, narrow = build_histogram(256), build_histogram(16)
    >>> bool(abs(wide.std / narrow.std - 4.0) < 0.2)  # √(256/16) = 4, within sampling error
    True
    >>> build_histogram(256, scaled=True).scaled_share
    0.0
    """
    if isinstance(d_k, bool) or not isinstance(d_k, int) or not D_K_MIN <= d_k <= D_K_MAX:
        raise AttnlabError(
            f"expected d_k to be a whole number from {D_K_MIN} to {D_K_MAX}, "
            f"but got {d_k!r} instead"
        )
    hist = _scores(d_k, scaled, seed)
    sat = _saturation(d_k, seed)
    return HistogramFigure(
        figure=FIGURE_ID,
        d_k=d_k,
        scaled=scaled,
        draws=DRAWS,
        edges=vector(hist.edges),
        counts=vector(hist.counts),
        outside=int(hist.outside),
        std=float(hist.std),
        predicted_std=1.0 if scaled else math.sqrt(d_k),  # §6.3: σ_z = √d_k before scaling
        keys=KEYS,
        trials=TRIALS,
        threshold=THRESHOLD,
        saturated_share=float(sat.scaled_share if scaled else sat.unscaled_share),
        unscaled_share=float(sat.unscaled_share),
        scaled_share=float(sat.scaled_share),
        gradient_term=None if sat.gradient_term is None else float(sat.gradient_term),
        seed=seed,
        series=[_series(d_k, False, seed), _series(d_k, True, seed)],
        curve=_curve(seed),
        gaps=list(_gaps(d_k, seed)),
    )
