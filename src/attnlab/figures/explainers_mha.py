"""Explainers of §6.6: one head, joining the heads with W^O, the cost model and its crossover.

Shape legend: N queries, M keys, h heads, d_k = d_v = d_model / h; numbers from attnlab.cost.
"""

from __future__ import annotations

import attnlab
from attnlab.figures.explainers import (
    MULTI,
    STEPPER,
    Explainer,
    Link,
    lab,
    parts,
    term,
)

__all__ = ["multihead_explainers"]


def _multihead() -> list[Explainer]:
    to_multi = Link(MULTI, "See four heads at work in the multi-head figure")
    d_model, h = 512, 8
    per_head = d_model // h
    head = Explainer(
        "head",
        "One head",
        "§6.6",
        parts(
            "head_i", "==", "attention", "=(", "q", "w_q", "=,", "k", "w_k", "=,", "v", "w_v", "=)"
        ),
        [
            term(
                "head_i",
                "head_{i}",
                "N × d_v",
                "What head i hands back: one short vector per "
                "query, from an ordinary attention call on its own projections.",
                to_multi,
            ),
            term(
                "attention",
                "Attention",
                "N × d_v out",
                "The same scaled, masked softmax average as the main equation, run once per head.",
                Link(STEPPER, "Step through one attention call", step="weights"),
            ),
            term(
                "q",
                "Q",
                "N × d_model",
                "The token vectors asking (in self-attention, the "
                "sentence itself), before any head has projected them.",
                to_multi,
            ),
            term(
                "w_q",
                "W_{i}^{Q}",
                "d_model × d_k",
                "Head i's own query projection: it decides what this head searches for.",
                to_multi,
            ),
            term(
                "k",
                "K",
                "M × d_model",
                "The token vectors being looked at, before projection.",
                to_multi,
            ),
            term(
                "w_k",
                "W_{i}^{K}",
                "d_model × d_k",
                "Head i's key projection: what each token advertises to this head.",
                to_multi,
            ),
            term(
                "v",
                "V",
                "M × d_model",
                "The token vectors whose content can be passed on.",
                to_multi,
            ),
            term(
                "w_v",
                "W_{i}^{V}",
                "d_model × d_v",
                "Head i's value projection: which part of each token this head can copy.",
                to_multi,
            ),
        ],
        "Each head projects queries, keys and values with matrices of its own, then runs plain "
        "attention in that smaller space.",
        [
            f"Usually d_k = d_v = d_model / h: with h = {h} and d_model = {d_model}, each head is "
            f"{per_head} wide."
        ],
    )
    multi = Explainer(
        "multihead",
        "Joining the heads",
        "§6.6",
        parts("multihead", "==", "concat", "w_o", "=, with", "h", "=heads"),
        [
            term(
                "multihead",
                "MultiHead(Q, K, V)",
                "N × d_model",
                "The layer's output: one vector per query at the model's full width.",
                to_multi,
            ),
            term(
                "concat",
                "[head_{1}; …; head_{h}]",
                "N × (h·d_v)",
                "The h head outputs laid "
                "side by side along the feature axis; head i fills its own block of columns.",
                to_multi,
            ),
            term(
                "h",
                "h",
                "a count",
                f"How many heads run side by side ({h} in the original "
                "Transformer, four in the figure).",
                to_multi,
            ),
            term(
                "w_o",
                "W^{O}",
                "(h·d_v) × d_model",
                "The output projection: each output feature "
                "reads every head's block, so the heads' findings are mixed and written back at "
                "model width.",
                to_multi,
            ),
        ],
        "Concatenate what every head found, then let one learned matrix blend it.",
        ["[ ; ] means joining along the feature axis, not adding."],
    )
    return [head, multi]


def _cost() -> list[Explainer]:
    d = 512
    cross = attnlab.cost.crossover_length(d)
    at = attnlab.cost.breakdown(cross, d)
    to_cost = lab("cost", "Run the cost lab: both terms for any N and d_model")
    flops = Explainer(
        "cost",
        "The cost of multi-head attention",
        "§6.6",
        parts("flops", "==", "linear", "=+", "quadratic"),
        [
            term(
                "flops",
                "FLOPs_{MHA}",
                "one count",
                "Multiply-adds for one layer of "
                "multi-head attention over N tokens (the small softmax left out).",
                to_cost,
            ),
            term(
                "linear",
                "4Nd_{model}^{2}",
                "grows like N",
                "The four projections: Q, K, V and "
                "W^O, each an (N × d_model)(d_model × d_model) product.",
                to_cost,
            ),
            term(
                "quadratic",
                "2N^{2}d_{model}",
                "grows like N²",
                "QKᵀ and the weighted sum AV, each N·N·d_k per head; over h heads h·d_k = d_model.",
                to_cost,
            ),
            term("n", "N", "a count", "Tokens in the sequence.", to_cost),
            term("d", "d_{model}", "a width", "The model width, h·d_k.", to_cost),
        ],
        "A part that grows with the length and a part that grows with its square.",
        [
            f"At d_model = {d} and N = {cross:,} the two terms are equal: "
            f"{at.projections + at.output_projection:,} each."
        ],
    )
    crossover = Explainer(
        "crossover",
        "Where the N² term takes over",
        "§6.6",
        parts("quadratic", "=>", "linear", "=⇔", "n", "=>", "twice"),
        [
            term(
                "quadratic", "2N^{2}d_{model}", "grows like N²", "The score table's cost.", to_cost
            ),
            term("linear", "4Nd_{model}^{2}", "grows like N", "The projections' cost.", to_cost),
            term("n", "N", "a count", "The sequence length.", to_cost),
            term(
                "twice",
                "2d_{model}",
                "a length",
                "Divide both sides by 2N·d_model: the "
                f"crossover length, {cross:,} tokens at d_model = {d} and "
                f"{attnlab.cost.crossover_length(4096):,} at 4096.",
                to_cost,
            ),
        ],
        "Past twice the model width, the N × N table costs more than every projection together.",
    )
    return [flops, crossover]


def multihead_explainers() -> list[Explainer]:
    """§6.6's equations: a head, the concatenation with W^O, the cost and its crossover."""
    return [*_multihead(), *_cost()]
