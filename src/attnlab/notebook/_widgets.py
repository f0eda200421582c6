"""The four figures as anywidget widgets: state in checked traits, views computed in the kernel.

Each widget keeps its controls as traits (``step``, ``causal``, ``d_k`` ...) that a cell can read
and set. Every value is checked before it is stored (``_base.Figure``): a bad one is refused with
a ``WidgetValueError`` and the widget keeps its last good state. An accepted change recomputes
``view`` (plain data) with the explorer's figure builders, and ``widgets.js`` draws it.
"""

from __future__ import annotations

import zlib

import numpy as np
import traitlets as t

from attnlab.api.attention import attention
from attnlab.core.positions import sinusoidal
from attnlab.errors import AttnlabError
from attnlab.figures import histogram as _hist
from attnlab.figures import multihead as _mh
from attnlab.figures import permutation as _perm
from attnlab.figures import stepper as _step
from attnlab.notebook._base import Checked, Figure
from attnlab.notebook._checks import flag, index_pairs, number_matrix, whole_number
from attnlab.notebook._views import stepper_view, with_text

__all__ = ["HistogramWidget", "MultiHeadWidget", "PermutationWidget", "StepperWidget"]

STEPS = len(_step.build_stepper().steps)  # inputs, scores ... output, then dV ... dK: 11
MAX_WORDS = 12
MAX_WORD_CHARS = 40
SEED_MAX = 2**32 - 1  # numpy takes any seed >= 0; this one a browser's numbers hold exactly

_FIGURE_TRAITS = ("q", "k", "v", "causal", "scaled", "blocked", "grad_output")


def _stepper_figure(state: dict) -> dict:
    return _step.build_stepper(
        state["q"], state["k"], state["v"], causal=state["causal"], scaled=state["scaled"],
        blocked=state["blocked"], grad_output=state["grad_output"],
    ).as_dict()  # fmt: skip


def _start(widget: Figure, controls: list[dict], traits) -> None:
    """Publish ``widget``'s controls, recompute its view whenever one of ``traits`` changes,
    and compute the first view."""
    widget.set_trait("controls", controls)
    widget.observe(widget._refresh, names=list(traits))
    widget._refresh()


class StepperWidget(Figure):
    """Figure attention-stepper: attention on a small case, one table-producing step at a time.

    ``step`` counts from 1, as the heading does: 1-6 the forward pass, 7-11 the backward one.
    """

    step = Checked(1).tag(sync=True)
    causal = Checked(True).tag(sync=True)
    scaled = Checked(True).tag(sync=True)
    q = Checked(number_matrix("q", _step.EXAMPLE_Q)).tag(sync=True)
    k = Checked(number_matrix("k", _step.EXAMPLE_K)).tag(sync=True)
    v = Checked(number_matrix("v", _step.EXAMPLE_V)).tag(sync=True)
    blocked = Checked([]).tag(sync=True)  # [i, j] pairs (0-based) blocked by hand
    grad_output = Checked(None).tag(sync=True)  # dO, (N, d_v); None: all ones

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        controls = [
            {"name": "step", "label": "step", "type": "int", "min": 1, "max": STEPS},
            {"name": "causal", "label": "causal mask", "type": "bool"},
            {"name": "scaled", "label": "scale by 1/√d_k", "type": "bool"},
        ]
        self.observe(self._show, names=["step"])
        _start(self, controls, _FIGURE_TRAITS)

    _check = t.validate("step", *_FIGURE_TRAITS)(Figure._checked)

    def _clean(self, name: str, value):
        if name == "step":
            return whole_number("step", value, 1, STEPS)
        if name in ("causal", "scaled"):
            value = flag(name, value)
        elif name == "blocked":
            value = index_pairs(name, value)
        elif value is not None or name != "grad_output":
            value = number_matrix(name, value)
        # The new value with the others as they stand (inside hold_trait_notifications: as they
        # will stand): the builder names any misfit, so what is stored always draws.
        _stepper_figure({n: getattr(self, n) for n in _FIGURE_TRAITS} | {name: value})
        return value

    def _refresh(self, change=None) -> None:
        self._figure = _stepper_figure({n: getattr(self, n) for n in _FIGURE_TRAITS})
        self._show()

    def _show(self, change=None) -> None:
        self.set_trait("view", stepper_view(self._figure, self.step))


class HistogramWidget(Figure):
    """Figure sqrt-dk-histogram: random scores at width d_k, scaled or not, and saturation."""

    d_k = Checked(_hist.D_K_DEFAULT).tag(sync=True)
    scaled = Checked(False).tag(sync=True)
    seed = Checked(0).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        controls = [
            {"name": "d_k", "label": "d_k", "type": "int", "min": _hist.D_K_MIN,
             "max": _hist.D_K_MAX, "step": _hist.D_K_STEP},
            {"name": "scaled", "label": "scale by 1/√d_k", "type": "bool"},
        ]  # fmt: skip
        _start(self, controls, ["d_k", "scaled", "seed"])

    _check = t.validate("d_k", "scaled", "seed")(Figure._checked)

    def _clean(self, name: str, value):
        if name == "d_k":
            return whole_number("d_k", value, _hist.D_K_MIN, _hist.D_K_MAX)
        if name == "seed":
            return whole_number("seed", value, 0, SEED_MAX)
        return flag(name, value)

    def _refresh(self, change=None) -> None:
        fig = _hist.build_histogram(self.d_k, scaled=self.scaled, seed=self.seed)
        which = "scaled" if fig.scaled else "unscaled"
        view = {
            "kind": "histogram",
            "title": f"Scores q·k at d_k = {fig.d_k}, {which}",
            "lines": [
                f"spread σ = {fig.std:.3f} (the proof predicts {fig.predicted_std:.3f})",
                f"softmax over {fig.keys} keys: p_max > {fig.threshold} in "
                f"{fig.unscaled_share:.1%} of unscaled trials, {fig.scaled_share:.1%} scaled",
            ],
            "histogram": {"counts": fig.counts, "edges": fig.edges, "label": f"{which} scores"},
        }
        self.set_trait("view", view)


def _word_vectors(words: list[str], d_model: int) -> np.ndarray:
    """A fixed random vector per word (the same word, the same vector), (N, d_model)."""
    return np.stack(
        [np.random.default_rng(zlib.crc32(w.lower().encode())).normal(size=d_model) for w in words]
    )


def _word_list(value) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise AttnlabError(f"expected words to be a list of words, but got {value!r:.60}")
    if not 2 <= len(value) <= MAX_WORDS:
        raise AttnlabError(
            f"expected words to hold 2 to {MAX_WORDS} words, but got {len(value)} words"
        )
    for i, word in enumerate(value):
        if not isinstance(word, str) or not 1 <= len(word.strip()) <= MAX_WORD_CHARS:
            raise AttnlabError(
                f"expected words[{i}] to be a word of 1 to {MAX_WORD_CHARS} characters, "
                f"but got {word!r:.60}"
            )
    return [str(w).strip() for w in value]


class PermutationWidget(Figure):
    """Figure permutation-demo: reorder the words; without positions outputs only move.

    ``order`` lists the original positions in their new order (0-based, as Python indexes);
    an empty list is the original order.
    """

    order = Checked([]).tag(sync=True)
    positions = Checked(False).tag(sync=True)
    words = Checked(list(_perm.SENTENCE)).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        controls = [{"name": "positions", "label": "add position vectors", "type": "bool"}]
        _start(self, controls, ["order", "positions", "words"])

    _check = t.validate("order", "positions", "words")(Figure._checked)

    def _clean(self, name: str, value):
        if name == "positions":
            return flag(name, value)
        words = _word_list(value) if name == "words" else self.words
        order = self.order if name == "words" else value
        if not isinstance(order, list | tuple) or (
            order and sorted(order) != list(range(len(words)))
        ):
            raise AttnlabError(
                f"expected order to list 0..{len(words) - 1} once each (or [] for the words' "
                f"own order), but got {order!r:.60}"
                + (
                    " : set order = [] before changing the number of words"
                    if name == "words"
                    else ""
                )
            )
        return words if name == "words" else [int(i) for i in order]

    def _refresh(self, change=None) -> None:
        n = len(self.words)
        order = list(self.order) or list(range(n))
        x = _word_vectors(self.words, 8)  # (N, d_model)
        placed = x[order] + (sinusoidal(n, 8) if self.positions else 0.0)  # (N, d_model)
        home = x + (sinusoidal(n, 8) if self.positions else 0.0)
        out, base = attention(placed, placed, placed), attention(home, home, home)  # (N, d_model)
        change = np.abs(out - base[order]).max()
        view = {
            "kind": "tables",
            "title": " ".join(self.words[i] for i in order),
            "lines": [
                f"largest change of any word's output against its own in the original order: "
                f"{change:.2e}" + (" (positions on)" if self.positions else " (no positions)")
            ],
            "tables": [with_text(
                {"label": "each word's attention output", "rows": [self.words[i] for i in order],
                 "cols": [f"dim {j + 1}" for j in range(8)], "values": out.round(6).tolist()}
            )],
        }  # fmt: skip
        self.set_trait("view", view)


class MultiHeadWidget(Figure):
    """Figure multi-head: four hand-set heads read one sentence; ``query`` picks the word
    (0-based, as Python indexes ``multihead.SENTENCE``; the view lists the words by name)."""

    query = Checked(3).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        words = [[i, f"{i}: {w}"] for i, w in enumerate(_mh.SENTENCE)]
        controls = [{"name": "query", "label": "query word", "type": "choice", "options": words}]
        _start(self, controls, ["query"])

    _check = t.validate("query")(Figure._checked)

    def _clean(self, name: str, value):
        return whole_number("query", value, 0, len(_mh.SENTENCE) - 1)

    def _refresh(self, change=None) -> None:
        fig = _mh.build_multihead(self.query)
        p = fig.picked
        view = {
            "kind": "tables",
            "title": f"What '{p.word}' attends to, head by head",
            "lines": [
                f"{h.name}: most weight on '{fig.tokens[top]}' ({w:.3f})"
                for h, top, w in zip(fig.heads, p.top, p.top_weight, strict=True)
            ],
            "tables": [with_text(
                {"label": f"weights of '{p.word}'", "rows": [h.name for h in fig.heads],
                 "cols": list(fig.tokens), "values": p.weights}
            )],
        }  # fmt: skip
        self.set_trait("view", view)
