"""Lab: knock heads out of the shipped induction model and measure what copying loses.

The model is ``attnlab.transformer.pretrained("induction")`` (what ``attnlab lab
train-induction`` trains at its defaults). On fresh sequences of its task (a random prefix,
T tokens, the same T tokens), the lab measures the model as it is, then with each head
knocked out in turn, then with each whole layer knocked out (``TinyTransformer.predict(...,
ablate=...)``: the head's output rows zeroed, or with ``ablation="mean"`` replaced by its mean
output over the fresh sequences), and reports per row:

    accuracy      correct next-token predictions in the second copy (as train-induction)
    loss          mean cross-entropy there, nats
    first_loss    mean cross-entropy in the first copy, whose next tokens are new: the
                  contrast a copying head makes
    position_losses (JSON)   the loss per offset inside each copy (``_repeats``)

If the model copies by composing a previous-token head in layer 0 with induction heads in
layer 1, knocking out the previous-token head (or layer 0) should cost most of the accuracy,
and a head with neither pattern should cost little.

Shape legend: B fresh sequences, N = context, L layers, h heads per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.errors import AttnlabError
from attnlab.labs._common import LabResult, Progress, rng_for, row_table
from attnlab.labs._repeats import position_losses
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series
from attnlab.labs._training import FRESH, checked, one_thread
from attnlab.labs.induction import head_scores, induction_sequences, label, second_copy
from attnlab.transformer import pretrained

__all__ = ["SPEC", "AblationResult", "AblationRow", "ablate_heads"]

ABLATE = 104  # this lab's stream tag, beside the training labs' 101 … 103


@dataclass(frozen=True)
class AblationRow:
    ablated: str  # "none", "L0H2" (one head) or "layer 0" (every head of it)
    layer: int | None
    head: int | None  # None: the whole layer (or nothing)
    pattern: str  # the head's measured pattern ("previous-token", "induction", "other")
    accuracy: float
    accuracy_change: float  # accuracy - the unablated model's
    loss: float  # second copy, nats
    first_loss: float  # first copy, nats


@dataclass(frozen=True)
class AblationResult(LabResult):
    """Accuracy and loss of the shipped induction model with each head and layer knocked out."""

    fresh: int
    seed: int
    ablation: str
    layers: int
    heads: int
    rows: tuple[AblationRow, ...]
    position_losses: dict  # row name -> {"first_copy", "second_copy", "first_mean", ...}
    lab = "ablate-heads"

    def table(self) -> tuple[list[str], list[list]]:
        return row_table(self.rows, SPEC.columns)

    def worst(self) -> AblationRow:
        """The single head whose ablation costs most accuracy."""
        return min((r for r in self.rows if r.head is not None), key=lambda r: r.accuracy)

    def summary(self) -> list[str]:
        base, worst = self.rows[0], self.worst()
        layers = [r for r in self.rows if r.head is None and r.layer is not None]
        return [
            f"Intact, the model copies {base.accuracy:.1%} of the second copy's tokens on "
            f"{self.fresh:,} fresh sequences (loss {base.loss:.2f} nats there, "
            f"{base.first_loss:.2f} in the first copy).",
            f"Knocking out {worst.ablated} ({worst.pattern}, {self.ablation}-ablation) drops "
            f"it to {worst.accuracy:.1%} (loss {worst.loss:.2f}); "
            + "; ".join(f"without {r.ablated}: {r.accuracy:.1%}" for r in layers) + ".",
            "A head with no pattern of its own costs little; the previous-token head in "
            "layer 0 is what the induction heads of layer 1 read.",
        ]  # fmt: skip


def ablate_heads(
    fresh: int = 200,
    seed: int = 0,
    *,
    ablation: str = "zero",
    progress: Progress | None = None,
) -> AblationResult:
    """Measure the shipped induction model with each head, then each layer, knocked out.

    Args:
        fresh: sequences of the induction task to measure on (never trained on).
        seed: same seed, same sequences, same numbers.
        ablation: "zero" (the head's output rows zeroed) or "mean" (replaced by its mean
            output over these sequences).
        progress: called as progress(ablations measured, 1 + heads + layers).
    """
    fresh, seed = checked(SPEC, fresh=fresh, seed=seed)
    if ablation not in SPEC.param("ablation").choices:
        raise AttnlabError(f"expected ablation 'zero' or 'mean', but got {ablation!r} instead")
    model = pretrained("induction")
    cfg = model.config
    n, layers, heads = cfg["context"], cfg["layers"], cfg["heads"]
    tokens, lengths = induction_sequences(rng_for(seed, ABLATE, FRESH), fresh, n,
                                          cfg["vocab_size"])  # fmt: skip
    counted = second_copy(lengths, n)[:, :-1]  # (B, N - 1)
    with one_thread():
        previous, induction = head_scores(model.attention_weights(tokens), lengths)  # (L, h)
    plan = [("none", None, None, ())]
    plan += [(f"L{i}H{j}", i, j, ((i, j),)) for i in range(layers) for j in range(heads)]
    plan += [(f"layer {i}", i, None, tuple((i, j) for j in range(heads))) for i in range(layers)]
    rows, losses, base = [], {}, None
    for done, (name, layer, head, off) in enumerate(plan, 1):
        with one_thread():
            predicted = model.predict(tokens, ablate=off, ablation=ablation)  # (B, N)
            found = position_losses(model, tokens, lengths, ablate=off, ablation=ablation)
        accuracy = float((predicted[:, :-1] == tokens[:, 1:])[counted].mean())
        base = accuracy if base is None else base
        pattern = "" if head is None else label(previous[layer, head], induction[layer, head])
        rows.append(AblationRow(ablated=name, layer=layer, head=head, pattern=pattern,
                                accuracy=accuracy, accuracy_change=accuracy - base,
                                loss=found["second_mean"], first_loss=found["first_mean"]))  # fmt: skip
        losses[name] = found
        if progress is not None:
            progress(done, len(plan))
    return AblationResult(fresh=fresh, seed=seed, ablation=ablation, layers=layers,
                          heads=heads, rows=tuple(rows), position_losses=losses)  # fmt: skip


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured on the shared 2-core machine (one BLAS thread, 3 December 2026): one forward pass
# of the shipped model with the per-position loss took 1.7 ms per sequence, and the lab makes
# 1 + 8 + 2 of them and one more for the head scores.
_S_PER_SEQUENCE_PASS = 1.7e-3
_PASSES = 12


def _estimate(fresh, **_) -> Estimate:
    # float32 per sequence: the logits (N × V), each layer's weights (h × N × N) and a few
    # (N × D) activations, twice for the copies numpy makes.
    per_sequence = 4 * 32 * (256 + 2 * 4 * 32 + 8 * 64) * 2
    return Estimate(_PASSES * fresh * _S_PER_SEQUENCE_PASS, fresh * per_sequence)


def _plot(r: AblationResult) -> LabPlot:
    worst = r.worst().ablated
    shown = ["none", worst] + [f"layer {i}" for i in range(r.layers)]
    second = [Series(f"second copy, {name} knocked out" if name != "none" else
                     "second copy, intact", list(r.position_losses[name]["second_copy"]))
              for name in shown]  # fmt: skip
    first = Series("first copy, intact", list(r.position_losses["none"]["first_copy"]), dash=True)
    return LabPlot(
        title=f"Loss per position of the repeat, heads knocked out ({r.ablation}-ablation, "
        f"{r.fresh:,} sequences)",
        kind="line",
        x=list(range(len(first.y))),
        x_label="offset inside the copy",
        y_label="cross-entropy of the next token (nats)",
        series=[*second, first],
    )


SPEC = LabSpec(
    name="ablate-heads",
    title="Knock heads out of the induction model",
    summary="Zero (or mean-replace) each head and each layer of the shipped induction model in "
    "turn, and measure how much of its copying is lost: accuracy, and loss per position of the "
    "repeat.",
    heading="Heads knocked out, {fresh:,} sequences, seed {seed}",
    run=ablate_heads,
    params=(
        Param("fresh", "Fresh sequences of the induction task to measure on.", low=1,
              high=20_000, web_high=80, web_default=80, budget=True),
        SEED,
        Param("ablation", "zero: the head's output rows zeroed; mean: replaced by its mean "
              "output.", choices=("zero", "mean")),
    ),
    columns=(("ablated", "knocked out"), ("pattern", "pattern"), ("accuracy", "accuracy"),
             ("accuracy_change", "change"), ("loss", "loss, 2nd copy"),
             ("first_loss", "loss, 1st copy")),
    plot=_plot,
    estimate=_estimate,
)  # fmt: skip
