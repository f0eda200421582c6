"""Lab: without 1/√d_k the gradient that reaches the scores and the queries shrinks (§6.3).

§6.3 says saturation stalls learning: once softmax puts nearly all weight on one key, its
Jacobian is nearly zero, so little gradient flows back through it. This lab measures that flow
with the library's own backward pass (``attnlab.trace_attention(..., grad_output=...)``, the
chain rule of ``kernels/dense_backward.py``), nothing re-derived here.

Each trial draws one query q, ``keys`` keys and values, and an upstream gradient dO = ∂L/∂O,
all with i.i.d. N(0, 1) entries, and runs attention forward and backward twice on the same
draws: scaled (1/√d_k, the default) and unscaled (scale 1). Per trial it records

    p_max   the largest forward weight (saturated when over ``THRESHOLD``, 0.99 as in lab 2b);
    ‖dS‖    the norm of the gradient at the softmax's input (the masked, scaled scores), the
            query row's Frobenius norm: where saturation acts;
    ‖dQ‖    the norm of the query row's gradient, dS K · scale: what reaches the query weights.

A row of the table is one width: the share of saturated trials and the median ‖dS‖ and ‖dQ‖,
each unscaled and scaled, and their ratios (unscaled / scaled: below 1, the unscaled gradient
is that much smaller). The values have a fixed width ``d_v`` at every d_k, so that only the
scores change from row to row.

Randomness: width d_k draws from its own stream ``rng_for(seed, GRADIENT, d_k, keys, d_v)``,
trial after trial, so a row never depends on the other widths or on the chunk size. Memory:
chunks of about 4 MiB of draws, and three numbers per trial and case for the medians. Each
chunk starts from the stream's state where the one before stopped, so with a Dask ``client``
a width's chunks are a chain of tasks (``_chunks.chained``) and the numbers are bitwise the
same as here.

Shape legend: T trials in a chunk, M keys (the chapter's letter), d_k the query/key width,
d_v the value width; one query row per trial (N = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from attnlab import trace_attention
from attnlab.labs._chunks import CLIENT, chained, check_client
from attnlab.labs._common import (
    CHUNK_ELEMENTS,
    GRADIENT,
    LabResult,
    Progress,
    rng_at,
    rng_for,
    row_table,
)
from attnlab.labs._spec import SEED, Estimate, LabSpec, Line, Param, RowPlot

__all__ = ["SPEC", "THRESHOLD", "GradientResult", "GradientRow", "gradient"]

THRESHOLD = 0.99  # p_max above this: a saturated trial, as in the saturation lab
MAX_WIDTH = 4096
MAX_KEYS = 1024
MAX_TRIALS = 1_000_000  # the medians keep 6 numbers per trial: 48 MB at most


@dataclass(frozen=True)
class GradientRow:
    """One width: saturation and the median gradient sizes, unscaled against scaled."""

    width: int  # d_k
    unscaled_share: float  # share of unscaled trials with p_max > THRESHOLD
    scaled_share: float
    ds_unscaled: float  # median ‖dS‖ of the query row, unscaled scores
    ds_scaled: float  # ... scaled by 1/√d_k
    ds_ratio: float  # ds_unscaled / ds_scaled: below 1, the unscaled gradient is smaller
    dq_unscaled: float  # median ‖dQ‖ of the query row
    dq_scaled: float
    dq_ratio: float  # dq_unscaled / dq_scaled


@dataclass(frozen=True, repr=False)
class GradientResult(LabResult):
    """Per width, how much gradient reaches the scores and the queries, with and without √d_k."""

    settings: dict  # widths, keys, d_v, trials, threshold, seed: ``r.trials`` reads one
    rows: tuple[GradientRow, ...]
    lab = "gradient"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.rows, SPEC.columns)

    def summary(self) -> list[str]:
        first, last = self.rows[0], self.rows[-1]
        scaled = [r.ds_scaled for r in self.rows]
        return [
            f"Unscaled, the median gradient at the scores ‖dS‖ goes from {first.ds_unscaled:.3g}"
            f" at d_k = {first.width} to {last.ds_unscaled:.3g} at d_k = {last.width}, while "
            f"the share of trials with p_max > {self.threshold} rises from "
            f"{first.unscaled_share:.1%} to {last.unscaled_share:.1%}.",
            f"Scaled by 1/√d_k it stays between {min(scaled):.3g} and {max(scaled):.3g} at "
            f"every width; unscaled / scaled goes from {first.ds_ratio:.3g} to "
            f"{last.ds_ratio:.3g}: at d_k = {last.width} the unscaled scores get "
            f"{_times(last.ds_ratio)} the gradient.",
            f"The queries' gradient ‖dQ‖ = ‖dS K · scale‖ has no 1/√d_k to shrink it when "
            f"unscaled, so there it starts at {first.dq_ratio:.3g} times the scaled one "
            f"(d_k = {first.width}), yet ends at {_times(last.dq_ratio)} it (d_k = "
            f"{last.width}): saturation outweighs the missing factor ({self.trials:,} trials "
            f"of {self.keys} keys per width).",
        ]


def _times(ratio: float) -> str:
    return f"1/{1 / ratio:.3g} of" if 0 < ratio < 1 else f"{ratio:.3g} times"


def _trial_norms(q, k, v, g, scale: float | None) -> np.ndarray:
    """(3, T): p_max, ‖dS‖ and ‖dQ‖ of each trial's query row, from the library's backward.

    q (T, 1, d_k), k (T, M, d_k), v (T, M, d_v), g (T, 1, d_v); scale None means 1/√d_k.
    """
    t = trace_attention(q, k, v, scale=scale, grad_output=g)
    p_max = t.weights[:, 0].max(axis=-1)  # (T,)
    ds = np.linalg.norm(t.grad_scores[:, 0], axis=-1)  # (T,) over the M keys
    dq = np.linalg.norm(t.grad_q[:, 0], axis=-1)  # (T,) over d_k
    return np.stack([p_max, ds, dq])


def _draws(rng: np.random.Generator, count: int, keys: int, d_k: int, d_v: int):
    """q (T, 1, d_k), k (T, M, d_k), v (T, M, d_v), dO (T, 1, d_v) of ``count`` trials.

    One row of the stream per trial, so the numbers do not depend on how trials are chunked.
    """
    x = rng.standard_normal((count, (keys + 1) * (d_k + d_v)))  # (T, (M + 1)(d_k + d_v))
    qk = x[:, : (keys + 1) * d_k].reshape(count, keys + 1, d_k)  # (T, M + 1, d_k)
    vg = x[:, (keys + 1) * d_k :].reshape(count, keys + 1, d_v)  # (T, M + 1, d_v)
    return qk[:, :1], qk[:, 1:], vg[:, :keys], vg[:, keys:]


def _trials_per_chunk(keys: int, d_k: int, d_v: int) -> int:
    return max(1, CHUNK_ELEMENTS // ((keys + 1) * (d_k + d_v)))


def _chunk(d_k: int, keys: int, d_v: int, trials: int, per: int, j: int, state: dict):
    """Chunk j of a width, drawn from the stream at ``state`` -> ((2, 3, T) norms, next state).

    The norms are p_max, ‖dS‖ and ‖dQ‖ of each trial, unscaled then scaled. The state goes in
    and out as plain data and is never changed, so a Dask worker can run the chunk.
    """
    rng = rng_at(state)
    q, k, v, g = _draws(rng, min(per, trials - j * per), keys, d_k, d_v)
    unscaled = _trial_norms(q, k, v, g, 1.0)  # no scaling at all
    scaled = _trial_norms(q, k, v, g, None)  # §6.3: 1/√d_k
    return np.stack([unscaled, scaled]), rng.bit_generator.state


def _width(seed: int, d_k: int, keys: int, d_v: int, trials: int, step, client) -> GradientRow:
    state = rng_for(seed, GRADIENT, d_k, keys, d_v).bit_generator.state
    per = _trials_per_chunk(keys, d_k, d_v)
    chunks = chained(partial(_chunk, d_k, keys, d_v, trials, per), state, -(-trials // per),
                     client=client)  # fmt: skip
    norms = np.empty((2, 3, trials))  # unscaled, scaled; p_max, ‖dS‖, ‖dQ‖
    for j, part in enumerate(chunks):  # in chunk order, trial after trial
        norms[:, :, j * per : j * per + part.shape[-1]] = part
        step(part.shape[-1])
    unscaled, scaled = norms
    (ds_u, dq_u), (ds_s, dq_s) = np.median(unscaled[1:], axis=1), np.median(scaled[1:], axis=1)
    return GradientRow(
        width=d_k,
        unscaled_share=float(np.mean(unscaled[0] > THRESHOLD)),
        scaled_share=float(np.mean(scaled[0] > THRESHOLD)),
        ds_unscaled=float(ds_u),
        ds_scaled=float(ds_s),
        ds_ratio=float(ds_u / ds_s),
        dq_unscaled=float(dq_u),
        dq_scaled=float(dq_s),
        dq_ratio=float(dq_u / dq_s),
    )


def gradient(
    widths=(16, 32, 64, 128, 256, 512),
    keys: int = 64,
    trials: int = 500,
    seed: int = 0,
    *,
    d_v: int = 64,
    client=None,
    progress: Progress | None = None,
) -> GradientResult:
    """Median gradient reaching the scores and the queries, unscaled against scaled (§6.3).

    Each width's trials run in chunks drawn one after another from the width's stream. With a
    Dask ``client`` the chunks are a chain of tasks on its workers (one at a time, as the
    stream is drawn in order) and the result is bitwise the same.

    Args:
        widths: the d_k values, 1 to 4096, one row each.
        keys: M, keys per trial, 2 to 1024.
        trials: trials per width, 1 to 1,000,000 (the medians keep every trial's numbers).
        seed: a non-negative integer; the same seed gives the same numbers.
        d_v: the value width (and the upstream gradient's), the same at every d_k.
        client: a ``dask.distributed.Client`` to run the chunks on; None: this machine.
        progress: called as progress(trials done, trials x widths).

    >>> r = gradient(widths=(16, 256), trials=100)
    >>> r.rows[1].ds_unscaled < r.rows[0].ds_unscaled, r.rows[1].ds_ratio < 0.5
    (True, True)
    """
    widths, keys, trials, seed, d_v = SPEC.check(
        widths=widths, keys=keys, trials=trials, seed=seed, d_v=d_v
    )
    client = check_client(client)
    done, total = 0, trials * len(widths)

    def step(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    rows = tuple(_width(seed, d_k, keys, d_v, trials, step, client) for d_k in widths)
    settings = {"widths": widths, "keys": keys, "d_v": d_v, "trials": trials,
                "threshold": THRESHOLD, "seed": seed}  # fmt: skip
    return GradientResult(settings, rows=rows)


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Calibrated beside the saturation lab on the same machine (see the module's tests): per trial
# and width, the draws cost ~20 ns a normal, and the two forward-and-backward passes about
# 6 ns per key per coordinate (d_k + d_v, each pass) and 40 µs of fixed cost per chunk call.
# Near the web limits (8 widths of 256, 64 keys, 200 trials, d_v = 64) with one BLAS thread,
# on 2 December 2026: 1.9 s of CPU against 1.08 s by those figures, about 57 ns per normal in
# all; the passes are now counted at 23 ns each, 66 ns per normal, 15% over that run.
_S_PER_NORMAL = 20e-9
_S_PER_MADD = 23e-9
_S_PER_CALL = 40e-6
_S_PER_TASK = 3e-3  # on a cluster, each chunk's scheduling, state hand-over and round trip


def _estimate(widths, keys, trials, d_v=64, client=None, **_) -> Estimate:
    seconds, peak = 0.01, 0
    for d_k in widths:
        per = min(trials, _trials_per_chunk(keys, d_k, d_v))
        normals = (keys + 1) * (d_k + d_v)
        seconds += trials * normals * (_S_PER_NORMAL + 2 * _S_PER_MADD)
        seconds += 2 * _S_PER_CALL * -(-trials // per)
        if client is not None:  # one stream per width: a chain of tasks, one at a time
            seconds += -(-trials // per) * _S_PER_TASK
        # A chunk of draws and, per pass, the trace's tables of its size (k, v, dK, dV, ...).
        peak = max(peak, 8 * per * normals * 6)
    return Estimate(seconds, peak + 2 * 3 * 8 * trials)


_PLOT = RowPlot(
    "Median gradient per query row, {trials:,} trials of {keys} keys per width",
    "median norm",
    (
        Line("‖dS‖ unscaled", "ds_unscaled"),
        Line("‖dS‖ scaled by 1/√d_k", "ds_scaled"),
        Line("‖dQ‖ unscaled", "dq_unscaled"),
        Line("‖dQ‖ scaled by 1/√d_k", "dq_scaled"),
    ),
    log_x=True,
    log_y=True,
)


SPEC = LabSpec(
    name="gradient",
    title="Saturation stalls learning",
    summary="How much gradient reaches the scores and the queries with and without the "
    "1/√d_k scaling, beside the saturated share (§6.3).",
    heading="Gradient size, {keys} keys, {trials:,} trials per width, seed {seed}",
    run=gradient,
    params=(
        Param("widths", "The d_k values, one row each.", low=1, high=MAX_WIDTH, web_high=256,
              flag="--width", web_default=(16, 32, 64, 128, 256)),
        Param("keys", "Keys per trial (M).", low=2, high=MAX_KEYS, web_high=64),
        Param("trials", "Trials per width.", low=1, high=MAX_TRIALS, web_high=150,
              web_default=150, budget=True),
        SEED,
        Param("d_v", "Value width (and the upstream gradient's), the same at every d_k.",
              low=1, high=MAX_WIDTH, web_high=64),
        CLIENT,
    ),
    columns=(("width", "d_k"), ("unscaled_share", "sat. unscaled"),
             ("scaled_share", "sat. scaled"), ("ds_unscaled", "‖dS‖ unscaled"),
             ("ds_scaled", "‖dS‖ scaled"), ("ds_ratio", "dS unsc./sc."),
             ("dq_unscaled", "‖dQ‖ unscaled"), ("dq_scaled", "‖dQ‖ scaled"),
             ("dq_ratio", "dQ unsc./sc.")),
    plot=_PLOT,
    estimate=_estimate,
)  # fmt: skip
