"""Lab: a 2-layer attention-only transformer, trained here on attnlab's own gradients, forms an
induction head: heads that nobody assigned a pattern learn to copy.

The task (every sequence fills the context of N tokens, each token uniform over the vocabulary):

    [ random prefix of N - 2T ] [ T tokens ] [ the same T tokens again ]

with T drawn per sequence, uniform over 4 … N/2. A token in the second copy is followed by what
followed its earlier occurrence, T positions back; nothing else in the sequence can be
predicted. Because T varies, no fixed offset works: the model must find the earlier occurrence
by content. Two layers can: a head in layer 0 copies each position's previous token into it
(a previous-token head), and a head in layer 1 then matches the current token against those
copies and attends to the position after the earlier occurrence (an induction head).

Measured on fresh sequences from a stream training never sees:

    accuracy    share of correct next-token predictions at the second copy's positions i,
                whose target is the token at i + 1 (= the token at i - T + 1); the last
                position of the context has no next token and does not count
    ceiling     the accuracy of a perfect copier that, when the current token occurred more
                than once earlier in the copied segment, picks one of the distinct tokens
                that followed those occurrences at random: what ambiguity allows
    previous-token score of a head   its mean weight from query i on key i - 1 (i ≥ 1)
    induction score of a head        its mean weight from query i in the second copy on key
                                     i - T + 1
    position_losses   the loss per offset inside the first and the second copy (``_repeats``)

Shape legend: B sequences, N = context, L layers, h heads per layer, V the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.labs._common import Claim, LabResult, Progress, rng_for, row_table
from attnlab.labs._repeats import position_losses
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series
from attnlab.labs._training import FRESH, INDUCTION, TRAIN, checked, fit, one_thread, smoothed
from attnlab.transformer import TinyTransformer

__all__ = ["SPEC", "HeadRow", "InductionResult", "ceiling", "head_scores", "induction_batch",
           "induction_sequences", "label", "second_copy", "snapshot", "snapshot_steps",
           "train_induction"]  # fmt: skip

LABEL_AT = 0.4  # a score from here up names the head; below, "other"
# The claim holds when both kinds of head formed and the model copies at least this share of
# what ambiguity allows (the CLI's default run reaches 0.95 to 0.99 of it, docs/training.md).
CLAIM_SHARE = 0.9
MIN_T = 4


def induction_sequences(rng: np.random.Generator, count: int, context: int, vocab_size: int):
    """(tokens (B, N), lengths T (B,)): ``count`` sequences of the task, N = context."""
    lengths = rng.integers(MIN_T, context // 2 + 1, size=count)  # (B,): T per sequence
    tokens = rng.integers(0, vocab_size, size=(count, context))  # (B, N)
    pos = np.arange(context)[None, :]  # (1, N)
    second = pos >= context - lengths[:, None]  # (B, N): the second copy
    source = np.where(second, pos - lengths[:, None], pos)  # (B, N): copied from T back
    return np.take_along_axis(tokens, source, axis=1), lengths


def second_copy(lengths: np.ndarray, context: int) -> np.ndarray:
    """(B, N) bool: the positions that count, those of the second copy but the last."""
    pos = np.arange(context)[None, :]  # (1, N)
    return (pos >= context - lengths[:, None]) & (pos < context - 1)


def induction_batch(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """targets (B, N): the next token where a position counts, -1 elsewhere."""
    targets = np.full_like(tokens, -1)
    counted = second_copy(lengths, tokens.shape[1])
    targets[:, :-1] = np.where(counted[:, :-1], tokens[:, 1:], -1)
    return targets


def ceiling(tokens: np.ndarray, lengths: np.ndarray, vocab_size: int) -> float:
    """The best mean accuracy ambiguity allows (see the module's docstring)."""
    b, n = tokens.shape
    counted = second_copy(lengths, n)  # (B, N)
    pos = np.arange(n)
    start = (n - 2 * lengths)[:, None, None]  # (B, 1, 1): where the copied segment begins
    # earlier[b, i, j]: j < i, inside the segment, the same token as at i
    earlier = (tokens[:, :, None] == tokens[:, None, :]) & (pos[None, :, None] > pos[None, None, :])
    earlier &= pos[None, None, :] >= start
    earlier[:, :, -1] = False  # the last position has no successor
    # The distinct tokens that followed those occurrences, counted by sorting each row's
    # successors (-1 where j does not count): no (B, N, V) one-hot, which at V = 4096 took 40 s.
    after = np.full((b, n), -1)
    after[:, :-1] = tokens[:, 1:]  # (B, N): the token at j + 1
    seen = np.sort(np.where(earlier, after[:, None, :], -1), axis=-1)  # (B, N, N)
    fresh = (seen[..., 1:] != seen[..., :-1]) & (seen[..., 1:] >= 0)
    candidates = fresh.sum(axis=-1) + (seen[..., 0] >= 0)  # (B, N): distinct successors
    return float((1.0 / candidates[counted]).mean())


def head_scores(weights: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(previous-token (L, h), induction (L, h)) scores from weights (B, L, h, N, N)."""
    n = weights.shape[-1]
    pos = np.arange(n)
    previous = weights[..., pos[1:], pos[:-1]].mean(axis=(0, -1))  # (L, h)
    counted = second_copy(lengths, n)  # (B, N)
    rows, cols = np.nonzero(counted)  # each counted (sequence, query)
    keys = cols - lengths[rows] + 1  # the key after the earlier occurrence
    induction = weights[rows, :, :, cols, keys].mean(axis=0)  # (L, h)
    return previous, induction


def label(previous: float, induction: float) -> str:
    """A head's name from its two scores: the larger one, once it reaches LABEL_AT."""
    if max(previous, induction) < LABEL_AT:
        return "other"
    return "previous-token" if previous >= induction else "induction"


@dataclass(frozen=True)
class HeadRow:
    layer: int
    head: int
    previous_token: float  # mean weight on key i - 1
    induction_score: float  # mean weight on key i - T + 1 in the second copy
    pattern: str  # "previous-token", "induction" or "other"


@dataclass(frozen=True)
class InductionResult(LabResult):
    """The trained model's accuracy beside the ceiling, its heads, and the loss curve."""

    steps: int
    batch: int
    seed: int
    vocab_size: int
    context: int
    layers: int
    heads: int
    d_model: int
    lr: float
    init_std: float  # 0: attnlab's fan-in initialisation
    fresh: int  # fresh sequences measured
    accuracy: float
    ceiling: float
    head_rows: tuple[HeadRow, ...]
    losses: tuple[float, ...]  # the training loss, smoothed over 10 steps, every step
    position_losses: dict  # loss per offset in each copy, on the fresh sequences (_repeats)
    seconds: float  # wall time of the training loop (varies from run to run)
    lab = "train-induction"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.head_rows, SPEC.columns)

    def found(self, pattern: str, layer: int) -> bool:
        return any(r.pattern == pattern and r.layer == layer for r in self.head_rows)

    def claim(self) -> Claim:
        formed = self.found("previous-token", 0) and self.found("induction", self.layers - 1)
        near = self.accuracy >= CLAIM_SHARE * self.ceiling
        heads = ("a previous-token head in layer 0 and an induction head in layer "
                 f"{self.layers - 1} formed" if formed else "the two kinds of head did not "
                 "both form")  # fmt: skip
        why = f"accuracy {self.accuracy:.1%} against a {self.ceiling:.1%} ceiling; {heads}"
        if not (formed and near):
            default = SPEC.param("steps").default
            why += (f" (after {self.steps:,} steps: the loss sits on a plateau for the first "
                    f"few hundred; the default of {default:,} steps gets past it)")  # fmt: skip
        return Claim("Two attention-only layers learn to copy a repeat: a previous-token head "
                     "and an induction head form, and accuracy nears the ceiling.",
                     formed and near, why)  # fmt: skip

    def summary(self) -> list[str]:
        best = max(self.head_rows, key=lambda r: r.induction_score)
        prev = max(self.head_rows, key=lambda r: r.previous_token)
        return [
            f"After {self.steps:,} Adam steps of {self.batch} sequences ({self.seconds:.1f} s), "
            f"the model predicts {self.accuracy:.1%} of the second copy's tokens on "
            f"{self.fresh:,} fresh sequences; ambiguity allows at most {self.ceiling:.1%}.",
            f"Strongest previous-token head: layer {prev.layer} head {prev.head} "
            f"({prev.previous_token:.2f} of its weight on the token before); strongest "
            f"induction head: layer {best.layer} head {best.head} ({best.induction_score:.2f} "
            f"on the token after the earlier occurrence).",
            "Nobody set these patterns: they are what attnlab's own gradients found, and "
            + ("both kinds formed." if self.found("previous-token", 0) and self.found(
                "induction", self.layers - 1) else "here they did not both form."),
        ]  # fmt: skip


def train_induction(
    steps: int = 600,
    batch: int = 32,
    seed: int = 0,
    *,
    vocab_size: int = 256,
    context: int = 32,
    layers: int = 2,
    heads: int = 4,
    d_model: int = 64,
    lr: float = 1e-2,
    init_std: float = 0.0,
    fresh: int = 1000,
    save: str = "",
    snapshots: int = 0,
    progress: Progress | None = None,
) -> InductionResult:
    """Train an attention-only causal transformer on the induction task and look inside it.

    Args:
        steps, batch: Adam steps, of ``batch`` fresh training sequences each.
        seed: the model's initial weights and every sequence; same seed, same numbers.
        vocab_size, context: V and N of the task (N ≥ 8; T runs over 4 … N/2).
        layers, heads, d_model: the model (attention only, learned positions, no MLP).
        lr: Adam's learning rate. init_std: 0 for fan-in initialisation, else every weight
            drawn N(0, init_std²) (GPT-2's 0.02 is a baseline that fails).
        fresh: sequences, never trained on, that accuracy and head scores are measured on.
        save: a path to write the trained model to (``TinyTransformer.load`` reads it).
        snapshots: with ``save``, also keep the weights at this many evenly spaced steps
            (step 0 first) in the same file, float16, for ``attnlab.transformer.checkpoints``.
        progress: called as progress(steps done, steps).
    """
    (steps, batch, seed, vocab_size, context, layers, heads, d_model, lr, init_std, fresh,
     snapshots) = checked(SPEC, steps=steps, batch=batch, seed=seed, vocab_size=vocab_size,
                          context=context, layers=layers, heads=heads, d_model=d_model, lr=lr,
                          init_std=init_std, fresh=fresh, snapshots=snapshots)  # fmt: skip
    if snapshots and not save:
        raise AttnlabError(f"expected save (a file to keep them in) with snapshots={snapshots}, "
                           "but got no save")  # fmt: skip
    # d_model divisible by heads, the one cross-argument rule, is TinyTransformer's to check.
    model = TinyTransformer(vocab_size=vocab_size, context=context, layers=layers, heads=heads,
                            d_model=d_model, seed=seed, init_std=init_std or None)  # fmt: skip

    def draw(rng):
        tokens, lengths = induction_sequences(rng, batch, context, vocab_size)
        return tokens, induction_batch(tokens, lengths)

    kept = snapshot_steps(steps, snapshots)
    extra: dict[str, np.ndarray] = {"trained_steps": np.array(steps)} if kept else {}

    def each(step, m, tokens, targets):
        if step in kept:  # the weights before this step's update
            extra.update(snapshot(m, step))
        return m.loss_and_grads(tokens, targets)

    curve = fit(model, draw, rng_for(seed, INDUCTION, TRAIN), steps=steps, lr=lr,
                progress=progress, each=each if kept else None)  # fmt: skip
    tokens, lengths = induction_sequences(rng_for(seed, INDUCTION, FRESH), fresh, context,
                                          vocab_size)  # fmt: skip
    accuracy, rows = measure(model, tokens, lengths)
    with one_thread():
        by_position = position_losses(model, tokens, lengths)
    if save:
        model.save(save, extra)
    return InductionResult(steps=steps, batch=batch, seed=seed, vocab_size=vocab_size,
                           context=context, layers=layers, heads=heads, d_model=d_model, lr=lr,
                           init_std=init_std, fresh=fresh, accuracy=accuracy,
                           ceiling=ceiling(tokens, lengths, vocab_size), head_rows=rows,
                           losses=tuple(smoothed(curve.losses).tolist()),
                           position_losses=by_position, seconds=curve.seconds)  # fmt: skip


def snapshot_steps(steps: int, count: int) -> set[int]:
    """The steps whose weights a run keeps: ``count`` evenly spaced from step 0."""
    return {int(s) for s in np.linspace(0, steps, count, endpoint=False)} if count else set()


def snapshot(model: TinyTransformer, step: int) -> dict[str, np.ndarray]:
    """The weights attention depends on, float16, named ``snapshot/STEP/NAME`` (no unembedding:
    a snapshot shows where heads look, not what the model predicts)."""
    return {f"snapshot/{step}/{name}": p.astype(np.float16)
            for name, p in model.params.items() if name != "unembed"}  # fmt: skip


def measure(model: TinyTransformer, tokens: np.ndarray, lengths: np.ndarray):
    """(accuracy, head rows) of ``model`` on the task's sequences ``tokens`` (B, N)."""
    with one_thread():
        predicted = model.predict(tokens)  # (B, N)
        weights = model.attention_weights(tokens)  # (B, L, h, N, N)
    counted = second_copy(lengths, tokens.shape[1])[:, :-1]  # (B, N - 1)
    accuracy = float((predicted[:, :-1] == tokens[:, 1:])[counted].mean())
    previous, induction = head_scores(weights, lengths)
    rows = tuple(HeadRow(layer=l_, head=h, previous_token=float(previous[l_, h]),
                         induction_score=float(induction[l_, h]),
                         pattern=label(previous[l_, h], induction[l_, h]))
                 for l_ in range(previous.shape[0]) for h in range(previous.shape[1]))  # fmt: skip
    return accuracy, rows


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

MAX_STEPS, MAX_BATCH, MAX_VOCAB, MAX_CONTEXT = 100_000, 1024, 4096, 256
MAX_LAYERS, MAX_D_MODEL, MAX_FRESH, MAX_SNAPSHOTS = 8, 512, 100_000, 20
# Rough, from runs on the shared 2-core machine (one BLAS thread): about 0.3 ns per
# multiply-add of a step's products and 10 ms of fixed cost per layer and step (the calls
# into attention, its checks, the small arrays). The default run: about 45 s by this model;
# measured 60 to 360 s while other work loaded the machine (docs/training.md). On 2 December
# 2026 with one BLAS thread the web's default run (50 steps of 32, 2 layers of 4 heads) took
# 1.57 s of CPU against 3.8 s by that model, and with 8 heads and 400 fresh sequences 2.5 s
# against 3.9 s: the constants are now half of those, and the web keeps the heads (which the
# model leaves out) and the sizes at their defaults.
_S_PER_MADD = 1.5e-10
_S_PER_STEP = 5e-3


def _work(batch, context, layers, d_model, heads=1):
    """Multiply-adds of one forward and backward pass (3 times the forward's products)."""
    rows = batch * context
    forward = layers * (4 * rows * d_model * d_model + 2 * rows * context * d_model)
    return 3 * forward


def _estimate(steps, batch, context, layers, heads, d_model, vocab_size, fresh, **_) -> Estimate:
    per_step = _S_PER_STEP * layers + _S_PER_MADD * (
        _work(batch, context, layers, d_model) + 3 * batch * context * d_model * vocab_size
    )
    seconds = steps * per_step + fresh / batch * per_step / 3
    # float32 tables of the larger of a batch and the fresh sequences: weights, activations
    # and caches per layer, and the logits.
    width = layers * (2 * heads * context + 12 * d_model) + 2 * vocab_size
    peak = 4 * max(batch, fresh) * context * width
    return Estimate(seconds, peak)


def _plot(r: InductionResult) -> LabPlot:
    return LabPlot(
        title=f"Training loss on the second copy, {r.layers} layers of {r.heads} heads "
        f"(accuracy {r.accuracy:.1%}, ceiling {r.ceiling:.1%})",
        kind="line",
        x=list(range(1, len(r.losses) + 1)),
        x_label="Adam step",
        y_label="cross-entropy (nats, mean of 10 steps)",
        series=[Series("training loss", list(r.losses))],
    )


SPEC = LabSpec(
    name="train-induction",
    title="An induction head, trained",
    summary="Train a 2-layer attention-only transformer on attnlab's own gradients to copy "
    "repeated sequences, then read its heads: a previous-token head and an induction head.",
    heading="Heads after {steps:,} steps of {batch}, seed {seed}",
    run=train_induction,
    params=(
        Param("steps", "Adam steps.", low=1, high=MAX_STEPS, web_high=1200, budget=True),
        Param("batch", "Sequences per step.", low=1, high=MAX_BATCH, web_high=32),
        SEED,
        Param("vocab_size", "Tokens in the vocabulary (V).", low=2, high=MAX_VOCAB,
              web_high=256),
        Param("context", "Sequence length N; T runs over 4 … N/2.", low=2 * MIN_T,
              high=MAX_CONTEXT, web_high=32),
        Param("layers", "Attention layers (1 is the baseline that cannot copy).", low=1,
              high=MAX_LAYERS, web_high=2),
        Param("heads", "Heads per layer.", low=1, high=64, web_high=4),
        Param("d_model", "Model width (a multiple of heads).", low=1, high=MAX_D_MODEL,
              web_high=64),
        Param("lr", "Adam's learning rate.", low=1e-6, high=1.0),
        Param("init_std", "0: fan-in initialisation; else every weight N(0, std²), "
              "e.g. GPT-2's 0.02.", low=0.0, high=10.0),
        Param("fresh", "Fresh sequences to measure on.", low=1, high=MAX_FRESH,
              web_high=1000),
        Param("save", "Write the trained model to this .npz file.", web=False),
        Param("snapshots", "With --save, also keep the weights at this many evenly spaced "
              "steps.", low=0, high=MAX_SNAPSHOTS, web=False),
    ),
    columns=(("layer", "layer"), ("head", "head"), ("previous_token", "prev.-token score"),
             ("induction_score", "induction score"), ("pattern", "pattern")),
    plot=_plot,
    estimate=_estimate,
    training=True,
)  # fmt: skip
