"""The four figures as anywidget widgets: state in traitlets, views computed in the kernel.

Each widget keeps its controls as traitlets (``step``, ``causal``, ``d_k`` ...) that a cell can
read and set; any change recomputes ``view`` (plain data) with the explorer's figure builders,
and ``widgets.js`` draws it. With no widget manager (an HTML export, a plain viewer), the same
view is shown as static HTML, so the output is never blank.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import anywidget
import numpy as np
import traitlets as t

from attnlab.core.attention import attention
from attnlab.core.positions import sinusoidal
from attnlab.errors import AttnlabError
from attnlab.figures import histogram as _hist
from attnlab.figures import multihead as _mh
from attnlab.figures import stepper as _step
from attnlab.notebook._views import html_of, stepper_view

__all__ = ["HistogramWidget", "MultiHeadWidget", "PermutationWidget", "StepperWidget"]

_ESM = Path(__file__).with_name("widgets.js")


class _Figure(anywidget.AnyWidget):
    _esm = _ESM
    view = t.Dict().tag(sync=True)
    controls = t.List().tag(sync=True)

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        if isinstance(data, tuple):
            data = data[0]
        return {**data, "text/html": html_of(self.view)}

    def _refresh(self, change=None) -> None:
        raise NotImplementedError


class StepperWidget(_Figure):
    """Figure attention-stepper: attention on a small case, one table-producing step at a time."""

    step = t.Int(0).tag(sync=True)
    causal = t.Bool(True).tag(sync=True)
    scaled = t.Bool(True).tag(sync=True)
    q = t.List().tag(sync=True)
    k = t.List().tag(sync=True)
    v = t.List().tag(sync=True)
    blocked = t.List().tag(sync=True)
    grad_output = t.List(allow_none=True, default_value=None).tag(sync=True)  # dO; None: ones

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._figure = None
        names = ["causal", "scaled", "q", "k", "v", "blocked", "grad_output"]
        self.observe(self._refresh, names=names)
        self.observe(self._show, names=["step"])
        self._refresh()

    @t.validate("step")
    def _step_in_range(self, proposal):
        # eleven steps: inputs, scores ... output, then the gradients dV ... dK
        value, last = proposal["value"], len(_step.build_stepper().steps) - 1
        if not 0 <= value <= last:
            raise t.TraitError(f"expected step from 0 to {last}, but got {value} instead")
        return value

    def _refresh(self, change=None) -> None:
        self._figure = _step.build_stepper(
            self.q,
            self.k,
            self.v,
            causal=self.causal,
            scaled=self.scaled,
            blocked=self.blocked,
            grad_output=self.grad_output,
        ).as_dict()
        last = len(self._figure["steps"]) - 1
        self.controls = [
            {"name": "step", "label": "step", "type": "int", "min": 0, "max": last},
            {"name": "causal", "label": "causal mask", "type": "bool"},
            {"name": "scaled", "label": "scale by 1/√d_k", "type": "bool"},
        ]
        self._show()

    def _show(self, change=None) -> None:
        self.view = stepper_view(self._figure, self.step)


class HistogramWidget(_Figure):
    """Figure sqrt-dk-histogram: random scores at width d_k, scaled or not, and saturation."""

    d_k = t.Int(_hist.D_K_DEFAULT).tag(sync=True)
    scaled = t.Bool(False).tag(sync=True)
    seed = t.Int(0).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.controls = [
            {"name": "d_k", "label": "d_k", "type": "int", "min": _hist.D_K_MIN,
             "max": _hist.D_K_MAX, "step": _hist.D_K_STEP},
            {"name": "scaled", "label": "scale by 1/√d_k", "type": "bool"},
        ]  # fmt: skip
        self.observe(self._refresh, names=["d_k", "scaled", "seed"])
        self._refresh()

    def _refresh(self, change=None) -> None:
        fig = _hist.build_histogram(self.d_k, scaled=self.scaled, seed=self.seed)
        which = "scaled" if fig.scaled else "unscaled"
        self.view = {
            "kind": "histogram",
            "title": f"Scores q·k at d_k = {fig.d_k}, {which}",
            "lines": [
                f"spread σ = {fig.std:.3f} (the proof predicts {fig.predicted_std:.3f})",
                f"softmax over {fig.keys} keys: p_max > {fig.threshold} in "
                f"{fig.unscaled_share:.1%} of unscaled trials, {fig.scaled_share:.1%} scaled",
            ],
            "histogram": {"counts": fig.counts, "edges": fig.edges, "label": f"{which} scores"},
        }


def _word_vectors(words: list[str], d_model: int) -> np.ndarray:
    """A fixed random vector per word (the same word, the same vector), (N, d_model)."""
    return np.stack(
        [np.random.default_rng(zlib.crc32(w.lower().encode())).normal(size=d_model) for w in words]
    )


class PermutationWidget(_Figure):
    """Figure permutation-demo: reorder the words; without positions outputs only move."""

    order = t.List(t.Int()).tag(sync=True)
    positions = t.Bool(False).tag(sync=True)
    words = t.List(t.Unicode()).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.controls = [{"name": "positions", "label": "add position vectors", "type": "bool"}]
        self.observe(self._refresh, names=["order", "positions", "words"])
        self._refresh()

    def _refresh(self, change=None) -> None:
        n = len(self.words)
        order = list(self.order) or list(range(n))
        if sorted(order) != list(range(n)):
            raise AttnlabError(f"expected order to reorder 0..{n - 1}, but got {order} instead")
        x = _word_vectors(self.words, 8)  # (N, d_model)
        placed = x[order] + (sinusoidal(n, 8) if self.positions else 0.0)  # (N, d_model)
        home = x + (sinusoidal(n, 8) if self.positions else 0.0)
        out, base = attention(placed, placed, placed), attention(home, home, home)  # (N, d_model)
        change = np.abs(out - base[order]).max()
        self.view = {
            "kind": "tables",
            "title": " ".join(self.words[i] for i in order),
            "lines": [
                f"largest change of any word's output against its own in the original order: "
                f"{change:.2e}" + (" (positions on)" if self.positions else " (no positions)")
            ],
            "tables": [
                {"label": "each word's attention output", "rows": [self.words[i] for i in order],
                 "cols": [f"dim {j + 1}" for j in range(8)], "values": out.round(6).tolist()}
            ],
        }  # fmt: skip


class MultiHeadWidget(_Figure):
    """Figure multi-head: four hand-set heads read one sentence; pick the query word."""

    query = t.Int(3).tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        n = len(_mh.SENTENCE)
        self.controls = [{"name": "query", "label": "query word", "type": "int", "min": 0,
                          "max": n - 1}]  # fmt: skip
        self.observe(self._refresh, names=["query"])
        self._refresh()

    def _refresh(self, change=None) -> None:
        fig = _mh.build_multihead(self.query)
        p = fig.picked
        self.view = {
            "kind": "tables",
            "title": f"What '{p.word}' attends to, head by head",
            "lines": [
                f"{h.name}: most weight on '{fig.tokens[top]}' ({w:.3f})"
                for h, top, w in zip(fig.heads, p.top, p.top_weight, strict=True)
            ],
            "tables": [
                {"label": f"weights of '{p.word}'", "rows": [h.name for h in fig.heads],
                 "cols": list(fig.tokens), "values": p.weights}
            ],
        }  # fmt: skip
