"""Lab: the variance of a raw score grows like d_k, and dividing by √d_k brings it back to 1.

§6.3 proves Var(q·k) = d_k when q and k have i.i.d. N(0, 1) entries; this lab measures it.

Shape legend: d_k the query/key width (one row per width); a draw is one pair (q, k) of
d_k-vectors, z = q·k its raw score, z/√d_k its scaled score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from attnlab.labs._chunks import CLIENT, check_client, cluster_threads, combine, reporting
from attnlab.labs._common import MAX_WIDTH, VARIANCE, LabResult, Progress, row_table
from attnlab.labs._scores import (
    BLOCK,
    CHUNK_DRAWS,
    WORKERS,
    chunk_count,
    default_workers,
    score_partials,
)
from attnlab.labs._spec import SEED, Estimate, LabSpec, Line, Param, RowPlot

__all__ = ["SPEC", "VarianceResult", "VarianceRow", "variance_scaling"]


@dataclass(frozen=True)
class VarianceRow:
    """One width: the measured variances and their standard errors."""

    width: int  # d_k
    raw_var: float  # Var(q·k), about d_k
    var_ratio: float  # Var(q·k) / d_k, about 1
    scaled_var: float  # Var(q·k / √d_k), about 1
    var_ratio_se: float  # standard error of var_ratio
    scaled_var_se: float  # standard error of scaled_var


@dataclass(frozen=True, repr=False)
class VarianceResult(LabResult):
    """Var(q·k)/d_k and Var(q·k/√d_k) per width, each over ``draws`` fresh pairs."""

    settings: dict  # widths, draws, seed: ``r.draws`` reads one
    rows: tuple[VarianceRow, ...]
    lab = "variance"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.rows, SPEC.columns)

    def summary(self) -> list[str]:
        worst = max(self.rows, key=lambda r: abs(r.var_ratio - 1.0))
        return [
            f"Var(q·k) grows with d_k: {self.rows[0].raw_var:.4g} at d_k = {self.rows[0].width}"
            f" to {self.rows[-1].raw_var:.4g} at d_k = {self.rows[-1].width}.",
            f"Divided by d_k it stays at 1: the farthest row is d_k = {worst.width} at "
            f"{worst.var_ratio:.4f} ± {worst.var_ratio_se:.4f} (1 SE, {self.draws:,} draws).",
            "Scaled scores q·k/√d_k have variance 1 at every width, so softmax starts healthy.",
        ]


def _power_sums(z: np.ndarray) -> np.ndarray:
    """z (W, m) -> (W, 5): [n, Σz, Σz², Σz³, Σz⁴] per row, enough to merge chunks."""
    z2 = z * z
    sums = (z.sum(axis=1), z2.sum(axis=1), (z2 * z).sum(axis=1), (z2 * z2).sum(axis=1))
    return np.stack([np.full(len(z), z.shape[1]), *sums], axis=1)


def _partial(scales: np.ndarray, z: np.ndarray) -> np.ndarray:
    """One chunk's scores z (W, m) -> (2, W, 5): the power sums of z and of z/√d_k."""
    return np.stack([_power_sums(z), _power_sums(z * scales)])  # §6.3: the scaled scores too


def _variance_and_se(sums: np.ndarray) -> tuple[float, float]:
    """Unbiased sample variance s² and its standard error sqrt((m4 - s⁴(n-3)/(n-1)) / n).

    Raw power sums are safe here: the mean of z is 0 (§6.3), so nothing cancels badly.
    """
    n, s1, s2, s3, s4 = sums
    mean = s1 / n
    m2 = s2 / n - mean**2  # central moments about the sample mean
    m4 = s4 / n - 4 * mean * s3 / n + 6 * mean**2 * s2 / n - 3 * mean**4
    var = m2 * n / (n - 1)
    se = math.sqrt(max(m4 - var**2 * (n - 3) / (n - 1), 0.0) / n)
    return float(var), float(se)


def variance_scaling(
    widths=(32, 64, 128, 256),
    draws: int = 200_000,
    seed: int = 0,
    *,
    workers: int | None = None,
    client=None,
    progress: Progress | None = None,
) -> VarianceResult:
    """Measure Var(q·k)/d_k and Var(q·k/√d_k) over ``draws`` random pairs per width (§6.3).

    The widths share their draws (see ``_scores``): the d_k = 32 score of a pair is the sum
    of its first 32 products and the d_k = 256 score continues it, so each row is an exact
    experiment on ``draws`` pairs and all rows together cost what the widest one does. Rows
    are therefore correlated with one another, never with other widths asked for. Chunks of a
    few MiB are spread over ``workers`` threads (default: the usable cores), so memory stays
    bounded for any ``draws`` and the numbers never depend on ``workers``. With a Dask
    ``client`` the chunks are tasks on its workers instead; each chunk's power sums are added
    in chunk order either way, so the result is bitwise the same.

    Args:
        widths: the d_k values, each from 1 to 65536.
        draws: pairs per width, at least 2 (a variance needs two).
        seed: a non-negative integer; the same seed gives the same numbers.
        workers: threads for the draws (not with ``client``).
        client: a ``dask.distributed.Client`` to run the chunks on; None: this machine.
        progress: called as progress(draws done, draws in all).

    >>> row = variance_scaling(widths=(16,), draws=5_000).rows[0]
    >>> row.width, abs(row.var_ratio - 1) < 5 * row.var_ratio_se
    (16, True)
    """
    widths, draws, seed, workers = SPEC.check(
        widths=widths, draws=draws, seed=seed, workers=workers
    )
    client = check_client(client, workers)
    scales = np.array([1.0 / math.sqrt(d_k) for d_k in widths])[:, None]  # §6.3, (W, 1)
    chunks = score_partials(seed, VARIANCE, widths, draws, partial(_partial, scales),
                            workers=workers, client=client)  # fmt: skip
    chunks = reporting(chunks, CHUNK_DRAWS, draws, progress)
    sums = combine(chunks, np.add, np.zeros((2, len(widths), 5)))
    raw, scaled = sums  # (W, 5) each
    rows = []
    for d_k, raw_sums, scaled_sums in zip(widths, raw, scaled, strict=True):
        raw_var, raw_se = _variance_and_se(raw_sums)
        scaled_var, scaled_se = _variance_and_se(scaled_sums)
        rows.append(
            VarianceRow(
                width=d_k,
                raw_var=raw_var,
                var_ratio=raw_var / d_k,
                scaled_var=scaled_var,
                var_ratio_se=raw_se / d_k,
                scaled_var_se=scaled_se,
            )
        )
    settings = {"widths": widths, "draws": draws, "seed": seed}
    return VarianceResult(settings, rows=tuple(rows))


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured on the project's 2-core machine (numpy 2, 2 worker threads): the default run
# (200,000 draws, widths up to 256) takes 1.1 s, and 2,000,000 draws at d_k = 8 (one 16-wide
# block) 0.73 s: about 21 ns per draw per coordinate of the widest block-rounded width (two
# normals and a product, over both threads). The per-width sums add about 5 ns per draw.
# Checked near the web limits on 2 December 2026 (8 widths of 256, 300,000 draws): 3.2 s of
# CPU over the two threads, 1.6 s each, as the model says; the constants carry 15% on top, so
# that a thread slowed by the other never takes the estimate past the web budget.
_S_PER_COORDINATE = 24e-9
_S_PER_ROW = 6e-9
_THREADS = 2  # the calibration's threads: a cluster divides the work by its threads over this
_S_PER_TASK = 2e-3  # on a cluster, each chunk's scheduling and round trip (measured ~1 ms)


def _estimate(widths, draws, workers=None, client=None, **_) -> Estimate:
    coordinates = -(-max(widths) // BLOCK) * BLOCK
    work = draws * (coordinates * _S_PER_COORDINATE + len(widths) * _S_PER_ROW)
    if client is not None:
        threads = cluster_threads(client)
        work = (work * _THREADS + chunk_count(draws) * _S_PER_TASK) / threads
    m, threads = min(draws, CHUNK_DRAWS), workers or default_workers()
    # Per thread a chunk's draws, products and scores; 2 chunks per thread queued; the sums.
    chunk = m * 8 * (3 * BLOCK + len(widths))
    return Estimate(0.01 + work, threads * chunk + 2 * threads * m * 8 * len(widths) + 4 * chunk)


# Var(q·k / √d_k) = Var(q·k) / d_k for any data (a constant factor c scales a variance by c²),
# so the two columns agree to rounding: one line, named for both, not one line hidden under the
# other.
_PLOT = RowPlot(
    "Var(q·k)/d_k and Var(q·k/√d_k) over {draws:,} draws per width",
    "variance ratio",
    (
        Line("Var(q·k) / d_k = Var(q·k / √d_k) (equal by construction)", "var_ratio",
             "var_ratio_se"),
        Line("the proof: 1", 1.0, dash=True),
    ),
    log_x=True,
)  # fmt: skip


SPEC = LabSpec(
    name="variance",
    title="Variance of a score, by width",
    summary="Var(q·k) grows like d_k; divided by d_k it stays at 1 (§6.3, lab 2b).",
    heading="Score variance, {draws:,} draws per width, seed {seed}",
    run=variance_scaling,
    params=(
        Param("widths", "The d_k values, one row each.", low=1, high=MAX_WIDTH, web_high=256,
              flag="--width"),
        Param("draws", "Pairs (q, k) per width.", low=2, web_high=250_000, budget=True),
        SEED,
        WORKERS,
        CLIENT,
    ),
    columns=(("width", "d_k"), ("raw_var", "Var(q·k)"), ("var_ratio", "Var(q·k)/d_k"),
             ("var_ratio_se", "± SE"), ("scaled_var", "Var(q·k/√d_k)"),
             ("scaled_var_se", "± SE")),
    plot=_PLOT,
    estimate=_estimate,
)  # fmt: skip
