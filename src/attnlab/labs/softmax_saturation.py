"""Lab: without the 1/√d_k scaling, softmax saturates and its gradient all but vanishes (§6.3).

Each trial draws one query and ``keys`` keys with i.i.d. N(0, 1) entries and softmaxes the
keys' scores twice, unscaled and scaled, so the two conditions see the same draws. A trial
*saturates* when its largest weight p_max exceeds ``threshold``.

Memory stays bounded at any trial count: trials run in chunks of a few MiB (a trial too big for
one chunk draws its keys in row blocks, from the same stream), only running sums are kept, and
the per-trial p_max lists hold the first ``KEPT_TRIALS`` trials.

Shape legend: T trials, M keys (the chapter's letter), d_k the query/key width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from attnlab import softmax
from attnlab.labs._chunks import CLIENT, chained, check_client, combine, reporting
from attnlab.labs._common import (
    CHUNK_ELEMENTS,
    MAX_WIDTH,
    SATURATION,
    LabResult,
    Progress,
    column_keys,
    rng_at,
    rng_for,
)
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series

__all__ = ["KEPT_TRIALS", "SPEC", "SaturationResult", "saturation"]

MAX_KEYS = 4096
KEPT_TRIALS = 10_000  # per-trial p_max kept for histograms; the statistics use every trial


@dataclass(frozen=True)
class SaturationResult(LabResult):
    """How often softmax saturates, scaled and unscaled, and how small its Jacobian gets.

    ``gradient_term`` is the mean of p_max(1 - p_max), the Jacobian's diagonal entry for the
    winning key, over the saturated unscaled trials (None when no trial saturates). The
    ``jacobian_*`` fields are mean Frobenius norms of J = diag(p) - p pᵀ (§4.3).
    """

    d_k: int
    keys: int
    trials: int
    threshold: float
    seed: int
    unscaled_saturated: int  # count of unscaled trials with p_max > threshold
    scaled_saturated: int
    unscaled_share: float
    scaled_share: float
    unscaled_share_se: float  # binomial standard error sqrt(s(1-s)/T)
    scaled_share_se: float
    gradient_term: float | None  # over saturated unscaled trials
    gradient_term_se: float | None
    unscaled_gradient_term: float  # mean p_max(1 - p_max) over all unscaled trials
    scaled_gradient_term: float  # ... over all scaled trials
    jacobian_saturated: float | None  # mean ||J||_F over saturated unscaled trials
    jacobian_unscaled: float  # ... over all unscaled trials
    jacobian_scaled: float  # ... over all scaled trials
    unscaled_mean_p_max: float  # over every trial
    scaled_mean_p_max: float
    saturated_mean_p_max: float | None  # over the saturated unscaled trials
    unscaled_p_max: tuple[float, ...]  # the first KEPT_TRIALS trials, for histograms
    scaled_p_max: tuple[float, ...]
    lab = "saturation"

    def table(self) -> tuple[list[str], list[list]]:
        columns = column_keys(SPEC.columns)
        hot = self.unscaled_saturated
        rows = [
            ["unscaled"] + self._counts(self.unscaled_saturated, self.unscaled_share_se)
            + [self.unscaled_mean_p_max, self.unscaled_gradient_term, None,
               self.jacobian_unscaled],
            ["unscaled, saturated", hot, hot, 1.0 if hot else None, None]
            + [self.saturated_mean_p_max, self.gradient_term, self.gradient_term_se]
            + [self.jacobian_saturated],
            ["scaled"] + self._counts(self.scaled_saturated, self.scaled_share_se)
            + [self.scaled_mean_p_max, self.scaled_gradient_term, None, self.jacobian_scaled],
        ]  # fmt: skip
        return columns, rows

    def _counts(self, saturated: int, se: float) -> list:
        return [self.trials, saturated, saturated / self.trials, se]

    def summary(self) -> list[str]:
        lines = [
            f"Without scaling, {self.unscaled_share:.1%} (± {self.unscaled_share_se:.1%}) of "
            f"{self.trials} trials at d_k = {self.d_k}, {self.keys} keys, have a largest "
            f"weight over {self.threshold}; with scaling, {self.scaled_share:.1%}."
        ]
        if self.gradient_term is not None and self.jacobian_saturated is not None:
            lines.append(
                f"In the saturated trials p_max(1 - p_max) = {_small(self.gradient_term)}, and "
                f"the softmax Jacobian's norm is {_small(self.jacobian_saturated)} against "
                f"{self.jacobian_scaled:.4f} with scaling: {self._ratio()}."
            )
        return lines

    def _ratio(self) -> str:
        if self.jacobian_saturated == 0:  # every other weight underflowed to 0 (float64)
            return "too small for float64 to tell from 0"
        ratio = self.jacobian_scaled / self.jacobian_saturated
        return f"{ratio:.0f} times smaller" if ratio < 1e6 else f"{ratio:.2g} times smaller"


def _small(x: float) -> str:
    """4 decimals, or 3 significant digits for what 4 decimals would show as 0.0000."""
    return f"{x:.4f}" if x >= 5e-5 else f"{x:.3g}"


def _trial_stats(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p (T, M) weights -> p_max (T,), rest = 1 - p_max (T,), ||diag(p) - p pᵀ||_F (T,).

    ``rest`` is the sum of the other weights, never 1 - p_max: once p_max rounds to 1 the
    subtraction gives 0 while the other weights still hold the answer. With w the
    winner and o the others, J_ij = δ_ij p_i - p_i p_j gives, term by term non-negative,

        ||J||² = (p_w r)² + Σ_o p_o²(1 - p_o)² + 2 p_w² Σ_o p_o² + Σ_{o≠o'} p_o² p_o'²,

    where r = Σ_o p_o: O(M) per trial, and accurate when r is 1e-300 as well as when it is 0.9.
    """
    w = p.argmax(axis=-1)[:, None]  # (T, 1)
    p_max = np.take_along_axis(p, w, axis=-1)[:, 0]  # (T,)
    others = p.copy()  # (T, M)
    np.put_along_axis(others, w, 0.0, axis=-1)  # the winner's weight zeroed
    rest = others.sum(axis=-1)  # (T,)
    o2 = others * others  # (T, M)
    q2, q4 = o2.sum(axis=-1), (o2 * o2).sum(axis=-1)  # (T,) each
    cross = np.maximum(q2 * q2 - q4, 0.0)  # Σ_{o≠o'} p_o² p_o'², >= 0 up to rounding
    fro2 = (p_max * rest) ** 2 + (o2 * (1.0 - others) ** 2).sum(axis=-1)
    fro2 += 2.0 * p_max * p_max * q2 + cross
    return p_max, rest, np.sqrt(fro2)


def _scores(rng: np.random.Generator, count: int, keys: int, d_k: int) -> np.ndarray:
    """Raw scores (count, M) of ``count`` trials, each one (M + 1, d_k) block of the stream."""
    if count * (keys + 1) * d_k <= CHUNK_ELEMENTS or count > 1:
        x = rng.standard_normal((count, keys + 1, d_k))  # (T, M + 1, d_k)
        q, k = x[:, :1, :], x[:, 1:, :]  # (T, 1, d_k), (T, M, d_k)
        return (q @ np.swapaxes(k, -1, -2))[:, 0, :]  # (T, M)
    # One trial bigger than a chunk: the same draws in order, its keys a few rows at a time.
    q = rng.standard_normal(d_k)  # (d_k,)
    scores, rows = np.empty((1, keys)), max(1, CHUNK_ELEMENTS // d_k)
    for start in range(0, keys, rows):
        k = rng.standard_normal((min(rows, keys - start), d_k))  # (rows, d_k)
        scores[0, start : start + len(k)] = k @ q
    return scores


class _Totals:
    """The running totals of a run, merged chunk by chunk in chunk order (``_chunks.combine``).

    ``sums``: [saturated, p_max, p(1-p), ||J||] unscaled, the same scaled, and [p_max, ||J||]
    over the saturated unscaled trials. ``n, mean, m2``: count, mean and sum of squared
    deviations of p_max(1 - p_max) over the saturated unscaled trials (Chan et al. 1979).
    ``kept``: p_max of the first KEPT_TRIALS trials, unscaled and scaled.
    """

    def __init__(self):
        self.sums = np.zeros(10)
        self.n, self.mean, self.m2 = 0, 0.0, 0.0
        self.kept: tuple[list, list] = ([], [])

    def merge(self, part: tuple) -> _Totals:
        sums, (n, mean, m2), kept = part
        self.sums += sums
        self.kept[0].extend(kept[0])
        self.kept[1].extend(kept[1])
        if n:
            delta, total = mean - self.mean, self.n + n
            self.mean += delta * n / total
            self.m2 += m2 + delta * delta * self.n * n / total
            self.n = total
        return self

    def gradient(self) -> tuple[float | None, float | None]:
        """The mean of p_max(1 - p_max) over saturated trials and its standard error."""
        mean = self.mean if self.n else None
        se = math.sqrt(self.m2 / (self.n - 1) / self.n) if self.n >= 2 else None
        return mean, se


def _step(d_k: int, keys: int, trials: int, threshold: float, per: int, j: int, state: dict):
    """Chunk j of a run, drawn from the stream at ``state`` -> (its partial, the next state).

    One (M + 1, d_k) block per trial, in order, so the numbers do not depend on ``per``; the
    state goes in and out as plain data, so a Dask worker can run the chunk (``_chunks``).
    """
    rng = rng_at(state)
    start = j * per
    scores = _scores(rng, min(per, trials - start), keys, d_k)  # (T, M)
    un_max, un_rest, un_fro = _trial_stats(softmax(scores))
    sc_max, sc_rest, sc_fro = _trial_stats(softmax(scores * (1.0 / math.sqrt(d_k))))  # §6.3
    hot = un_max > threshold  # (T,) the saturated unscaled trials
    un_grad = un_max * un_rest  # the winner's Jacobian diagonal p(1 - p)
    sums = np.array([
        hot.sum(), un_max.sum(), un_grad.sum(), un_fro.sum(),
        (sc_max > threshold).sum(), sc_max.sum(), (sc_max * sc_rest).sum(), sc_fro.sum(),
        un_max[hot].sum(), un_fro[hot].sum(),
    ], dtype=float)  # fmt: skip
    x = un_grad[hot]
    moments = (0, 0.0, 0.0)
    if len(x):
        mean = float(np.mean(x))
        moments = (len(x), mean, float(np.sum((x - mean) ** 2)))
    room = max(0, KEPT_TRIALS - start)
    kept = (un_max[:room].tolist(), sc_max[:room].tolist())
    return (sums, moments, kept), rng.bit_generator.state


def saturation(
    d_k: int = 128,
    keys: int = 64,
    trials: int = 500,
    threshold: float = 0.99,
    seed: int = 0,
    *,
    client=None,
    progress: Progress | None = None,
) -> SaturationResult:
    """Share of softmax trials whose largest weight exceeds ``threshold``, unscaled vs scaled.

    Trials run in chunks drawn one after another from one stream; each chunk's sums are added
    in chunk order. With a Dask ``client`` the chunks are a chain of tasks on its workers (the
    stream is drawn in order, so they run one at a time) and the result is bitwise the same.

    Args:
        d_k: query/key width, 1 to 65536.   keys: M, 2 to 4096.   trials: at least 1.
        threshold: strictly between 0 and 1.   seed: a non-negative integer.
        client: a ``dask.distributed.Client`` to run the chunks on; None: this machine.
        progress: called as progress(trials done, trials).

    >>> r = saturation(trials=50)
    >>> r.scaled_share, 0 < r.unscaled_share < 1
    (0.0, True)
    """
    d_k, keys, trials, threshold, seed = SPEC.check(
        d_k=d_k, keys=keys, trials=trials, threshold=threshold, seed=seed
    )
    client = check_client(client)
    state = rng_for(seed, SATURATION, d_k, keys).bit_generator.state
    per = _per_chunk(d_k, keys)
    count = -(-trials // per)
    step = partial(_step, d_k, keys, trials, threshold, per)
    parts = chained(step, state, count, client=client)
    totals = combine(reporting(parts, per, trials, progress), _Totals.merge, _Totals())
    un, sc, hot_sums = totals.sums[:4], totals.sums[4:8], totals.sums[8:]
    kept = totals.kept
    n_hot, n_sc = int(un[0]), int(sc[0])
    un_share, sc_share = n_hot / trials, n_sc / trials
    gradient_term, gradient_term_se = totals.gradient()
    return SaturationResult(
        d_k=d_k,
        keys=keys,
        trials=trials,
        threshold=threshold,
        seed=seed,
        unscaled_saturated=n_hot,
        scaled_saturated=n_sc,
        unscaled_share=un_share,
        scaled_share=sc_share,
        unscaled_share_se=math.sqrt(un_share * (1 - un_share) / trials),
        scaled_share_se=math.sqrt(sc_share * (1 - sc_share) / trials),
        gradient_term=gradient_term,
        gradient_term_se=gradient_term_se,
        unscaled_gradient_term=float(un[2] / trials),
        scaled_gradient_term=float(sc[2] / trials),
        jacobian_saturated=float(hot_sums[1] / n_hot) if n_hot else None,
        jacobian_unscaled=float(un[3] / trials),
        jacobian_scaled=float(sc[3] / trials),
        unscaled_mean_p_max=float(un[1] / trials),
        scaled_mean_p_max=float(sc[1] / trials),
        saturated_mean_p_max=float(hot_sums[0] / n_hot) if n_hot else None,
        unscaled_p_max=tuple(kept[0]),
        scaled_p_max=tuple(kept[1]),
    )


def _per_chunk(d_k: int, keys: int) -> int:
    """Trials per chunk: a chunk holds about CHUNK_ELEMENTS normals."""
    return max(1, CHUNK_ELEMENTS // ((keys + 1) * d_k))


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured on the project's 2-core machine (numpy 2, one thread: one stream): 500 trials at
# d_k = 1024, 64 keys (33M normals) take 0.62 s and the default (4.2M) 0.09 s, about 20 ns per
# normal; 50,000 trials of 16 keys at d_k = 16 take 0.37 s, which puts the two softmaxes and
# their statistics near 60 ns per key and 1 µs per trial. Near the web limits (d_k = 1024,
# 128 keys, 600 trials): 1.55 s of CPU against 1.6 s estimated; 22 ns a normal keeps 10% over.
_S_PER_NORMAL, _S_PER_KEY, _S_PER_TRIAL = 22e-9, 60e-9, 1e-6
_S_PER_TASK = 3e-3  # on a cluster, each chunk's scheduling, state hand-over and round trip


def _estimate(d_k, keys, trials, client=None, **_) -> Estimate:
    seconds = 0.005 + trials * ((keys + 1) * d_k * _S_PER_NORMAL + keys * _S_PER_KEY + _S_PER_TRIAL)
    if client is not None:  # one stream: a chain of tasks, one at a time, whatever the threads
        seconds += -(-trials // _per_chunk(d_k, keys)) * _S_PER_TASK
    per = min(trials, max(1, CHUNK_ELEMENTS // ((keys + 1) * d_k)))
    draws = min(per * (keys + 1) * d_k, max(CHUNK_ELEMENTS, d_k))  # one chunk of normals
    # The chunk, ~12 (T, M) tables (scores, weights, their statistics), the kept p_max lists.
    return Estimate(seconds, 8 * draws + 12 * 8 * per * keys + 64 * min(trials, KEPT_TRIALS))


def _plot(r: SaturationResult) -> LabPlot:
    return LabPlot(
        title=f"Share of {r.trials} trials with p_max > {r.threshold} "
        f"(d_k = {r.d_k}, {r.keys} keys)",
        kind="bar",
        x=["unscaled", "scaled"],
        x_label="scores",
        y_label="share of trials",
        series=[
            Series("saturated share", [r.unscaled_share, r.scaled_share],
                   [r.unscaled_share_se, r.scaled_share_se])
        ],
    )  # fmt: skip


SPEC = LabSpec(
    name="saturation",
    title="Softmax saturation",
    summary="How often softmax saturates without the 1/√d_k scaling, and with it "
    "(§6.3, lab 2b).",
    heading="Saturation, d_k={d_k}, {keys} keys, seed {seed}",
    run=saturation,
    params=(
        Param("d_k", "Query/key width.", low=1, high=MAX_WIDTH, web_high=1024),
        Param("keys", "Keys per trial (M).", low=2, high=MAX_KEYS, web_high=128),
        Param("trials", "Softmax trials.", low=1, web_high=600, budget=True),
        Param("threshold", "p_max above this counts as saturated; in (0, 1).", low=0.0,
              high=1.0, open_bounds=True),
        SEED,
        CLIENT,
    ),
    columns=(("case", "case"), ("trials", "trials"), ("saturated", "saturated"),
             ("share", "share"), ("share_se", "± SE"), ("mean_p_max", "mean p_max"),
             ("gradient_term", "p_max(1-p_max)"), ("gradient_term_se", "± SE"),
             ("jacobian_fro", "‖J‖_F")),
    plot=_plot,
    estimate=_estimate,
)  # fmt: skip
