"""Lab: §6.5's permutation argument, measured by training: without positions, attention cannot
learn a task that needs order.

The task: an encoder (no mask: every position sees every other) reads N tokens, each uniform
over the vocabulary, and must output at each position the token before it; position 0 outputs
the fixed symbol 0. Two models of the same size learn it from the same batches: one with
learned position vectors, one with none.

Without positions, the model's output at position i depends only on its own token x_i and on
the multiset of the sequence's tokens (self-attention is permutation-equivariant, §6.5). Every
ordering of that multiset is equally likely, so for a token a and a guess c the expected number
of positions with x_i = a and target c is n_a (n_c - [a = c] + [c = 0]) / N (a neighbouring pair
of a random ordering; the [c = 0] term is position 0's fixed symbol). The best any such model
can do on a sequence is therefore

    ceiling(S) = 1/N² · Σ_a n_a · max_c (n_c - [a = c] + [c = 0])

and the lab reports its mean over the fresh sequences it measures accuracy on. The test suite
checks this formula against brute force over every sequence of a small vocabulary.

Shape legend: B sequences, N = context, V the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.labs._common import LabResult, Progress, column_keys, rng_for
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series
from attnlab.labs._training import FRESH, POSITIONS, TRAIN, checked, fit, one_thread, smoothed
from attnlab.transformer import TinyTransformer

__all__ = ["SPEC", "PositionsResult", "permutation_ceiling", "previous_token_task",
           "train_positions"]  # fmt: skip

FIXED = 0  # what position 0 outputs


def previous_token_task(rng: np.random.Generator, count: int, context: int, vocab_size: int):
    """(tokens (B, N), targets (B, N)): targets[:, i] = tokens[:, i - 1], targets[:, 0] = 0."""
    tokens = rng.integers(0, vocab_size, size=(count, context))  # (B, N)
    targets = np.empty_like(tokens)
    targets[:, 0] = FIXED
    targets[:, 1:] = tokens[:, :-1]
    return tokens, targets


def permutation_ceiling(tokens: np.ndarray, vocab_size: int) -> float:
    """The mean over sequences of ``ceiling(S)`` (see the module's docstring)."""
    b, n = tokens.shape
    counts = np.zeros((b, vocab_size))  # (B, V): n_a
    np.add.at(counts, (np.arange(b)[:, None], tokens), 1)
    # max_c gain[a, c], gain = h_c - [a = c] with h_c = n_c + [c = 0], from h's two largest
    # entries: the best c other than a is h's top unless a is where the top is. No (B, V, V)
    # table (at V = 4096 and 1000 sequences it was 125 GiB).
    h = counts.copy()
    h[:, FIXED] += 1
    rows = np.arange(b)
    top_at = h.argmax(axis=-1)  # (B,)
    top = h[rows, top_at]
    h[rows, top_at] = -np.inf
    second = h.max(axis=-1)  # (B,): the top again when it is tied
    h[rows, top_at] = top
    others = np.where(np.arange(vocab_size) == top_at[:, None], second[:, None], top[:, None])
    best = np.maximum(others, h - 1)  # (B, V): the best guess's gain for each own token a
    return float(((counts * best).sum(axis=-1) / n**2).mean())


@dataclass(frozen=True)
class PositionsResult(LabResult):
    steps: int
    batch: int
    seed: int
    vocab_size: int
    context: int
    d_model: int
    heads: int
    lr: float
    fresh: int
    with_positions: dict  # {"accuracy", "final_loss"}
    without_positions: dict  # {"accuracy", "ceiling", "final_loss"}
    losses_with: tuple[float, ...]
    losses_without: tuple[float, ...]
    position_losses: dict  # {"with", "without"}: loss per position on the fresh sequences
    lab = "train-positions"

    def table(self) -> tuple[list[str], list[list]]:
        columns = column_keys(SPEC.columns)
        w, wo = self.with_positions, self.without_positions
        return columns, [["learned positions", w["accuracy"], None, w["final_loss"]],
                         ["no positions", wo["accuracy"], wo["ceiling"], wo["final_loss"]]]  # fmt: skip

    def summary(self) -> list[str]:
        w, wo = self.with_positions, self.without_positions
        return [
            f"With learned positions the encoder outputs the previous token at "
            f"{w['accuracy']:.1%} of positions on {self.fresh:,} fresh sequences.",
            f"Without them it reaches {wo['accuracy']:.1%}: a model that cannot tell order "
            f"can do no better than {wo['ceiling']:.1%} on these sequences (the "
            f"permutation-invariant ceiling, computed from each sequence's token counts).",
        ]


def train_positions(
    steps: int = 300,
    batch: int = 32,
    seed: int = 0,
    *,
    vocab_size: int = 16,
    context: int = 12,
    d_model: int = 32,
    heads: int = 2,
    lr: float = 1e-2,
    fresh: int = 1000,
    progress: Progress | None = None,
) -> PositionsResult:
    """Train one encoder layer with and without positions on "output the previous token".

    Args:
        steps, batch: Adam steps, sequences per step (the same batches for both models).
        seed: same seed, same numbers. vocab_size, context: V and N of the task.
        d_model, heads: the one attention layer (no MLP, no mask). lr: Adam's learning rate.
        fresh: sequences never trained on, for the accuracy and the ceiling.
        progress: called as progress(steps done, 2 × steps).
    """
    steps, batch, seed, vocab_size, context, d_model, heads, lr, fresh = checked(
        SPEC, steps=steps, batch=batch, seed=seed, vocab_size=vocab_size, context=context,
        d_model=d_model, heads=heads, lr=lr, fresh=fresh)  # fmt: skip
    # d_model divisible by heads, the one cross-argument rule, is TinyTransformer's to check.
    tokens, targets = previous_token_task(rng_for(seed, POSITIONS, FRESH), fresh, context,
                                          vocab_size)  # fmt: skip
    found, curves, by_position = {}, {}, {}
    for i, positions in enumerate(("learned", None)):
        model = TinyTransformer(vocab_size=vocab_size, context=context, layers=1, heads=heads,
                                d_model=d_model, positions=positions, causal=False,
                                seed=seed)  # fmt: skip
        curve = fit(model, lambda r: previous_token_task(r, batch, context, vocab_size),
                    rng_for(seed, POSITIONS, TRAIN), steps=steps, lr=lr, progress=progress,
                    done=i * steps, total=2 * steps)  # fmt: skip
        with one_thread():
            accuracy = float((model.predict(tokens) == targets).mean())
            per = model.token_losses(tokens, targets).mean(axis=0)  # (N,)
        by_position["with" if positions else "without"] = [round(float(x), 6) for x in per]
        curves[positions] = smoothed(curve.losses)
        found[positions] = {"accuracy": accuracy, "final_loss": float(curves[positions][-1])}
    found[None]["ceiling"] = permutation_ceiling(tokens, vocab_size)
    return PositionsResult(steps=steps, batch=batch, seed=seed, vocab_size=vocab_size,
                           context=context, d_model=d_model, heads=heads, lr=lr, fresh=fresh,
                           with_positions=found["learned"],
                           without_positions=found[None],
                           losses_with=tuple(curves["learned"].tolist()),
                           losses_without=tuple(curves[None].tolist()),
                           position_losses=by_position)  # fmt: skip


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Started from the induction lab's calibration; at the web defaults (150 steps of 32) with one
# BLAS thread on 2 December 2026 the run took 0.97 s of CPU, a quarter of that model's 4.2 s,
# and 200 steps of 32 at context 16, V = 32 and 4 heads 2.9 s, half of its 5.8 s: the model
# leaves out the heads and grows too slowly with the sizes, so the web keeps those at their
# defaults and lets the steps grow, and the constants are 0.35 of the induction lab's (1.5
# times the default run).
_S_PER_MADD = 1.05e-10
_S_PER_STEP = 3.5e-3
# The softmax and cross-entropy over the vocabulary: a dozen elementwise passes over each
# (row, token) logit, which the products above leave out. Profiled at V = 4,096 (30 steps of
# 32, context 12, on 4 December 2026, the machine shared): 34 ms a step in the loss (21 ns a
# logit) and 1.7 s for each model's 49 M fresh logits (34 ns); the run took 7.6 s where the
# products alone estimated 1.5 s. Negligible at the default V = 16.
_S_PER_LOGIT = 2.5e-8


def _estimate(steps, batch, context, d_model, vocab_size, fresh, **_) -> Estimate:
    rows = batch * context
    madds = 3 * (4 * rows * d_model**2 + 2 * rows * context * d_model + rows * d_model * vocab_size)
    step = _S_PER_STEP + _S_PER_MADD * madds + _S_PER_LOGIT * rows * vocab_size
    # Each model then reads all the fresh sequences in one forward pass (a third of a step's
    # products per sequence), not in batches: a batch of 1 does not make it a thousand calls.
    measure = (
        _S_PER_STEP
        + _S_PER_MADD * madds * fresh / (3 * batch)
        + _S_PER_LOGIT * fresh * context * vocab_size
    )
    seconds = 2 * steps * step + 2 * measure
    # the fresh logits and their softmax are two (fresh · N, V) tables at once
    return Estimate(seconds, 8 * max(batch, fresh) * context * (12 * d_model + 4 * context
                                                                + 2 * vocab_size))  # fmt: skip


def _plot(r: PositionsResult) -> LabPlot:
    return LabPlot(
        title=f"Output the previous token: an encoder with and without positions "
        f"(ceiling without: {r.without_positions['ceiling']:.1%})",
        kind="line",
        x=list(range(1, r.steps + 1)),
        x_label="Adam step",
        y_label="cross-entropy (nats, mean of 10 steps)",
        series=[Series("learned positions", list(r.losses_with)),
                Series("no positions", list(r.losses_without))],
    )  # fmt: skip


SPEC = LabSpec(
    name="train-positions",
    title="Order needs positions, trained",
    summary="Train an encoder to output each position's previous token, with and without "
    "position vectors; without them it stays under the permutation-invariant ceiling (§6.5).",
    heading="Previous-token task, {steps:,} steps of {batch}, seed {seed}",
    run=train_positions,
    params=(
        Param("steps", "Adam steps per model.", low=1, high=20_000, web_high=200,
              web_default=150, budget=True),
        Param("batch", "Sequences per step.", low=1, high=1024, web_high=32),
        SEED,
        Param("vocab_size", "Tokens in the vocabulary (V).", low=2, high=4096, web_high=16),
        Param("context", "Sequence length N.", low=2, high=256, web_high=12),
        Param("d_model", "Model width (a multiple of heads).", low=1, high=512, web_high=32),
        Param("heads", "Heads.", low=1, high=64, web_high=2),
        Param("lr", "Adam's learning rate.", low=1e-6, high=1.0),
        Param("fresh", "Fresh sequences to measure on.", low=1, high=100_000, web_high=1000),
    ),
    columns=(("model", "model"), ("accuracy", "accuracy"), ("order_ceiling", "ceiling"),
             ("final_loss", "final loss")),
    plot=_plot,
    estimate=_estimate,
)  # fmt: skip
