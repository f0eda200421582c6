"""The equation explainers: each symbol of Attention(Q, K, V) = softmax(QKᵀ/√d_k + M) V, and
(``build_equations``) of every other equation of the chapter.

Each symbol says what it is, its shape in the chapter's letters (N queries, M keys, d_k, d_v),
and where on the page it can be seen: a figure anchor and, for the stepper, the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.figures._data import as_dict
from attnlab.figures.explainers import FIGURE_OF, Explainer, Link, Term, parts
from attnlab.figures.explainers_example import example_explainers
from attnlab.figures.explainers_mha import multihead_explainers
from attnlab.figures.explainers_why import reasoning_explainers

__all__ = ["SYMBOLS", "EquationFigure", "Symbol", "build_equation", "build_equations"]


@dataclass(frozen=True)
class Symbol:
    id: str
    text: str  # as written in the equation
    name: str
    what: str
    shape: str
    target: str  # the id of the page element that shows it
    step: str  # the stepper step that shows it, or ""


SYMBOLS: tuple[Symbol, ...] = (
    Symbol(
        "attention",
        "Attention(Q, K, V)",
        "the attention output",
        "One new vector per query: a blend of value rows, weighted by how well that query "
        "matched each key.",
        "N × d_v",
        "figure-attention-stepper",
        "output",
    ),
    Symbol(
        "softmax",
        "softmax",
        "row-wise softmax",
        "Turns each row of adjusted scores into weights that are at least 0 and add up to 1; "
        "the largest score gets the largest share.",
        "N × M in, N × M out",
        "figure-attention-stepper",
        "weights",
    ),
    Symbol(
        "q",
        "Q",
        "queries",
        "One row per token that is asking: what that token is searching for.",
        "N × d_k",
        "figure-attention-stepper",
        "inputs",
    ),
    Symbol(
        "kt",
        "Kᵀ",
        "keys, transposed",
        "Each key row advertises its token to the queries; flipping K on its side puts one key "
        "in each column, so a single product Q Kᵀ pairs every query with every key.",
        "K is M × d_k, so Kᵀ is d_k × M",
        "figure-attention-stepper",
        "scores",
    ),
    Symbol(
        "sqrt-dk",
        "√d_k",
        "√ of d_k, the width shared by queries and keys",
        "Dividing by it brings the spread of the scores back to about 1, whatever the width: "
        "a raw score's variance grows in step with d_k.",
        "a single number (d_k = width of a query or key)",
        "figure-sqrt-dk-histogram",
        "scaled",
    ),
    Symbol(
        "mask",
        "M",
        "the mask",
        "Added to the scaled scores: 0 where a query may look at a key, −∞ where it may not, "
        "so forbidden pairs end with weight exactly 0.",
        "N × M",
        "figure-attention-stepper",
        "masked",
    ),
    Symbol(
        "v",
        "V",
        "values",
        "One row per key: the information a token passes on when a query gives it weight.",
        "M × d_v",
        "figure-attention-stepper",
        "output",
    ),
)


@dataclass(frozen=True)
class EquationFigure:
    figure: str
    latex: str
    symbols: list[Symbol]

    def as_dict(self) -> dict:
        return as_dict(self)


def build_equation() -> EquationFigure:
    """The symbols of the attention equation, in the order they are written.

    >>> [s.text for s in build_equation().symbols][:3]
    ['Attention(Q, K, V)', 'softmax', 'Q']
    """
    return EquationFigure(
        figure="equation",
        latex=r"\operatorname{Attention}(Q,K,V)=\operatorname{softmax}(QK^\top/\sqrt{d_k}+M)V",
        symbols=list(SYMBOLS),
    )


# The main equation's symbols in the explainers' markup (build_equation keeps the plain text).
_MARKUP = {"kt": "K^{⊤}", "sqrt-dk": "√d_{k}"}
_LINK_LABEL = {
    "figure-attention-stepper": "See it in the stepper, step “{step}”",
    "figure-sqrt-dk-histogram": "See it in the √d_k histogram",
}
_NOTES = [
    "The letter M means two things: in a shape (N × M) it counts the keys; added to the scores "
    "(+ M) it is the N × M mask.",
    "d_k, the width of a query and of a key, is usually 64 or 128 in real models; d_v is the "
    "width of a value.",
]


def _main_explainer() -> Explainer:
    def term(s: Symbol) -> Term:
        label = _LINK_LABEL[s.target].format(step=s.step)
        meaning = f"{s.name[0].upper()}{s.name[1:]}. {s.what}"
        link = Link(f"#{s.target}", label, step=s.step if "stepper" in s.target else "")
        return Term(s.id, _MARKUP.get(s.id, s.text), s.shape, meaning, link)

    return Explainer(
        "attention",
        "Scaled dot-product attention",
        "§6.2",
        parts(
            "attention", "==", "softmax", "=(", "q", "kt", "=/", "sqrt-dk", "=+", "mask", "=)", "v"
        ),
        [term(s) for s in SYMBOLS],
        "Score every query against every key, scale, mask, turn each row into weights, and "
        "average the values with them.",
        list(_NOTES),
        FIGURE_OF["§6.2"],
    )


def build_equations() -> list[Explainer]:
    """Every equation of the chapter, each symbol with its shape, meaning and a live link.

    >>> [e.id for e in build_equations()][:3]
    ['attention', 'projections', 'copy']
    """
    return [
        _main_explainer(),
        *example_explainers(),
        *reasoning_explainers(),
        *multihead_explainers(),
    ]
