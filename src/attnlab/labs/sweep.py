"""Lab: score histograms and saturation across head widths, the data of `sqrt-dk-histogram`.

§6.3's figure: without scaling the scores spread in proportion to √d_k and more and more trials
saturate; with it the spread is 1 at every width and saturation is gone.

Shape legend: d_k the query/key width (one row per width); B histogram bins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from attnlab.labs._chunks import CLIENT, check_client, cluster_threads, combine
from attnlab.labs._common import (
    HISTOGRAM,
    MAX_WIDTH,
    LabResult,
    Progress,
    check_int,
    check_positive,
    check_seed,
    column_keys,
)
from attnlab.labs._scores import BLOCK, CHUNK_DRAWS, chunk_count, default_workers, score_partials
from attnlab.labs._spec import SEED, Estimate, LabSpec, Line, Param, RowPlot
from attnlab.labs.softmax_saturation import MAX_KEYS, saturation
from attnlab.labs.softmax_saturation import SPEC as SATURATION

__all__ = ["SPEC", "ScoreHistogram", "SweepResult", "SweepRow", "score_histogram", "width_sweep"]

MAX_BINS = 10_000
SPAN = 5.0  # default range: ±5 standard deviations of the score (√d_k unscaled, 1 scaled)


@dataclass(frozen=True)
class ScoreHistogram:
    """Counts of q·k (or q·k/√d_k) over ``len(counts)`` equal bins on [-limit, limit]."""

    d_k: int
    scaled: bool
    edges: tuple[float, ...]  # B + 1 bin edges
    counts: tuple[int, ...]  # B counts
    std: float  # sample standard deviation over every draw, in range or not
    draws: int
    outside: int  # draws beyond ±limit (not in any bin)


def _binned(scales: np.ndarray, edges: list, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's scores z (W, m) -> counts (2, W, B) and sums (2, W, [Σz, Σz²]) of both cases."""
    counts = np.zeros((2, len(z), len(edges[0]) - 1), dtype=np.int64)  # (case, W, B)
    sums = np.zeros((2, len(z), 2))  # (case, W, 2)
    for case, values in enumerate((z, z * scales)):
        for i, row in enumerate(values):
            counts[case, i] = np.histogram(row, bins=edges[case])[0]
        sums[case, :, 0] = values.sum(axis=1)
        sums[case, :, 1] = (values * values).sum(axis=1)
    return counts, sums


def _add(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1]


def _histograms(widths, draws, bins, seed, limits, client=None) -> list[tuple[ScoreHistogram, ...]]:
    """Per width, bin one set of draws twice: unscaled (±limits[0]) and scaled (±limits[1]).

    Both histograms of a width come from the same draws, so they differ by the scaling only;
    the widths share their draws (see ``_scores``), so a sweep costs what its widest width does.
    Each chunk is binned where it is drawn; the chunks' counts and sums add in chunk order.
    """
    scales = 1.0 / np.sqrt(np.array(widths, dtype=float))[:, None]  # §6.3, (W, 1)
    edges = [np.linspace(-lim, lim, bins + 1) for lim in limits]
    parts = score_partials(seed, HISTOGRAM, widths, draws, partial(_binned, scales, edges),
                           client=client)  # fmt: skip
    start = (np.zeros((2, len(widths), bins), dtype=np.int64), np.zeros((2, len(widths), 2)))
    counts, sums = combine(parts, _add, start)
    out = []
    for i, d_k in enumerate(widths):
        pair = []
        for case in range(2):
            mean, mean_sq = sums[case, i] / draws
            var = max(mean_sq - mean**2, 0.0) * draws / (draws - 1)
            pair.append(
                ScoreHistogram(
                    d_k=d_k,
                    scaled=bool(case),
                    edges=tuple(edges[case].tolist()),
                    counts=tuple(counts[case, i].tolist()),
                    std=math.sqrt(var),
                    draws=draws,
                    outside=int(draws - counts[case, i].sum()),
                )
            )
        out.append(tuple(pair))
    return out


def score_histogram(
    d_k: int,
    *,
    scaled: bool,
    draws: int = 20_000,
    bins: int = 40,
    seed: int = 0,
    limit: float | None = None,
) -> ScoreHistogram:
    """Histogram of ``draws`` random scores q·k at width d_k, divided by √d_k when ``scaled``.

    Args:
        limit: bin range [-limit, limit]. Give the same limit at every d_k to compare
            histograms; None uses ±5 standard deviations of the score (5√d_k unscaled, 5
            scaled), so the shape fills the range. Draws beyond it are counted in ``outside``.

    >>> h = score_histogram(64, scaled=False, draws=1_000, bins=4, limit=40.0)
    >>> h.edges, sum(h.counts) + h.outside
    ((-40.0, -20.0, 0.0, 20.0, 40.0), 1000)
    """
    d_k = check_int("d_k", d_k, high=MAX_WIDTH)
    draws = check_int("draws", draws, low=2)
    bins = check_int("bins", bins, high=MAX_BINS)
    seed = check_seed(seed)
    limit = None if limit is None else check_positive("limit", limit)
    lim = SPAN * (1.0 if scaled else math.sqrt(d_k)) if limit is None else limit
    return _histograms((d_k,), draws, bins, seed, (lim, lim))[0][int(bool(scaled))]


@dataclass(frozen=True)
class SweepRow:
    """One width: saturated shares, score spreads and both histograms."""

    width: int
    unscaled_share: float
    scaled_share: float
    unscaled_std: float  # about √d_k
    scaled_std: float  # about 1
    gradient_term: float | None  # mean p_max(1 - p_max) over saturated unscaled trials
    unscaled_histogram: ScoreHistogram
    scaled_histogram: ScoreHistogram


@dataclass(frozen=True, repr=False)
class SweepResult(LabResult):
    """Per width the saturation lab and two score histograms on shared ranges.

    Unscaled histograms share ±``unscaled_limit`` (5√max(widths)) and scaled ones ±
    ``scaled_limit`` (5), so within each case the widths are directly comparable.
    """

    settings: dict  # widths, keys, trials, threshold, draws, bins, seed: ``r.trials`` reads one
    unscaled_limit: float
    scaled_limit: float
    rows: tuple[SweepRow, ...]
    lab = "sweep"

    def table(self) -> tuple[list[str], list[list]]:
        columns = column_keys(SPEC.columns)  # width, sqrt_width, then the rows' own attributes
        rows = [[r.width, math.sqrt(r.width)] + [getattr(r, c) for c in columns[2:]]
                for r in self.rows]  # fmt: skip
        return columns, rows

    def summary(self) -> list[str]:
        first, last = self.rows[0], self.rows[-1]
        return [
            f"Unscaled, the score spread grows like √d_k ({first.unscaled_std:.2f} at "
            f"d_k = {first.width}, {last.unscaled_std:.2f} at d_k = {last.width}) and the "
            f"saturated share goes from {first.unscaled_share:.1%} to {last.unscaled_share:.1%}.",
            f"Scaled, the spread stays near 1 ({first.scaled_std:.3f} to {last.scaled_std:.3f}) "
            f"and at most {max(r.scaled_share for r in self.rows):.1%} of trials saturate.",
        ]


def width_sweep(
    widths=(16, 32, 64, 128, 256),
    keys: int = 64,
    trials: int = 500,
    threshold: float = 0.99,
    draws: int = 20_000,
    bins: int = 40,
    seed: int = 0,
    *,
    client=None,
    progress: Progress | None = None,
) -> SweepResult:
    """Run the saturation lab and both score histograms at each width.

    The saturation numbers at a width are exactly ``saturation(d_k=width, ...)`` with the same
    seed, so the d_k = 128 row repeats the chapter's measurement. With a Dask ``client`` the
    histogram chunks are tasks and each width's saturation run is one task, all on its workers
    at once; the chunks add in chunk order, so the result is bitwise the same as without.

    >>> r = width_sweep(widths=(16, 64), trials=20, draws=500, bins=8)
    >>> [row.width for row in r.rows], len(r.rows[0].scaled_histogram.counts)
    ([16, 64], 8)
    """
    # All here, before any work is done.
    widths, draws, bins, seed, threshold, keys, trials = SPEC.check(
        widths=widths, draws=draws, bins=bins, seed=seed, threshold=threshold, keys=keys,
        trials=trials,
    )  # fmt: skip
    client = check_client(client)
    limits = (SPAN * math.sqrt(max(widths)), SPAN)
    runs = [partial(saturation, d_k=d_k, keys=keys, trials=trials, threshold=threshold,
                    seed=seed) for d_k in widths]  # fmt: skip
    futures = []
    if client is not None:  # every width at once, each on a worker, while the chunks are drawn
        futures = [client.submit(run, pure=False) for run in runs]
        runs = [future.result for future in futures]
    try:
        histograms = _histograms(widths, draws, bins, seed, limits, client=client)
        rows = []
        pairs = zip(widths, runs, histograms, strict=True)
        for i, (d_k, run, (unscaled, scaled)) in enumerate(pairs):
            sat = run()
            rows.append(
                SweepRow(
                    width=d_k,
                    unscaled_share=sat.unscaled_share,
                    scaled_share=sat.scaled_share,
                    unscaled_std=unscaled.std,
                    scaled_std=scaled.std,
                    gradient_term=sat.gradient_term,
                    unscaled_histogram=unscaled,
                    scaled_histogram=scaled,
                )
            )
            if progress is not None:
                progress(i + 1, len(widths))
    except BaseException:  # Ctrl-C, a failed task: the widths not yet done are cancelled
        if futures:
            client.cancel(futures)
        raise
    settings = {"widths": widths, "keys": keys, "trials": trials, "threshold": threshold,
                "draws": draws, "bins": bins, "seed": seed}  # fmt: skip
    return SweepResult(settings, unscaled_limit=limits[0], scaled_limit=limits[1], rows=tuple(rows))


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured on the project's 2-core machine (numpy 2): 2,000,000 draws at d_k = 64 take 3.2 s,
# 2.7 s of it the draws (21 ns per draw and coordinate, as in the variance lab) and the rest
# binning and summing both cases, about 130 ns per draw, width and case. The saturation part
# is the saturation lab's own estimate at each width. Near the web limits (8 widths of 256,
# 64 keys, 500 trials, 50,000 draws): 1.9 s of CPU against 1.8 s estimated, most of it the
# saturation runs; the draws carry the variance lab's 15% margin.
_S_PER_COORDINATE, _S_PER_BINNED = 24e-9, 130e-9
_THREADS = 2  # the calibration's threads: a cluster divides the work by its threads over this
_S_PER_TASK = 2e-3  # on a cluster, each chunk's scheduling and round trip


def _estimate(widths, keys, trials, draws, bins, client=None, **_) -> Estimate:
    coordinates = -(-max(widths) // BLOCK) * BLOCK
    binned = draws * (coordinates * _S_PER_COORDINATE + 2 * len(widths) * _S_PER_BINNED)
    runs = [SATURATION.cost(d_k=w, keys=keys, trials=trials) for w in widths]
    saturating = sum(e.seconds for e in runs)
    if client is not None:  # the chunks shared out; each width's saturation run is one task
        threads = cluster_threads(client)
        binned = (binned * _THREADS + chunk_count(draws) * _S_PER_TASK) / threads
        saturating = max(max(e.seconds for e in runs), saturating / threads)
    seconds = 0.01 + binned + saturating
    m, threads = min(draws, CHUNK_DRAWS), default_workers()
    chunks = threads * m * 8 * (3 * BLOCK + len(widths)) + 2 * threads * m * 8 * len(widths)
    return Estimate(seconds, chunks + 8 * m * len(widths) * 4 + max(e.bytes for e in runs))


_PLOT = RowPlot(
    "Saturated share of {trials} trials over {keys} keys, by width",
    "share of trials with p_max > threshold",
    (Line("unscaled", "unscaled_share"), Line("scaled by 1/√d_k", "scaled_share")),
    log_x=True,
)


SPEC = LabSpec(
    name="sweep",
    title="Width sweep",
    summary="Saturation and score histograms across d_k, scaled and unscaled "
    "(figure sqrt-dk-histogram).",
    heading="Width sweep, {trials} trials per width, seed {seed}",
    run=width_sweep,
    params=(
        Param("widths", "The d_k values, one row each.", low=1, high=MAX_WIDTH, web_high=256,
              flag="--width", budget=True),
        Param("keys", "Keys per trial (M).", low=2, high=MAX_KEYS, web_high=64),
        Param("trials", "Softmax trials per width.", low=1, web_high=500),
        Param("threshold", "p_max above this counts as saturated; in (0, 1).", low=0.0,
              high=1.0, open_bounds=True),
        Param("draws", "Scores per histogram.", low=2, web_high=40_000),
        Param("bins", "Histogram bins.", low=1, high=MAX_BINS, web_high=200),
        SEED,
        CLIENT,
    ),
    columns=(("width", "d_k"), ("sqrt_width", "√d_k"), ("unscaled_std", "σ unscaled"),
             ("scaled_std", "σ scaled"), ("unscaled_share", "sat. unscaled"),
             ("scaled_share", "sat. scaled"), ("gradient_term", "p_max(1-p_max)")),
    plot=_PLOT,
    estimate=_estimate,
)  # fmt: skip
