"""The explainers' data types: an equation as parts in reading order, each symbol with a link.

Shape legend: N queries, M keys, d_k query/key width, d_v value width, h heads, d_model model
width. Symbol text uses a small markup the page renders: ``_{i}`` a subscript, ``^{Q}`` a
superscript. Every number quoted in a meaning is computed here from attnlab (the cost model, the
worked example's trace), never typed in.

Each explainer lists its ``parts`` in reading order (an operator's text, or a symbol's id) and its
symbols: what each is, its shape, and a link to the figure or lab that shows it live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import attnlab
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.figures._data import as_dict

__all__ = [
    "FIGURE_OF",
    "Explainer",
    "Link",
    "Term",
    "example_gap",
    "explainers",
    "lab",
    "parts",
    "term",
]


@dataclass(frozen=True)
class Link:
    href: str  # an anchor of the page: a figure, the labs, or the proof in "The why"
    label: str
    step: str = ""  # the stepper step to open, when href is the stepper
    lab: str = ""  # the lab to select, when href is #labs


@dataclass(frozen=True)
class Term:
    id: str
    text: str  # as written, in the markup above
    shape: str
    meaning: str
    link: Link


@dataclass(frozen=True)
class Explainer:
    id: str
    title: str
    section: str  # the chapter section it comes from
    parts: list[dict]  # [{"op": "="}, {"sym": "q"}, ...] in reading order
    symbols: list[Term]
    words: str  # the equation said in a sentence
    notes: list[str] = field(default_factory=list)
    figure: str = ""  # the anchor of the figure it is shown beside (``FIGURE_OF`` its section)

    def as_dict(self) -> dict:
        return as_dict(self)


def term(id: str, text: str, shape: str, meaning: str, link: Link) -> Term:
    return Term(id, text, shape, meaning, link)


def parts(*items: str) -> list[dict]:
    """``"=op"``-style strings are operators (leading ``=`` stripped); others are symbol ids."""
    return [{"op": x[1:]} if x.startswith("=") else {"sym": x} for x in items]


def _parts(spec: str) -> list[dict]:
    """ "a == b =/ c": symbols a, b and c with the operators "=" and "/" between them; "_" is a
    space inside an operator ("=(1_−" is "(1 −")."""
    items = spec.split()
    return parts(*(x.replace("_", " ") if x.startswith("=") else x for x in items))


def explainers(equations, link_to, words: dict[str, str] | None = None) -> list[Explainer]:
    """Explainers from rows of data: (id, title, section, parts, sentence, symbols[, notes]),
    each symbol (id, text, shape, meaning, link name). ``link_to(name)`` makes a link, and a
    meaning or note that is a key of ``words`` is replaced by its value (text computed when
    asked)."""
    words = words or {}
    out = []
    for id, title, section, spec, sentence, symbols, *notes in equations:
        terms = [term(s, text, shape, words.get(meaning, meaning), link_to(to))
                 for s, text, shape, meaning, to in symbols]  # fmt: skip
        said = [words.get(n, n) for n in (notes[0] if notes else [])]
        out.append(
            Explainer(id, title, section, _parts(spec), terms, sentence, said, FIGURE_OF[section])
        )
    return out


STEPPER = "#figure-attention-stepper"
HISTOGRAM = "#figure-sqrt-dk-histogram"
MULTI = "#figure-multi-head"
PERMUTATION = "#figure-permutation-demo"
PROOF = "#why-proof"
# Each section's equations sit beside the figure that shows them working; the masks (§6.4) are
# toggled in the stepper.
FIGURE_OF = {
    "§6.2": STEPPER,
    "§6.3": HISTOGRAM,
    "§6.4": STEPPER,
    "§6.5": PERMUTATION,
    "§6.6": MULTI,
}


def lab(name: str, label: str) -> Link:
    return Link("#labs", label, lab=name)


def example_gap() -> float:
    """The gap between token 1's two scaled scores in §6.2's example: 18/√2 ≈ 12.728."""
    trace = attnlab.trace_attention(EXAMPLE_Q, EXAMPLE_K, EXAMPLE_V)
    row = trace.scaled[0]  # (M,)
    return float(row.max() - row.min())
