"""Lab: §6.3's "saturation stalls learning", measured by training with and without 1/√d_k.

The same model (2 attention-only layers of one head of width d_k = d_model) learns the same
induction task (``attnlab.labs.induction``) from the same initial weights on the same batches,
twice: with the scores scaled by 1/√d_k, and unscaled (``scale=1.0``). The initialisation gives
queries and keys entries of variance about 1 (``attnlab.transformer``'s fan-in scaling), so an
unscaled score q·k has variance about d_k: at d_k = 128 a standard deviation of about 11, and the
softmax puts nearly all its weight on one key from the first step. Its Jacobian is then nearly
zero and little gradient reaches the scores, as the gradient lab shows for random draws.

Per width and scaling, over ``runs`` runs (each its own initial weights and batches):

    steps_to_target   the first step at which the training loss, averaged over the last 10
                      steps, is at most ``target_loss``; null when a run never gets there (the
                      median over runs, null when most runs never get there)
    saturated_rows    share of softmax rows (every layer, query rows after the first, which
                      has one key) whose largest weight passes 0.99, over the recorded steps
    median_ds         median ‖dS‖ of a query row's gradient at the scores, over the recorded
                      steps and the rows some counted loss depends on: ``attnlab.trace_attention(..., grad_output=...)`` on each layer's
                      own call, nothing re-derived here
    position_losses   the trained model's loss per offset of each copy of the repeat, on 200
                      fresh sequences, mean over runs (``_repeats``)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab import trace_attention
from attnlab.labs._common import Claim, LabResult, Progress, rng_for, row_table
from attnlab.labs._repeats import position_losses
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series
from attnlab.labs._training import FRESH, SCALING, TRAIN, checked, fit, one_thread, smoothed
from attnlab.labs.induction import induction_batch, induction_sequences
from attnlab.transformer import TinyTransformer

__all__ = ["SPEC", "ScalingResult", "ScalingRow", "train_scaling"]

THRESHOLD = 0.99  # p_max above this: a saturated row, as in the saturation lab
RECORDS = 20  # steps per run at which saturation and ‖dS‖ are recorded
MAX_WIDTH, MAX_STEPS, MAX_RUNS = 1024, 20_000, 16
_LAYERS = 2  # attention-only layers of one head: the fewest that can form an induction head
FRESH_COUNT = 200  # fresh sequences each trained model's loss per position is measured on


@dataclass(frozen=True)
class ScalingRow:
    """One width and one scaling: the runs summarised."""

    width: int  # d_k
    scaling: str  # "scaled" or "unscaled"
    steps_to_target: int | None  # median over runs; None when most never reach the target
    run_steps: tuple[int | None, ...]  # each run's
    final_loss: float  # the last step's smoothed loss, mean over runs
    saturated_rows: float
    median_ds: float
    losses: tuple[float, ...]  # smoothed training loss per step, mean over runs
    # loss per offset of each copy on FRESH_COUNT fresh sequences, mean over runs (_repeats)
    position_losses: dict


@dataclass(frozen=True, repr=False)
class ScalingResult(LabResult):
    # widths, steps, batch, runs, seed, target_loss, lr, vocab_size, context: ``r.steps`` reads one
    settings: dict
    rows: tuple[ScalingRow, ...]
    scaled: dict  # the largest width's scaled row, as a dict (the headline)
    unscaled: dict
    lab = "train-scaling"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.rows, SPEC.columns)

    def claim(self) -> Claim:
        s, u = self.scaled["steps_to_target"], self.unscaled["steps_to_target"]
        held = s is not None and (u is None or u > s)
        if s is None:
            why = (
                f"neither run reached loss {self.target_loss} within {self.steps:,} steps, so "
                "the two cannot be told apart; the scaled run needs about 150 to 270 steps "
                f"at the default d_k = 128 (default steps: {SPEC.param('steps').default})"
            )
        else:
            after = "never" if u is None else f"after {u} steps"
            why = f"scaled: the target after {s} steps; unscaled: {after}"
        return Claim(
            "Dividing the scores by √d_k lets the model reach the target loss sooner "
            "than leaving them unscaled, whose saturated softmax stalls.",
            held,
            why,
        )

    def summary(self) -> list[str]:
        s, u = self.scaled, self.unscaled

        def reached(row: dict) -> str:
            n = row["steps_to_target"]
            return f"in {n} steps" if n is not None else f"not within {self.steps} steps"

        return [
            f"At d_k = {s['width']}, scaled by 1/√d_k, the loss reached {self.target_loss} "
            f"{reached(s)} (median of {self.runs} runs); unscaled, {reached(u)} "
            f"(final loss {s['final_loss']:.3g} against {u['final_loss']:.3g}).",
            f"Unscaled, {u['saturated_rows']:.1%} of softmax rows had p_max > {THRESHOLD} "
            f"during training (scaled: {s['saturated_rows']:.1%}), and the median gradient at "
            f"the scores ‖dS‖ was {u['median_ds']:.3g} against {s['median_ds']:.3g}.",
        ]


def _saturation(calls) -> tuple[float, np.ndarray]:
    """(saturated share of rows, ‖dS‖ per row) over one step's layers, row 0 left out."""
    shares, norms = [], []
    for c in calls:
        t = trace_attention(c.q, c.k, c.v, c.mask, scale=c.scale, grad_output=c.grad_output)
        p_max = t.weights[..., 1:, :].max(axis=-1)  # (B, h, N - 1)
        shares.append(np.mean(p_max > THRESHOLD))
        reached = np.linalg.norm(c.grad_output[..., 1:, :], axis=-1) > 0  # (B, h, N - 1)
        # Rows no counted loss depends on get dS = 0 whatever the scaling: left out.
        norms.append(np.linalg.norm(t.grad_scores[..., 1:, :], axis=-1)[reached])  # (rows,)
    return float(np.mean(shares)), np.concatenate(norms)


def _run(width, scaled, run, args, progress, done, total):
    """One training run -> (smoothed losses, saturated share, ‖dS‖ of the recorded rows)."""
    rng = rng_for(args["seed"], SCALING, run)
    model_seed = int(rng.integers(2**62))  # the same weights scaled and unscaled
    model = TinyTransformer(vocab_size=args["vocab_size"], context=args["context"], layers=_LAYERS,
                            heads=1, d_model=width, scaled=scaled, seed=model_seed)  # fmt: skip
    every = max(1, args["steps"] // RECORDS)
    shares, norms = [], []

    def each(step, m, tokens, targets):
        if step % every:
            return m.loss_and_grads(tokens, targets)
        loss, grads, calls = m.attention_calls(tokens, targets)
        share, ds = _saturation(calls)
        shares.append(share)
        norms.append(ds)
        return loss, grads

    def draw(r):
        tokens, lengths = induction_sequences(r, args["batch"], args["context"],
                                              args["vocab_size"])  # fmt: skip
        return tokens, induction_batch(tokens, lengths)

    curve = fit(model, draw, rng_for(args["seed"], SCALING, TRAIN, run), steps=args["steps"],
                lr=args["lr"], progress=progress, done=done, total=total, each=each)  # fmt: skip
    fresh, lengths = induction_sequences(rng_for(args["seed"], SCALING, FRESH), FRESH_COUNT,
                                         args["context"], args["vocab_size"])  # fmt: skip
    with one_thread():
        by_position = position_losses(model, fresh, lengths)
    return smoothed(curve.losses), float(np.mean(shares)), np.concatenate(norms), by_position


def _row(width: int, scaled: bool, args: dict, step) -> ScalingRow:
    curves, shares, norms, reached, places = [], [], [], [], []
    for run in range(args["runs"]):
        losses, share, ds, by_position = _run(width, scaled, run, args, *step())
        places.append(by_position)
        below = np.nonzero(losses <= args["target_loss"])[0]
        reached.append(int(below[0]) + 1 if below.size else None)
        curves.append(losses)
        shares.append(share)
        norms.append(ds)
    ordered = sorted(reached, key=lambda n: np.inf if n is None else n)
    middle = ordered[(len(ordered) - 1) // 2]  # the lower median: None if most never reach
    mean_curve = np.mean(curves, axis=0)
    return ScalingRow(width=width, scaling="scaled" if scaled else "unscaled",
                      steps_to_target=middle, run_steps=tuple(reached),
                      final_loss=float(mean_curve[-1]), saturated_rows=float(np.mean(shares)),
                      median_ds=float(np.median(np.concatenate(norms))),
                      losses=tuple(mean_curve.tolist()),
                      position_losses=_mean_places(places))  # fmt: skip


def _mean_places(places: list[dict]) -> dict:
    """The runs' loss per offset averaged (every run is measured on the same sequences, so an
    offset no sequence reaches is None in all of them)."""
    out = {}
    for key, first in places[0].items():
        if isinstance(first, list):
            out[key] = [None if first[i] is None else
                        round(float(np.mean([p[key][i] for p in places])), 6)
                        for i in range(len(first))]  # fmt: skip
        else:
            out[key] = float(np.mean([p[key] for p in places]))
    return out


def train_scaling(
    widths=(128,),
    steps: int = 300,
    batch: int = 16,
    runs: int = 1,
    seed: int = 0,
    *,
    target_loss: float = 1.0,
    lr: float = 3e-3,
    vocab_size: int = 64,
    context: int = 32,
    progress: Progress | None = None,
) -> ScalingResult:
    """Train the same model on the same data with and without 1/√d_k, per width (§6.3).

    Args:
        widths: the d_k values (one head of width d_k per layer), 1 to 1024.
        steps, batch: Adam steps per run, sequences per step.
        runs: runs per width and scaling, each with its own weights and batches.
        seed: same seed, same numbers. target_loss: the loss (nats) a run must reach.
        lr: Adam's learning rate. vocab_size, context: the induction task's V and N.
        progress: called as progress(steps done, steps of every run).
    """
    names = ("widths", "steps", "batch", "runs", "seed", "target_loss", "lr", "vocab_size",
             "context")  # fmt: skip
    given = (widths, steps, batch, runs, seed, target_loss, lr, vocab_size, context)
    args = dict(zip(names, checked(SPEC, **dict(zip(names, given, strict=True))), strict=True))
    total = 2 * len(args["widths"]) * args["runs"] * args["steps"]
    started = [0]

    def step():  # the progress bar's offset for the next run
        done = started[0]
        started[0] += args["steps"]
        return progress, done, total

    rows = tuple(_row(w, scaled, args, step) for w in args["widths"] for scaled in (True, False))
    head = max(args["widths"])
    scaled_row, unscaled_row = (next(r for r in rows if r.width == head and r.scaling == s)
                                for s in ("scaled", "unscaled"))  # fmt: skip
    return ScalingResult(args, rows=rows, scaled=_headline(scaled_row),
                         unscaled=_headline(unscaled_row))  # fmt: skip


def _headline(row: ScalingRow) -> dict:
    return {k: v for k, v in row.__dict__.items() if k not in ("losses", "position_losses")}


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# As the induction lab's calibration (see there): about 0.3 ns per multiply-add of a step's
# products and 10 ms of fixed cost per layer and step (2 layers here). The defaults (d_k = 128,
# one run of 300 steps each way): about 54 s by this model; measured 69 s for the whole command
# at load average 7 to 8 on the shared 2-core machine, 93 to 95 s with three runs at once
# (docs/training.md). A recorded step's trace costs little beside a step and is not modelled.
# On 2 December 2026 with one BLAS thread, the web's run (d_k = 64, one run each way, batch 16)
# took 2.1 s of CPU at 60 steps and 1.5 to 1.75 s at 40, about half of that model's figure:
# the constants are now 0.65 of the induction lab's first calibration.
_S_PER_MADD = 1.95e-10
_S_PER_STEP = 6.5e-3


def _estimate(widths, steps, batch, runs, vocab_size, context, **_) -> Estimate:
    seconds = 0.0
    for d in widths:
        rows = batch * context
        madds = 3 * _LAYERS * (4 * rows * d * d + 2 * rows * context * d) + rows * d * vocab_size
        seconds += 2 * runs * steps * (_LAYERS * _S_PER_STEP + _S_PER_MADD * madds)
    d = max(widths)
    return Estimate(seconds, 8 * batch * context * (12 * d + 8 * context + vocab_size) * 2)


def _plot(r: ScalingResult) -> LabPlot:
    head = max(r.widths)
    curves = {row.scaling: row.losses for row in r.rows if row.width == head}
    return LabPlot(
        title=f"Training loss at d_k = {head}, mean of {r.runs} runs",
        kind="line",
        x=list(range(1, r.steps + 1)),
        x_label="Adam step",
        y_label="cross-entropy (nats, mean of 10 steps)",
        series=[Series("scaled by 1/√d_k", list(curves["scaled"])),
                Series("unscaled", list(curves["unscaled"])),
                Series(f"target {r.target_loss}", [r.target_loss] * r.steps, dash=True)],
    )  # fmt: skip


SPEC = LabSpec(
    name="train-scaling",
    title="Saturation stalls learning, trained",
    summary="Train the same model on the same data with and without 1/√d_k and count the "
    "steps each needs, beside the saturated softmax rows and the gradient at the scores (§6.3).",
    heading="Training with and without 1/√d_k, {runs} runs of {steps:,} steps, seed {seed}",
    run=train_scaling,
    params=(
        Param("widths", "The d_k values (one head per layer).", low=1, high=MAX_WIDTH,
              web_high=128, flag="--width", web_items=1),
        Param("steps", "Adam steps per run.", low=1, high=MAX_STEPS, web_high=400,
              budget=True),
        Param("batch", "Sequences per step.", low=1, high=1024, web_high=16),
        Param("runs", "Runs per width and scaling.", low=1, high=MAX_RUNS, web_high=1),
        SEED,
        Param("target_loss", "The loss (nats) a run must reach.", low=1e-6, high=100.0),
        Param("lr", "Adam's learning rate.", low=1e-6, high=1.0),
        Param("vocab_size", "Tokens in the vocabulary.", low=2, high=4096, web_high=64),
        Param("context", "Sequence length N.", low=8, high=256, web_high=32),
    ),
    columns=(("width", "d_k"), ("scaling", "scaling"), ("steps_to_target", "steps to target"),
             ("final_loss", "final loss"), ("saturated_rows", "sat. rows"),
             ("median_ds", "median ‖dS‖")),
    plot=_plot,
    estimate=_estimate,
    training=True,
)  # fmt: skip
