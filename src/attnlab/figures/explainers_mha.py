"""Explainers of §6.6: one head, joining the heads with W^O, the cost model and its crossover.

Shape legend: N queries, M keys, h heads, d_k = d_v = d_model / h; numbers from attnlab.cost.

Each equation is one entry of ``_EQUATIONS`` and each symbol one row (id, text, shape, meaning,
link name), as in ``explainers_why.py``; the numbers quoted come from the cost model when the
explainers are built (the meanings in braces).
"""

from __future__ import annotations

import numpy as np

import attnlab
from attnlab.core.softmax import softmax
from attnlab.figures.explainers import MULTI, STEPPER, Link, explainers, lab
from attnlab.figures.multihead import D_MODEL as FIGURE_D_MODEL
from attnlab.figures.multihead import D_V as FIGURE_D_V
from attnlab.figures.multihead import HEADS as FIGURE_HEADS
from attnlab.figures.multihead import SENTENCE

__all__ = ["multihead_explainers"]

D_MODEL, HEADS = 512, 8  # the original Transformer's width and heads, quoted in the notes
_STRONG = 4.0  # a link's score, as strong as the multi-head figure's hand-set ones

_LINKS = {
    "multi": Link(MULTI, "See four heads at work in the multi-head figure"),
    "stepper": Link(STEPPER, "Step through one attention call", step="weights"),
    "cost": lab("cost", "Run the cost lab: both terms for any N and d_model"),
}

# (id, title, section, parts, the sentence, symbols, notes); a symbol is
# (id, text, shape, meaning, link name).
_EQUATIONS = (
    ("head", "One head", "§6.6", "head_i == attention =( q w_q =, k w_k =, v w_v =)",
     "Each head projects queries, keys and values with matrices of its own, then runs plain "
     "attention in that smaller space.", (
        ("head_i", "head_{i}", "N × d_v",
         "What head i hands back: one short vector per query, from an ordinary attention call "
         "on its own projections.", "multi"),
        ("attention", "Attention", "N × d_v out",
         "The same scaled, masked softmax average as the main equation, run once per head.",
         "stepper"),
        ("q", "Q", "N × d_model",
         "The token vectors asking (in self-attention, the sentence itself), before any head "
         "has projected them.", "multi"),
        ("w_q", "W_{i}^{Q}", "d_model × d_k",
         "Head i's own query projection: it decides what this head searches for.", "multi"),
        ("k", "K", "M × d_model", "The token vectors being looked at, before projection.",
         "multi"),
        ("w_k", "W_{i}^{K}", "d_model × d_k",
         "Head i's key projection: what each token advertises to this head.", "multi"),
        ("v", "V", "M × d_model", "The token vectors whose content can be passed on.", "multi"),
        ("w_v", "W_{i}^{V}", "d_model × d_v",
         "Head i's value projection: which part of each token this head can copy.", "multi"),
     ), [f"Usually d_k = d_v = d_model / h: with h = {HEADS} and d_model = {D_MODEL}, each head "
         f"is {D_MODEL // HEADS} wide.", "{several}"]),
    ("multihead", "Joining the heads", "§6.6", "multihead == concat w_o =,_with h =heads",
     "Concatenate what every head found, then let one learned matrix blend it.", (
        ("multihead", "MultiHead(Q, K, V)", "N × d_model",
         "The layer's output: one vector per query at the model's full width.", "multi"),
        ("concat", "[head_{1}; …; head_{h}]", "N × (h·d_v)",
         "The h head outputs laid side by side along the feature axis; head i fills its own "
         "block of columns.", "multi"),
        ("h", "h", "a count",
         f"How many heads run side by side ({HEADS} in the original Transformer, four in the "
         "figure).", "multi"),
        ("w_o", "W^{O}", "(h·d_v) × d_model",
         "The output projection: each output feature reads every head's block, so the heads' "
         "findings are mixed and written back at model width.", "multi"),
     ), ["[ ; ] means joining along the feature axis, not adding.", "{anywhere}", "{shape}"]),
    ("cost", "The cost of multi-head attention", "§6.6", "flops == linear =+ quadratic",
     "A part that grows with the length and a part that grows with its square.", (
        ("flops", "FLOPs_{MHA}", "one count",
         "Multiply-adds for one layer of multi-head attention over N tokens (the small softmax "
         "left out).", "cost"),
        ("linear", "4Nd_{model}^{2}", "grows like N",
         "The four projections: Q, K, V and W^O, each an (N × d_model)(d_model × d_model) "
         "product.", "cost"),
        ("quadratic", "2N^{2}d_{model}", "grows like N²",
         "QKᵀ and the weighted sum AV, each N·N·d_k per head; over h heads h·d_k = d_model.",
         "cost"),
        ("n", "N", "a count", "Tokens in the sequence.", "cost"),
        ("d", "d_{model}", "a width", "The model width, h·d_k.", "cost"),
     ), ["{balance}"]),
    ("crossover", "Where the N² term takes over", "§6.6", "quadratic => linear =⇔ n => twice",
     "Past twice the model width, the N × N table costs more than every projection together.", (
        ("quadratic", "2N^{2}d_{model}", "grows like N²", "The score table's cost.", "cost"),
        ("linear", "4Nd_{model}^{2}", "grows like N", "The projections' cost.", "cost"),
        ("n", "N", "a count", "The sequence length.", "cost"),
        ("twice", "2d_{model}", "a length", "{crossover}", "cost"),
     )),
)  # fmt: skip


def _cost_words() -> dict[str, str]:
    cross = attnlab.cost.crossover_length(D_MODEL)
    at = attnlab.cost.breakdown(cross, D_MODEL)
    return {
        "{balance}": f"At d_model = {D_MODEL} and N = {cross:,} the two terms are equal: "
        f"{at.projections + at.output_projection:,} each.",
        "{crossover}": "Divide both sides by 2N·d_model: the crossover length, "
        f"{cross:,} tokens at d_model = {D_MODEL} and "
        f"{attnlab.cost.crossover_length(4096):,} at 4096.",
    }


def _head_words() -> dict[str, str]:
    """Why several heads, and W^O's second reason, with the multi-head figure's own sizes."""
    it = SENTENCE.index("it")
    row = np.zeros(len(SENTENCE))  # (N,) one head asked to do two heads' jobs for "it"
    row[[SENTENCE.index("animal"), SENTENCE.index("because")]] = _STRONG
    both = softmax(row)  # (N,)
    h, d_v = len(FIGURE_HEADS), FIGURE_D_V
    return {
        "{several}": "Why several heads: one softmax gives each query one set of weights. "
        f"Asked to link “it” both to the word before it and to the noun it stands for, one head "
        f"can only split: scores of {_STRONG:g} on “because” and on “animal” give each "
        f"{both[SENTENCE.index('animal')]:.2f} of the weight, and “{SENTENCE[it]}” receives one "
        "blurred average of the two values, neither relation intact. Separate heads keep "
        "each relation sharp.",
        "{anywhere}": "W^O's second reason: every layer adds its output to the token's vector "
        "(the residual stream), and W^O lets each head write in any direction of that "
        "d_model-wide vector, not only into its own d_v columns.",
        "{shape}": f"It also fixes the width when h·d_v ≠ d_model: the figure's {h} heads of "
        f"d_v = {d_v} join into {h * d_v} columns, and its W^O "
        f"({h * d_v} × {FIGURE_D_MODEL}) brings them back to d_model = {FIGURE_D_MODEL}.",
    }


def multihead_explainers() -> list:
    """§6.6's equations: a head, the concatenation with W^O, the cost and its crossover."""
    return explainers(_EQUATIONS, _LINKS.__getitem__, _cost_words() | _head_words())
