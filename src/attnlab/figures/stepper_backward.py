"""The stepper's backward half: the gradients of one attention call, from the output back
(issue 12.5).

Shape legend: N query rows, M key rows, d_k query/key width, d_v value width (all <= 8).

The walk starts from an upstream gradient dO = ∂L/∂O of the output's shape, all ones unless the
reader picks another (all ones is the gradient of L = the sum of every output entry). The
numbers are ``trace_attention(..., grad_output=dO)``'s tables; this module names them, checks
dO, and writes what each step does. The page calls the weights A (the trace and FlashAttention
call them P), so dA here is the trace's ``grad_weights``.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.figures._steps import Step, float_matrix

__all__ = ["BACKWARD_STAGES", "LABELS", "backward_steps", "grad_output_matrix"]

# The trace's backward tables, in the order the page walks them.
BACKWARD_STAGES = ("grad_output", "grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k")
LABELS = {
    "grad_output": "Upstream gradient dO",
    "grad_v": "dV = Aᵀ dO",
    "grad_weights": "dA = dO Vᵀ",
    "grad_scores": "dS = A ∘ (dA − δ)",
    "grad_q": "dQ = dS K · scale",
    "grad_k": "dK = dSᵀ Q · scale",
}
# Tables with one row per query (the others have one row per key, like K and V).
QUERY_ROWS = ("grad_output", "grad_weights", "grad_scores", "grad_q")


def grad_output_matrix(grad_output, n: int, d_v: int, max_abs: float) -> np.ndarray:
    """dO as a float64 (N, d_v) matrix: all ones when None, else checked against the output.

    >>> grad_output_matrix(None, 2, 3, 1000.0).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if grad_output is None:
        return np.ones((n, d_v))
    arr = float_matrix("grad_output", grad_output)
    if arr.shape != (n, d_v):
        raise AttnlabError(
            f"expected grad_output to have the output's shape (N, d_v) = ({n}, {d_v}), "
            f"but got shape {arr.shape} instead"
        )
    bad = np.argwhere(~np.isfinite(arr) | (abs(arr) > max_abs))
    if bad.size:
        i, j = (int(x) for x in bad[0])
        raise AttnlabError(
            f"dO row {i + 1}, column {j + 1}: expected a number within ±{max_abs:g}, "
            f"but got {arr[i, j]!r}"
        )
    return arr


def backward_steps(scale: float, scaled: bool, ones: bool) -> list[Step]:
    """Steps 7-11: dV, dA, dS, dQ, dK. ``ones``: dO is the default, all ones."""
    upstream = (
        "Here dO is all ones: the loss is the sum of every output entry, so each entry pulls "
        "with the same strength. Edit dO's cells to ask about another loss."
        if ones
        else "Here dO holds the values you entered."
    )
    factor = f"1/√d_k = {scale:.4g}" if scaled else "1 (scaling is off)"
    times = "· 1/√d_k" if scaled else "· 1"
    return [
        Step(
            "grad_v",
            "Gradient of V",
            "dV = Aᵀ dO",
            "The backward pass starts from dO: how much a loss L changes when each output entry "
            f"grows. {upstream} Value row j reached output i with weight A_ij, so it collects "
            "that weight times query i's row of dO, summed over all queries.",
            ["weights", "grad_output"],
            "grad_v",
            "ta",
            "backward",
        ),
        Step(
            "grad_weights",
            "Gradient of the weights",
            "dA = dO Vᵀ",
            "Nudging weight A_ij up mixes a little more of value row j into output i, so the "
            "loss moves by dO_i · v_j per unit of weight. Every pair gets this number, blocked "
            "or not: the next step decides how much of it reaches the scores.",
            ["grad_output", "v"],
            "grad_weights",
            "qk",
            "backward",
        ),
        Step(
            "grad_scores",
            "Back through the softmax",
            "dS = A ∘ (dA − δ),  δ_i = Σ_j A_ij dA_ij",
            "Softmax ties a row together: a score that rises takes weight from the others. So a "
            "score's gradient is its weight times how far its dA lies above δ_i, the row's "
            "weighted average of dA, and each row of dS adds up to 0. A blocked pair gets 0 "
            "(its weight is 0), a row with one allowed key gets 0 (its weight is 1 whatever its "
            "score), and a saturated row, one weight near 1, gets almost 0: without 1/√d_k "
            "large scores saturate and learning stalls (§6.3). The mask only adds constants, "
            "so dS is also the gradient of the scaled scores.",
            ["weights", "grad_weights"],
            "grad_scores",
            "row",
            "backward",
        ),
        Step(
            "grad_q",
            "Gradient of Q",
            f"dQ = dS K {times}",
            "Score (i, j) is q_i · k_j times the scale, so nudging query i in the direction of "
            "key j raises that score fastest. Query i's gradient adds up the key rows, each "
            f"weighted by its entry in row i of dS, times {factor}.",
            ["grad_scores", "k"],
            "grad_q",
            "av",
            "backward",
        ),
        Step(
            "grad_k",
            "Gradient of K",
            f"dK = dSᵀ Q {times}",
            "The same score read the other way: key j's gradient adds up the query rows, each "
            f"weighted by its entry in column j of dS, times {factor}. A key that no query may "
            "see gets 0.",
            ["grad_scores", "q"],
            "grad_k",
            "ta",
            "backward",
        ),
    ]
