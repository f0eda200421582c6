"""Explainers of §6.3 to §6.5: the variance chain, the gap ratio, p(1 − p), the mask, word order.

Shape legend: N queries, M keys, d_k query/key width, d the token width.

Each equation is one entry of ``_EQUATIONS`` and each of its symbols one row: id, text, shape,
meaning, and where its link goes, by name ("proof:Var(q·k)" is the proof lab's step of that name,
"stepper:weights" the stepper's step, "lab:saturation" a lab, "histogram" or "permutation" a
figure). A proof step is found by its name in the lab's own ``STEPS``, so reordering the proof
moves the links with it, and a name the proof lacks fails at import.
"""

from __future__ import annotations

import math

from attnlab.figures.explainers import (
    HISTOGRAM,
    PERMUTATION,
    PROOF,
    STEPPER,
    Link,
    example_gap,
    explainers,
    lab,
)
from attnlab.labs.sqrt_dk_proof import STEPS as PROOF_STEPS

__all__ = ["link_to", "reasoning_explainers"]

_LABELS = {
    "histogram": (HISTOGRAM, "Watch the spread grow with d_k in the histogram"),
    "permutation": (PERMUTATION, "Shuffle the tokens in the word-order figure"),
    "stepper:scores": (STEPPER, "See the raw scores"),
    "stepper:weights": (STEPPER, "See the weights"),
    "stepper:working": (STEPPER, "See the working"),
    "stepper:masked": (STEPPER, "Toggle the causal mask in the stepper"),
    "lab:saturation": (None, "Run the saturation lab: how often one key takes over 99%"),
    "lab:gradient": (None, "Run the gradient lab"),
}


def link_to(name: str) -> Link:
    """The link a symbol's row names: a proof step, a stepper step, a lab or a figure."""
    kind, _, what = name.partition(":")
    if kind == "proof":
        # The step's number is its place in the proof as it stands, never written here.
        return Link(
            PROOF, f"Measured in the proof, step {PROOF_STEPS.index(what) + 1}: {what}", what
        )
    href, label = _LABELS[name]
    if kind == "lab":
        return lab(what, label)
    step = "weights" if what == "working" else what
    return Link(href, label, step=step)


_SQRT_128 = math.sqrt(128)
_P = 0.99  # a saturated weight

# (id, title, section, parts, the sentence, (symbol id, text, shape, meaning, link) per symbol)
_EQUATIONS = (
    ("score", "A raw score is a sum of d_k products", "§6.3", "z == qk == sum prod",
     "Each score is d_k small random products added together.", (
        ("z", "z", "one number", "A raw score q·k = Σ q_i k_i, a sum of d_k products.",
         "proof:E(q·k)"),
        ("qk", "q^{⊤}k", "one number",
         "One query row dotted with one key row, before any scaling.", "stepper:scores"),
        ("sum", "Σ_{i=1}^{d_{k}}", "d_k terms", "Add up over the d_k coordinates.",
         "proof:E(q·k)"),
        ("prod", "q_{i}k_{i}", "one number per i",
         "Coordinate i of the query times coordinate i of the key; at initialisation each "
         "factor is a random number with mean 0 and variance 1.", "proof:E(q_i k_i)"),
        ("d_k", "d_{k}", "a width", "The query and key width, usually 64 or 128.", "histogram"),
    )),
    ("mean", "The score has mean 0", "§6.3", "ez == sum ep == zero",
     "Positive and negative products cancel on average.", (
        ("ez", "E[z]", "one number", "The score's average over random draws.", "proof:E(q·k)"),
        ("sum", "Σ_{i=1}^{d_{k}}", "d_k terms",
         "A sum over the d_k coordinates; an average of a sum is the sum of averages.",
         "proof:E(q·k)"),
        ("ep", "E[q_{i}]E[k_{i}]", "one number per i",
         "Independence splits the product's average into the averages of its factors.",
         "proof:E(q_i k_i)"),
        ("zero", "0", "one number", "Each factor averages 0, so every term is 0.",
         "proof:E(q_i)"),
    )),
    ("product", "One product has variance 1", "§6.3", "vp == sq == one",
     "Multiplying two independent unit-variance numbers keeps the variance at 1.", (
        ("vp", "Var(q_{i}k_{i})", "one number",
         "How much a single product q_i k_i spreads around its mean of 0.",
         "proof:Var(q_i k_i)"),
        ("sq", "E[q_{i}^{2}]E[k_{i}^{2}]", "one number",
         "With mean 0, the variance is the mean square; independence splits it in two.",
         "proof:Var(q_i)"),
        ("one", "1", "one number", "Each mean square is a variance of 1.",
         "proof:Var(q_i k_i)"),
    )),
    ("score-variance", "Variances add up to d_k", "§6.3", "vz == sum vp == d_k",
     "d_k terms of variance 1 give variance d_k.", (
        ("vz", "Var(z)", "one number", "The spread of a raw score.", "proof:Var(q·k)"),
        ("sum", "Σ_{i=1}^{d_{k}}", "d_k terms",
         "Independent terms: their variances simply add.", "proof:Var(q·k)"),
        ("vp", "Var(q_{i}k_{i})", "one number", "Each term's variance, 1.",
         "proof:Var(q_i k_i)"),
        ("d_k", "d_{k}", "a width", "The query and key width, usually 64 or 128.", "histogram"),
    )),
    ("sigma", "A typical score is √d_k", "§6.3", "sz == root == sqrt",
     "Wider heads give proportionally wider raw scores.", (
        ("sz", "σ_{z}", "one number",
         "The standard deviation: how far a score typically lands from 0.", "histogram"),
        ("root", "√Var(z)", "one number",
         "A standard deviation is the square root of the variance.", "histogram"),
        ("sqrt", "√d_{k}", "one number",
         f"So scores widen with the square root of the width: about ±{math.sqrt(64):g} at "
         f"d_k = 64 and ±{_SQRT_128:.1f} at 128.", "histogram"),
    )),
    ("scaled", "Scaling restores variance 1", "§6.3", "vs == inv vz == one",
     "One division undoes the growth, at every head width.", (
        ("vs", "Var(z/√d_{k})", "one number",
         "The spread after dividing each score by √d_k.", "proof:Var(q·k/√d_k)"),
        ("inv", "1/d_{k}", "one number",
         "Dividing a quantity by c divides its variance by c²; here c² = d_k.",
         "proof:Var(q·k/√d_k)"),
        ("vz", "Var(z)", "one number", "d_k, from the step before.", "proof:Var(q·k)"),
        ("one", "1", "one number",
         "Whatever the width, scaled scores spread like a unit normal.", "histogram"),
    )),
    ("gap-ratio", "A gap becomes a ratio", "§6.3", "ratio == exp =/ exp_b == eg",
     "Only the difference between two scores matters, and it matters exponentially.", (
        ("ratio", "p_{a}/p_{b}", "one number",
         "How many times key a's weight exceeds key b's in the same row.", "stepper:weights"),
        ("exp", "e^{s_{a}}", "one number",
         "Softmax gives each key e to its score, before dividing by the row's total.",
         "stepper:working"),
        ("exp_b", "e^{s_{b}}", "one number",
         "The other key's exponential; the row total cancels in the ratio.", "stepper:working"),
        ("eg", "e^{g}", "one number", "{gap}", "lab:saturation"),
    )),
    ("saturation-gradient", "Why saturation stalls learning", "§6.3", "dp == p =(1_− p2 =)",
     "A weight pinned near 0 or 1 barely responds to its score.", (
        ("dp", "∂p/∂s", "one number",
         "How much a key's weight moves when its own score is nudged: the signal learning "
         "follows.", "lab:gradient"),
        ("p", "p", "between 0 and 1", "That key's softmax weight.", "lab:saturation"),
        ("p2", "p", "between 0 and 1",
         f"The same weight again: when p is near 1 (say {_P}), 1 − p is near 0 and the "
         f"product is only {_P * (1 - _P):.4f}.", "lab:saturation"),
    )),
    ("causal", "The causal mask", "§6.4", "mc == zero =, inf",
     "Each token may look back, never ahead.", (
        ("mc", "M_{causal}", "N × M",
         "The mask matrix (not the key count M): added to the scaled scores, row i allowing "
         "keys 1 … i.", "stepper:masked"),
        ("zero", "0", "an entry",
         "On and below the diagonal: the pair is allowed and its score is untouched.",
         "stepper:masked"),
        ("inf", "−∞", "an entry",
         "Above the diagonal: a future key; e^−∞ = 0, so it gets no weight.", "stepper:masked"),
    ), ["Why causal: a model that writes text learns by guessing token i + 1 from tokens 1 … i. "
        "If row i could see token i + 1, the answer would sit in its own input and the model "
        "would learn to copy it instead of predicting it; when it writes, there is no future "
        "token to look at anyway.",
        "Why encoders use no mask: an encoder reads a finished text and predicts nothing after "
        "it, so every token may use the words on both sides (“bank” reads differently before "
        "“of the river” and before “account”)."]),
    ("permutation", "Attention ignores word order", "§6.5", "lhs == p rhs",
     "Shuffle the inputs and the outputs shuffle the same way, unchanged.", (
        ("lhs", "Attention(PX, PX, PX)", "N × d",
         "Attention on the tokens after shuffling them.", "permutation"),
        ("p", "P", "N × N", "A permutation matrix: it reorders rows.", "permutation"),
        ("rhs", "Attention(X, X, X)", "N × d",
         "Attention on the original order; shuffled afterwards it matches the left side.",
         "permutation"),
    )),
)  # fmt: skip


def _gap_words() -> str:
    gap = example_gap()
    return (
        f"g = s_a − s_b. The example's unmasked gap {gap:.3f} gives e^{gap:.3f} ≈ "
        f"{math.exp(gap):,.0f}."
    )


def reasoning_explainers() -> list:
    """§6.3 to §6.5's equations, in the chapter's order."""
    return explainers(_EQUATIONS, link_to, {"{gap}": _gap_words()})
