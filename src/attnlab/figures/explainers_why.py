"""Explainers of §6.3 to §6.5: the variance chain, the gap ratio, p(1 − p), the mask, word order.

Each symbol of the variance chain links to the proof's step that measures it (#why-proof).
"""

from __future__ import annotations

import math

from attnlab.figures.explainers import (
    HISTOGRAM,
    PERMUTATION,
    PROOF,
    STEPPER,
    Explainer,
    Link,
    example_gap,
    lab,
    parts,
    term,
)

__all__ = ["reasoning_explainers"]


def _proof_step(n: int, what: str) -> Link:
    return Link(PROOF, f"Measured in the proof, step {n}: {what}")


def _variance_chain() -> list[Explainer]:
    to_hist = Link(HISTOGRAM, "Watch the spread grow with d_k in the histogram")
    z = term(
        "z",
        "z",
        "one number",
        "A raw score q·k = Σ q_i k_i, a sum of d_k products.",
        _proof_step(5, "E(q·k)"),
    )
    dk = term("d_k", "d_{k}", "a width", "The query and key width, usually 64 or 128.", to_hist)
    return [
        Explainer(
            "score",
            "A raw score is a sum of d_k products",
            "§6.3",
            parts("z", "==", "qk", "==", "sum", "prod"),
            [
                z,
                term(
                    "qk",
                    "q^{⊤}k",
                    "one number",
                    "One query row dotted with one key row, before any scaling.",
                    Link(STEPPER, "See the raw scores", step="scores"),
                ),
                term(
                    "sum",
                    "Σ_{i=1}^{d_{k}}",
                    "d_k terms",
                    "Add up over the d_k coordinates.",
                    _proof_step(5, "E(q·k)"),
                ),
                term(
                    "prod",
                    "q_{i}k_{i}",
                    "one number per i",
                    "Coordinate i of the query "
                    "times coordinate i of the key; at initialisation each factor is a "
                    "random number with mean 0 and variance 1.",
                    _proof_step(3, "E(q_i k_i)"),
                ),
                dk,
            ],
            "Each score is d_k small random products added together.",
        ),
        Explainer(
            "mean",
            "The score has mean 0",
            "§6.3",
            parts("ez", "==", "sum", "ep", "==", "zero"),
            [
                term(
                    "ez",
                    "E[z]",
                    "one number",
                    "The score's average over random draws.",
                    _proof_step(5, "E(q·k)"),
                ),
                term(
                    "sum",
                    "Σ_{i=1}^{d_{k}}",
                    "d_k terms",
                    "A sum over the d_k coordinates; an average of a sum is the sum of averages.",
                    _proof_step(5, "E(q·k)"),
                ),
                term(
                    "ep",
                    "E[q_{i}]E[k_{i}]",
                    "one number per i",
                    "Independence splits the product's average into the averages of its factors.",
                    _proof_step(3, "E(q_i k_i)"),
                ),
                term(
                    "zero",
                    "0",
                    "one number",
                    "Each factor averages 0, so every term is 0.",
                    _proof_step(1, "E(q_i)"),
                ),
            ],
            "Positive and negative products cancel on average.",
        ),
        Explainer(
            "product",
            "One product has variance 1",
            "§6.3",
            parts("vp", "==", "sq", "==", "one"),
            [
                term(
                    "vp",
                    "Var(q_{i}k_{i})",
                    "one number",
                    "How much a single product q_i k_i spreads around its mean of 0.",
                    _proof_step(4, "Var(q_i k_i)"),
                ),
                term(
                    "sq",
                    "E[q_{i}^{2}]E[k_{i}^{2}]",
                    "one number",
                    "With mean 0, the variance is the mean square; independence splits it in two.",
                    _proof_step(2, "Var(q_i)"),
                ),
                term(
                    "one",
                    "1",
                    "one number",
                    "Each mean square is a variance of 1.",
                    _proof_step(4, "Var(q_i k_i)"),
                ),
            ],
            "Multiplying two independent unit-variance numbers keeps the variance at 1.",
        ),
        Explainer(
            "score-variance",
            "Variances add up to d_k",
            "§6.3",
            parts("vz", "==", "sum", "vp", "==", "d_k"),
            [
                term(
                    "vz",
                    "Var(z)",
                    "one number",
                    "The spread of a raw score.",
                    _proof_step(6, "Var(q·k)"),
                ),
                term(
                    "sum",
                    "Σ_{i=1}^{d_{k}}",
                    "d_k terms",
                    "Independent terms: their variances simply add.",
                    _proof_step(6, "Var(q·k)"),
                ),
                term(
                    "vp",
                    "Var(q_{i}k_{i})",
                    "one number",
                    "Each term's variance, 1.",
                    _proof_step(4, "Var(q_i k_i)"),
                ),
                dk,
            ],
            "d_k terms of variance 1 give variance d_k.",
        ),
        Explainer(
            "sigma",
            "A typical score is √d_k",
            "§6.3",
            parts("sz", "==", "root", "==", "sqrt"),
            [
                term(
                    "sz",
                    "σ_{z}",
                    "one number",
                    "The standard deviation: how far a score typically lands from 0.",
                    to_hist,
                ),
                term(
                    "root",
                    "√Var(z)",
                    "one number",
                    "A standard deviation is the square root of the variance.",
                    to_hist,
                ),
                term(
                    "sqrt",
                    "√d_{k}",
                    "one number",
                    "So scores widen with the square root "
                    f"of the width: about ±{math.sqrt(64):g} at d_k = 64 and "
                    f"±{math.sqrt(128):.1f} at 128.",
                    to_hist,
                ),
            ],
            "Wider heads give proportionally wider raw scores.",
        ),
        Explainer(
            "scaled",
            "Scaling restores variance 1",
            "§6.3",
            parts("vs", "==", "inv", "vz", "==", "one"),
            [
                term(
                    "vs",
                    "Var(z/√d_{k})",
                    "one number",
                    "The spread after dividing each score by √d_k.",
                    _proof_step(7, "Var(q·k/√d_k)"),
                ),
                term(
                    "inv",
                    "1/d_{k}",
                    "one number",
                    "Dividing a quantity by c divides its variance by c²; here c² = d_k.",
                    _proof_step(7, "Var(q·k/√d_k)"),
                ),
                term(
                    "vz",
                    "Var(z)",
                    "one number",
                    "d_k, from the step before.",
                    _proof_step(6, "Var(q·k)"),
                ),
                term(
                    "one",
                    "1",
                    "one number",
                    "Whatever the width, scaled scores spread like a unit normal.",
                    to_hist,
                ),
            ],
            "One division undoes the growth, at every head width.",
        ),
    ]


def _gap_and_gradient() -> list[Explainer]:
    gap = example_gap()
    to_sat = lab("saturation", "Run the saturation lab: how often one key takes over 99%")
    ratio = Explainer(
        "gap-ratio",
        "A gap becomes a ratio",
        "§6.3",
        parts("ratio", "==", "exp", "=/", "exp_b", "==", "eg"),
        [
            term(
                "ratio",
                "p_{a}/p_{b}",
                "one number",
                "How many times key a's weight exceeds key b's in the same row.",
                Link(STEPPER, "See the weights", step="weights"),
            ),
            term(
                "exp",
                "e^{s_{a}}",
                "one number",
                "Softmax gives each key e to its score, before dividing by the row's total.",
                Link(STEPPER, "See the working", step="weights"),
            ),
            term(
                "exp_b",
                "e^{s_{b}}",
                "one number",
                "The other key's exponential; the row total cancels in the ratio.",
                Link(STEPPER, "See the working", step="weights"),
            ),
            term(
                "eg",
                "e^{g}",
                "one number",
                f"g = s_a − s_b. The example's unmasked gap "
                f"{gap:.3f} gives e^{gap:.3f} ≈ {math.exp(gap):,.0f}.",
                to_sat,
            ),
        ],
        "Only the difference between two scores matters, and it matters exponentially.",
    )
    grad = Explainer(
        "saturation-gradient",
        "Why saturation stalls learning",
        "§6.3",
        parts("dp", "==", "p", "=(1 −", "p2", "=)"),
        [
            term(
                "dp",
                "∂p/∂s",
                "one number",
                "How much a key's weight moves when its own score "
                "is nudged: the signal learning follows.",
                lab("gradient", "Run the gradient lab"),
            ),
            term("p", "p", "between 0 and 1", "That key's softmax weight.", to_sat),
            term(
                "p2",
                "p",
                "between 0 and 1",
                f"The same weight again: when p is near 1 (say "
                f"{0.99}), 1 − p is near 0 and the product is only {0.99 * (1 - 0.99):.4f}.",
                to_sat,
            ),
        ],
        "A weight pinned near 0 or 1 barely responds to its score.",
    )
    return [ratio, grad]


def _masks_and_order() -> list[Explainer]:
    to_step = Link(STEPPER, "Toggle the causal mask in the stepper", step="masked")
    to_perm = Link(PERMUTATION, "Shuffle the tokens in the word-order figure")
    return [
        Explainer(
            "causal",
            "The causal mask",
            "§6.4",
            parts("mc", "==", "zero", "=,", "inf"),
            [
                term(
                    "mc",
                    "M_{causal}",
                    "N × M",
                    "The mask matrix (not the key count M): "
                    "added to the scaled scores, row i allowing keys 1 … i.",
                    to_step,
                ),
                term(
                    "zero",
                    "0",
                    "an entry",
                    "On and below the diagonal: the pair is allowed and its score is untouched.",
                    to_step,
                ),
                term(
                    "inf",
                    "−∞",
                    "an entry",
                    "Above the diagonal: a future key; e^−∞ = 0, so it gets no weight.",
                    to_step,
                ),
            ],
            "Each token may look back, never ahead.",
        ),
        Explainer(
            "permutation",
            "Attention ignores word order",
            "§6.5",
            parts("lhs", "==", "p", "rhs"),
            [
                term(
                    "lhs",
                    "Attention(PX, PX, PX)",
                    "N × d",
                    "Attention on the tokens after shuffling them.",
                    to_perm,
                ),
                term("p", "P", "N × N", "A permutation matrix: it reorders rows.", to_perm),
                term(
                    "rhs",
                    "Attention(X, X, X)",
                    "N × d",
                    "Attention on the original order; "
                    "shuffled afterwards it matches the left side.",
                    to_perm,
                ),
            ],
            "Shuffle the inputs and the outputs shuffle the same way, unchanged.",
        ),
    ]


def reasoning_explainers() -> list[Explainer]:
    """§6.3 to §6.5's equations, in the chapter's order."""
    return [*_variance_chain(), *_gap_and_gradient(), *_masks_and_order()]
