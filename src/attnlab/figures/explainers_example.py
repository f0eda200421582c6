"""Explainers of §6.2's worked example: where q, k and v come from, and one gap copying a value.

Shape legend: N = M = 2 tokens, d_model = 4 token width, d_k = d_v = 2.

The matrices quoted are ``attnlab.core.example``'s, and every product and weight is computed when
the explainers are built (the meanings in braces), never typed in.
"""

from __future__ import annotations

import math

import numpy as np

import attnlab
from attnlab.core.example import (
    EXAMPLE_V,
    EXAMPLE_W_K,
    EXAMPLE_W_Q,
    EXAMPLE_W_V,
    EXAMPLE_X,
    example_projections,
)
from attnlab.figures.explainers import STEPPER, Link, explainers

__all__ = ["example_explainers"]

_LINKS = {
    "inputs": Link(STEPPER, "See q, k and v at the stepper's first step", step="inputs"),
    "weights": Link(STEPPER, "Switch the mask off and see the weights", step="weights"),
    "output": Link(STEPPER, "See the outputs", step="output"),
}

# (id, title, section, parts, the sentence, symbols, notes); a symbol is
# (id, text, shape, meaning, link name).
_EQUATIONS = (
    ("projections", "Where q, k and v come from", "§6.2", "q == x w_q =, k == x w_k =, v == x w_v",
     "Three learned matrices turn the same token vectors into three different roles.", (
        ("q", "Q", "N × d_k", "{q}", "inputs"),
        ("x", "X", "N × d_model", "{x}", "inputs"),
        ("w_q", "W^{Q}", "d_model × d_k", "{w_q}", "inputs"),
        ("k", "K", "M × d_k", "{k}", "inputs"),
        ("w_k", "W^{K}", "d_model × d_k", "{w_k}", "inputs"),
        ("v", "V", "M × d_v", "{v}", "inputs"),
        ("w_v", "W^{V}", "d_model × d_v", "{w_v}", "inputs"),
     ), ["The chapter prints W^V. The token vectors and W^Q, W^K come from an earlier section it "
         "does not repeat, so attnlab uses small whole numbers that give exactly its q and k.",
         "In self-attention all three products start from the same X: one token, three jobs."]),
    ("copy", "One big gap copies one value", "§6.2", "o == sum a v =≈ v_b",
     "When one weight is nearly 1, the weighted average is nearly that key's value, unchanged.", (
        ("o", "o_{1}", "1 × d_v", "{o}", "output"),
        ("sum", "Σ_{j}", "M terms", "Add up over the keys of the row.", "output"),
        ("a", "a_{1j}", "one number per key", "{a}", "weights"),
        ("v", "v_{j}", "1 × d_v", "Key j's value row.", "output"),
        ("v_b", "v_{2}", "1 × d_v", "{v_b}", "output"),
     ), ["{why}"]),
)  # fmt: skip


def _rows(m) -> str:
    """A matrix as the page's text: [[1, −1], [0, 2]], with real minus signs."""
    text = str(np.asarray(m).astype(int).tolist() if np.all(np.mod(m, 1) == 0) else m)
    return text.replace("-", "−")


def _projection_words() -> dict[str, str]:
    q, k, v = example_projections()  # each (2, 2)
    return {
        "{x}": f"The two token vectors, one row each, 4 numbers wide: {_rows(EXAMPLE_X)}.",
        "{w_q}": f"The query projection {_rows(EXAMPLE_W_Q)}: what each token looks for.",
        "{w_k}": f"The key projection {_rows(EXAMPLE_W_K)}: what each token offers.",
        "{w_v}": f"The value projection, the chapter's {_rows(EXAMPLE_W_V)}: what each token "
        "hands over when it is picked.",
        "{q}": f"The queries X W^Q = {_rows(q)}, the rows the stepper starts from.",
        "{k}": f"The keys X W^K = {_rows(k)}.",
        "{v}": f"The values X W^V = {_rows(v)}.",
    }


def _copy_words() -> dict[str, str]:
    trace = attnlab.trace_attention(*example_projections())  # no mask
    weights, out = trace.weights[0], trace.output[0]  # (M,), (d_v,) token 1's row
    v_b = np.asarray(EXAMPLE_V[1])  # (d_v,)
    off = float(np.abs(out - v_b).max())
    gap = float(np.ptp(trace.scaled[0]))
    return {
        "{o}": f"Token 1's output with the mask off: [{out[0]:.6f}, {out[1]:.6f}].",
        "{a}": f"Token 1's weights: {weights[0]:.2e} on itself and {weights[1]:.6f} on token 2.",
        "{v_b}": f"Token 2's value {_rows(EXAMPLE_V[1])}: the output misses it by only {off:.1e}.",
        "{why}": f"A gap of {gap:.3f} between the two scores makes one weight e^{gap:.3f} ≈ "
        f"{math.exp(gap):,.0f} times the other, so the average is a copy of one value. "
        "Scores that spread widely (§6.3) turn every row into such a copy, and a copy passes "
        "almost no gradient back to its scores.",
    }


def example_explainers() -> list:
    """§6.2's worked example: the projections that make q, k, v, and the copy one gap makes."""
    return explainers(_EQUATIONS, _LINKS.__getitem__, _projection_words() | _copy_words())
