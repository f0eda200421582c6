"""The trace of one attention call: every table of §6.2's diagram, as data, text and HTML.

Shape legend (the chapter's letters): ... batch axes, N query rows, M key rows, d_v value width.

``trace_attention`` (in ``core/attention.py``) fills an ``AttentionTrace``, and with a
``grad_output`` also the backward tables of the chain rule (``core/dense_backward.py``); this
module only holds and renders them: ``str(trace)`` aligns the tables as text, ``trace._repr_html_()`` draws
them as HTML tables for Jupyter, and ``format_number`` is the one way a cell is written, shared
by the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from attnlab.core.masks import Mask

__all__ = ["AttentionTrace", "format_number", "format_table"]

_STAGES = ("scores", "scaled", "masked", "weights", "output")
# The backward pass, from the output back to the inputs (present only with a grad_output).
_BACKWARD = ("grad_output", "grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k")
_BACKWARD_HEADING = "backward: the gradient of a loss L, given grad_output = ∂L/∂output"
_CAPTIONS = {
    "scores": "1. scores  Q Kᵀ  (N x M)",
    "scaled": "2. scaled  Q Kᵀ · scale",
    "capped": "2b. capped  c · tanh(scaled / c)  (softcap c)",
    "masked": "3. masked  + M  (-inf where blocked)",
    "weights": "4. weights  softmax of each row",
    "output": "5. output  weights · V  (N x d_v)",
    "grad_output": "6. grad_output  dO = ∂L/∂output  (N x d_v)",
    "grad_v": "7. grad_v  dV = Pᵀ dO  (M x d_v)",
    "grad_weights": "8. grad_weights  dP = dO Vᵀ  (N x M)",
    "grad_scores": "9. grad_scores  dS = P ∘ (dP − rowsum(dP ∘ P))  (0 where blocked)",
    "grad_q": "10. grad_q  dQ = dS K · scale  (N x d_k)",
    "grad_k": "11. grad_k  dK = dSᵀ Q · scale  (M x d_k)",
}


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

    With ``trace_attention(..., grad_output=dO)``, the backward tables too (else None), P being
    the weights and S the masked table:
        grad_output: dO, (..., N, d_v).   grad_v: dV = Pᵀ dO.   grad_weights: dP = dO Vᵀ,
        (..., N, M).   grad_scores: dS = P ∘ (dP − rowsum(dP ∘ P)), the gradient of the masked
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

    def stages(self) -> list[tuple[str, str, np.ndarray]]:
        """(name, caption, table) for each step, in order: the forward pass, then (with a
        grad_output) the backward pass. ``capped`` appears only with a softcap."""
        names = _STAGES[:2] + (("capped",) if self.capped is not None else ()) + _STAGES[2:]
        names += _BACKWARD if self.grad_output is not None else ()
        return [(s, _CAPTIONS[s], getattr(self, s)) for s in names]

    def __repr__(self) -> str:
        return (
            f"AttentionTrace(N={self.scores.shape[-2]}, M={self.scores.shape[-1]}, "
            f"scale={self.scale:.6g}, mask={self.mask!r})"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        for name, caption, table in self.stages():
            if name == _BACKWARD[0]:
                lines += ["", _BACKWARD_HEADING]
            lines += ["", caption, format_table(table)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [f"<div class='attnlab-trace'><p><code>{escape(repr(self))}</code></p>"]
        for name, caption, table in self.stages():
            if name == _BACKWARD[0]:
                parts.append(f"<p><i>{escape(_BACKWARD_HEADING)}</i></p>")
            parts.append(f"<p><b>{escape(caption)}</b></p>")
            for index, mat in _matrices(table):
                if index:
                    parts.append(f"<p><i>[{', '.join(map(str, index))}]</i></p>")
                rows = "".join(
                    "<tr>" + "".join(f"<td>{escape(format_number(x))}</td>" for x in row) + "</tr>"
                    for row in mat
                )
                parts.append(f"<table>{rows}</table>")
        return "".join(parts) + "</div>"


def format_number(x: float) -> str:
    if np.isneginf(x):
        return "-inf"
    return f"{x:.4g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.3e}"


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
