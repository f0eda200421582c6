"""The trace of one attention call: every table of §6.2's diagram, as data, text and HTML.

Shape legend (the chapter's letters): ... batch axes, N query rows, M key rows, d_v value width.

``trace_attention`` (in ``api/attention.py``) fills an ``AttentionTrace``, and with a
``grad_output`` also the backward tables of the chain rule (``kernels/dense_backward.py``); this
module only holds and renders them: ``str(trace)`` aligns the tables as text, ``trace._repr_html_()`` draws
them as HTML tables for Jupyter. Each step's caption is ``core/stages.py``'s and each cell goes
through ``core/numbers.py``'s ``format_number``, as on the terminal and the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from attnlab.core.masks import Mask
from attnlab.core.numbers import format_number
from attnlab.core.stages import BACKWARD, BACKWARD_HEADING, CAPPED, FORWARD, Stage

__all__ = ["AttentionTrace", "format_number", "format_table"]


@dataclass(frozen=True, repr=False)
class AttentionTrace:
    """Every table of the chapter's diagram for one attention call.

    Attributes:
        q, k, v: the inputs (compute dtype).
        scores: q kᵀ, (..., N, M).   scaled: scores · scale.   masked: scaled + mask.
        weights: softmax of each masked row, (..., N, M).   output: weights · v, (..., N, d_v).
        scale: the factor applied (1/sqrt(d_k) by default).   mask: the Mask used, or None.
        capped: softcap · tanh(scaled / softcap), with a softcap (else None); masked adds the
        mask to it.   lse: each row's log Σ exp(masked) (natural log, sinks included), (..., N).
        softcap, sinks: the options used (None when unused).

    With ``trace_attention(..., grad_output=dO)``, the backward tables too (else None), A being
    the weights and S the masked table:
        grad_output: dO, (..., N, d_v).   grad_v: dV = Aᵀ dO.   grad_weights: dA = dO Vᵀ,
        (..., N, M).   grad_scores: dS = A ∘ (dA − rowsum(dA ∘ A)), the gradient of the masked
        scores, (..., N, M).   grad_q: dS K · scale.   grad_k: dSᵀ Q · scale.
        grad_q, grad_k and grad_v have their input's shape (summed over broadcast axes), and
        equal ``attention_backward``'s; grad_sinks (with sinks) the sinks' shape.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scaled: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    scale: float
    mask: Mask | None
    grad_output: np.ndarray | None = None
    grad_v: np.ndarray | None = None
    grad_weights: np.ndarray | None = None
    grad_scores: np.ndarray | None = None
    grad_q: np.ndarray | None = None
    grad_k: np.ndarray | None = None
    capped: np.ndarray | None = None
    lse: np.ndarray | None = None
    softcap: float | None = None
    sinks: np.ndarray | None = None
    grad_sinks: np.ndarray | None = None

    def steps(self) -> list[tuple[Stage, np.ndarray]]:
        """(stage, table) for each step, in order: the forward pass, then (with a grad_output)
        the backward pass. The stage (``core/stages.py``) names, captions and explains it."""
        return [(s, getattr(self, s.name)) for s in self._stages()]

    def stages(self) -> list[tuple[str, str, np.ndarray]]:
        """(name, caption, table) for each step, in order (see ``steps``)."""
        return [(s.name, s.caption, table) for s, table in self.steps()]

    def _stages(self) -> tuple[Stage, ...]:
        # The capped table sits between the scaled and the masked one, with a softcap only.
        forward = FORWARD[:2] + ((CAPPED,) if self.capped is not None else ()) + FORWARD[2:]
        return forward + (BACKWARD if self.grad_output is not None else ())

    def __repr__(self) -> str:
        return (
            f"AttentionTrace(N={self.scores.shape[-2]}, M={self.scores.shape[-1]}, "
            f"scale={self.scale:.6g}, mask={self.mask!r})"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        for number, (stage, table) in enumerate(self.steps(), 1):
            if stage is BACKWARD[0]:
                lines += ["", BACKWARD_HEADING]
            lines += ["", f"{number}. {stage.caption}", format_table(table)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [f"<div class='attnlab-trace'><p><code>{escape(repr(self))}</code></p>"]
        for number, (stage, table) in enumerate(self.steps(), 1):
            if stage is BACKWARD[0]:
                parts.append(f"<p><i>{escape(BACKWARD_HEADING)}</i></p>")
            parts.append(f"<p><b>{number}. {escape(stage.caption)}</b></p>")
            for index, mat in _matrices(table):
                if index:
                    parts.append(f"<p><i>[{', '.join(map(str, index))}]</i></p>")
                rows = "".join(
                    "<tr>" + "".join(f"<td>{escape(format_number(x))}</td>" for x in row) + "</tr>"
                    for row in mat
                )
                parts.append(f"<table>{rows}</table>")
        return "".join(parts) + "</div>"


def _matrices(table: np.ndarray):
    for index in np.ndindex(table.shape[:-2]):
        yield index, table[index]


def format_table(table: np.ndarray) -> str:
    """Aligned plain-text rendering of a (..., rows, cols) table."""
    out = []
    for index, mat in _matrices(np.asarray(table)):
        if index:
            out.append(f"[{', '.join(map(str, index))}]")
        cells = [[format_number(float(x)) for x in row] for row in mat]
        width = max((len(c) for row in cells for c in row), default=1)
        out += ["  [ " + "  ".join(c.rjust(width) for c in row) + " ]" for row in cells]
    return "\n".join(out)
