"""Lab: §6.3's argument for √d_k, one measured step at a time, each beside what it predicts.

With q and k of i.i.d. N(0, 1) entries, the argument goes: an entry has mean 0 and variance 1;
a product of two independent entries has mean 0 and variance 1; the score z = q·k, a sum of
d_k such products, has mean 0 and variance d_k; so z/√d_k has variance 1. This lab draws
``draws`` pairs (q, k) and measures each of those seven numbers with its standard error.

Shape legend: n = ``draws`` pairs, d_k the width, m pairs in a chunk. The two steps about an
entry (q_i) and the two about a product (q_i k_i) pool every coordinate of every pair: all
n·d_k of them are independent and identically distributed, so they are n·d_k samples (the
result's ``entries``). The score steps have n samples, one per pair.

Standard errors (each estimated from the sample itself; the tests check them against the
closed forms in brackets, for n samples of X with variance σ² and 4th central moment μ₄):

    mean      SE = σ/√n                               [q_i: 1/√n; q_i k_i: 1/√n; z: √(d_k/n)]
    variance  SE = √((μ₄ − σ⁴(n − 3)/(n − 1)) / n), the exact spread of the unbiased sample
              variance. Normal q_i: μ₄ = 3, so √(2/n). The product: μ₄ = E[q⁴]E[k⁴] = 3·3 = 9,
              so √(8/n). The score, a sum of d_k independent products x_j of variance 1 and
              4th moment 9: E[z⁴] = d_k·9 + 3·d_k(d_k − 1)·1 = 3d_k² + 6d_k (the cross terms
              with an odd power of some x_j vanish), so √((2d_k² + 6d_k)/n), and divided
              by d_k for the scaled score, √((2 + 6/d_k)/n).

Randomness and memory: chunk j holds ``per`` pairs drawn from ``rng_for(seed, PROOF, d_k, j)``
(``per`` fixed by d_k, about 4 MiB of normals); only five power sums per step are kept, so
memory does not grow with ``draws``, and chunks run on ``workers`` threads, or as tasks on a
Dask cluster (``client``), without changing a number: their sums are added in chunk order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from attnlab.labs._chunks import CLIENT, check_client, cluster_threads, combine, in_order, reporting
from attnlab.labs._common import (
    CHUNK_ELEMENTS,
    MAX_WIDTH,
    PROOF,
    LabResult,
    Progress,
    rng_for,
    row_table,
)
from attnlab.labs._scores import WORKERS, default_workers
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series

__all__ = ["SPEC", "STEPS", "ProofResult", "ProofRow", "proof"]


@dataclass(frozen=True)
class ProofRow:
    """One step of the argument: what it claims, what it predicts, what was measured."""

    step: str  # the quantity, e.g. "Var(q·k)"
    claim: str  # why the prediction holds, in a few words
    predicted: float
    measured: float
    stderr: float  # standard error of ``measured``


@dataclass(frozen=True, repr=False)
class ProofResult(LabResult):
    """The seven steps of §6.3 measured over ``draws`` pairs of d_k-vectors."""

    # d_k; draws, the pairs (q, k): the samples of the three score steps; entries = draws · d_k,
    # the samples of the four entry and product steps; seed. ``r.draws`` reads one.
    settings: dict
    rows: tuple[ProofRow, ...]
    lab = "proof"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.rows, SPEC.columns)

    def deviations(self) -> list[float]:
        """|measured − predicted| in standard errors, per step."""
        return [abs(r.measured - r.predicted) / r.stderr for r in self.rows]

    def row(self, step: str) -> ProofRow:
        """The row of the step named ``step`` (one of ``STEPS``, e.g. "Var(q·k)")."""
        return self.rows[STEPS.index(step)]

    def summary(self) -> list[str]:
        far = max(range(len(self.rows)), key=lambda i: self.deviations()[i])
        score, scaled = self.row("Var(q·k)"), self.row("Var(q·k/√d_k)")
        return [
            f"Every step lands near its prediction: the farthest, {self.rows[far].step}, is "
            f"{self.deviations()[far]:.1f} standard errors away ({self.draws:,} pairs at "
            f"d_k = {self.d_k}).",
            f"Var(q·k) = {score.measured:.4g} ± {score.stderr:.2g} against d_k = {self.d_k}: "
            "the variances of the d_k independent products add up.",
            f"Divided by √d_k the score's variance is {scaled.measured:.4f} ± "
            f"{scaled.stderr:.4f}, the 1 that keeps softmax out of saturation.",
        ]


# The steps in the chapter's order: (step, claim, which samples, mean or variance, prediction).
# E(...) rather than E[...]: a terminal table reads square brackets as markup.
_STEPS = (
    ("E(q_i)", "each entry is drawn with mean 0", "entry", "mean", 0),
    ("Var(q_i)", "... and with variance 1", "entry", "var", 1),
    ("E(q_i k_i)", "independent factors: E(q_i)·E(k_i) = 0·0", "product", "mean", 0),
    ("Var(q_i k_i)", "E(q_i²)·E(k_i²) − 0² = 1·1", "product", "var", 1),
    ("E(q·k)", "a sum of d_k terms of mean 0", "score", "mean", 0),
    ("Var(q·k)", "variances of independent terms add: d_k · 1", "score", "var", "d_k"),
    ("Var(q·k/√d_k)", "dividing by √d_k divides the variance by d_k", "scaled", "var", 1),
)
_SAMPLES = ("entry", "product", "score", "scaled")
#: The steps' names, in the chapter's order: how the page and the explainers refer to a step.
STEPS = tuple(step[0] for step in _STEPS)


def _power_sums(x: np.ndarray) -> np.ndarray:
    """[n, Σx, Σx², Σx³, Σx⁴] over every entry of x: enough to merge chunks exactly."""
    x2 = x * x
    return np.array([x.size, x.sum(), x2.sum(), (x2 * x).sum(), (x2 * x2).sum()])


def _chunk(seed: int, d_k: int, per: int, draws: int, j: int) -> np.ndarray:
    """Power sums (4, 5) of chunk j: entries q_i, products q_i k_i, scores, scaled scores."""
    m = min(per, draws - j * per)
    q, k = rng_for(seed, PROOF, d_k, j).standard_normal((2, m, d_k))  # each (m, d_k)
    products = q * k  # (m, d_k)
    z = products.sum(axis=1)  # (m,) the raw scores q·k
    scaled = z * (1.0 / math.sqrt(d_k))  # (m,) §6.3's scaled scores, measured themselves
    return np.stack([_power_sums(q), _power_sums(products), _power_sums(z), _power_sums(scaled)])


def _mean_and_se(sums: np.ndarray) -> tuple[float, float]:
    n, s1, s2 = sums[:3]
    mean = s1 / n
    var = (s2 / n - mean**2) * n / (n - 1)
    return float(mean), math.sqrt(max(var, 0.0) / n)


def _variance_and_se(sums: np.ndarray) -> tuple[float, float]:
    """Unbiased sample variance s² and its standard error √((m₄ − s⁴(n − 3)/(n − 1)) / n).

    Raw power sums are accurate here because every quantity has mean 0 (§6.3): nothing large
    cancels when the central moments are formed from them.
    """
    n, s1, s2, s3, s4 = sums
    mean = s1 / n
    m2 = s2 / n - mean**2  # central moments about the sample mean
    m4 = s4 / n - 4 * mean * s3 / n + 6 * mean**2 * s2 / n - 3 * mean**4
    var = m2 * n / (n - 1)
    return float(var), math.sqrt(max(m4 - var**2 * (n - 3) / (n - 1), 0.0) / n)


def _pairs_per_chunk(d_k: int) -> int:
    return max(1, CHUNK_ELEMENTS // (2 * d_k))  # q and k of a chunk: about 4 MiB


def proof(
    d_k: int = 64,
    draws: int = 200_000,
    seed: int = 0,
    *,
    workers: int | None = None,
    client=None,
    progress: Progress | None = None,
) -> ProofResult:
    """Measure each step of §6.3's argument over ``draws`` pairs (q, k) of i.i.d. N(0, 1) entries.

    Args:
        d_k: the query/key width, 1 to 65536.
        draws: pairs (q, k), at least 2 (a variance needs two).
        seed: a non-negative integer; the same seed gives the same numbers.
        workers: threads for the chunks (default: the usable cores, at most 8); the numbers
            never depend on it. Not with ``client``.
        client: a ``dask.distributed.Client`` to run the chunks on, bitwise the same numbers;
            None: this machine.
        progress: called as progress(pairs done, draws).

    Returns:
        a ``ProofResult`` with one row per step: step, claim, predicted, measured, stderr.

    >>> r = proof(d_k=16, draws=4_000)
    >>> [row.step for row in r.rows][-2:], max(r.deviations()) < 5
    (['Var(q·k)', 'Var(q·k/√d_k)'], True)
    """
    d_k, draws, seed, workers = SPEC.check(d_k=d_k, draws=draws, seed=seed, workers=workers)
    client = check_client(client, workers)
    per = _pairs_per_chunk(d_k)
    chunks = in_order(partial(_chunk, seed, d_k, per, draws), -(-draws // per),
                      workers=workers or default_workers(), client=client)  # fmt: skip
    sums = combine(reporting(chunks, per, draws, progress), np.add, np.zeros((len(_SAMPLES), 5)))
    rows = []
    for step, claim, samples, kind, predicted in _STEPS:
        measure = _mean_and_se if kind == "mean" else _variance_and_se
        measured, se = measure(sums[_SAMPLES.index(samples)])
        predicted = float(d_k if predicted == "d_k" else predicted)
        rows.append(ProofRow(step, claim, predicted, measured, se))
    settings = {"d_k": d_k, "draws": draws, "entries": draws * d_k, "seed": seed}
    return ProofResult(settings, rows=tuple(rows))


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured against the variance lab on the same (2-core, busy) machine, run for run: at d_k = 64
# this lab takes 1.15-1.3 times as long (its two normals and product per coordinate, plus the
# power sums of the entries and of the products), and at d_k = 4 0.3-0.6 times (the variance
# lab rounds widths up to blocks of 16). Against the variance lab's 21 ns per coordinate that
# is about 26 ns per coordinate and 40 ns per pair. Near the web limits (d_k = 256, 200,000
# pairs) on 2 December 2026: 2.5 s of CPU over the two threads, 1.27 s each, against 1.35 s
# estimated; at d_k = 512 the threads took 10% more than the estimate, so the constants carry
# 15% on top.
_S_PER_ENTRY = 30e-9
_S_PER_DRAW = 46e-9
_THREADS = 2  # the calibration's threads: a cluster divides the work by its threads over this
_S_PER_TASK = 2e-3  # on a cluster, each chunk's scheduling and round trip, as for variance


def _estimate(d_k, draws, workers=None, client=None, **_) -> Estimate:
    work = draws * (d_k * _S_PER_ENTRY + _S_PER_DRAW)
    if client is not None:  # keyed chunks: shared out over the cluster's threads
        tasks = -(-draws // _pairs_per_chunk(d_k))
        work = (work * _THREADS + tasks * _S_PER_TASK) / cluster_threads(client)
    seconds = 0.01 + work
    m, threads = min(draws, _pairs_per_chunk(d_k)), workers or default_workers()
    # Per running chunk: q and k, the products and ~3 temporaries of the power sums; 2 chunks'
    # sums per thread queued (tiny).
    return Estimate(seconds, threads * 8 * m * (6 * d_k + 4) + 4096)


def _plot(r: ProofResult) -> LabPlot:
    """How far each step landed from its prediction, in its own standard errors.

    One scale for all seven steps, whose predictions range from 0 to d_k: a step that holds
    gives a bar of size about 1 (within ±2 nineteen times in twenty), whatever it measures.
    """
    return LabPlot(
        title=f"§6.3 step by step: {r.draws:,} pairs at d_k = {r.d_k}",
        kind="bar",
        x=[row.step for row in r.rows],
        x_label="step",
        y_label="(measured − predicted) / SE",
        series=[Series("measured − predicted, in SEs",
                       [(row.measured - row.predicted) / row.stderr for row in r.rows])],
    )  # fmt: skip


SPEC = LabSpec(
    name="proof",
    title="The √d_k proof, measured",
    summary="Each step of §6.3's argument for √d_k measured beside its prediction, with a "
    "standard error.",
    heading="The √d_k proof, d_k={d_k}, {draws:,} pairs, seed {seed}",
    run=proof,
    params=(
        Param("d_k", "Query/key width.", low=1, high=MAX_WIDTH, web_high=256),
        Param("draws", "Pairs (q, k).", low=2, web_high=200_000, budget=True),
        SEED,
        WORKERS,
        CLIENT,
    ),
    columns=(("step", "step"), ("claim", "why"), ("predicted", "predicted"),
             ("measured", "measured"), ("stderr", "± SE")),
    plot=_plot,
    estimate=_estimate,
)  # fmt: skip
