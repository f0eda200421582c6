"""The stepper's backward half: the gradients of one attention call, from the output back.

Shape legend: N query rows, M key rows, d_k query/key width, d_v value width (all <= 8).

The walk starts from an upstream gradient dO = ∂L/∂O of the output's shape, all ones unless the
reader picks another (all ones is the gradient of L = the sum of every output entry). The
numbers are ``trace_attention(..., grad_output=dO)``'s tables; this module checks dO and turns
each backward stage of ``core/stages.py`` (its title, formula and words, shared with the trace
and the CLI) into a step of the walk. The weights are A, so dA is the trace's ``grad_weights``.
"""

from __future__ import annotations

import numpy as np

from attnlab.core.numbers import format_number
from attnlab.core.stages import BACKWARD, Stage
from attnlab.errors import AttnlabError
from attnlab.figures._steps import Step, float_matrix

__all__ = ["backward_steps", "grad_output_matrix", "stage_step"]


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


def stage_step(
    stage: Stage, inputs: list[str], feeds: str, *, extra: str = "", scaled: bool = True
) -> Step:
    """One step of the walk from a stage: its title, formula and words, then ``extra`` (what
    this case adds). Unscaled, the formula's 1/√d_k reads 1."""
    formula = stage.formula if scaled else stage.formula.replace("1/√d_k", "1")
    explain = f"{stage.explain} {extra}" if extra else stage.explain
    return Step(stage.name, stage.title, formula, explain, inputs, stage.name, feeds, stage.phase)


def backward_steps(scale: float, scaled: bool, ones: bool) -> list[Step]:
    """Steps 6-11: dO, then dV, dA, dS, dQ, dK. ``ones``: dO is the default, all ones."""
    upstream = (
        "Here dO is all ones: the loss is the sum of every output entry, so each entry pulls "
        "with the same strength. Edit dO's cells to ask about another loss."
        if ones
        else "Here dO holds the values you entered."
    )
    factor = (
        f"Here the scale is 1/√d_k = {format_number(scale)}."
        if scaled
        else "Here the scale is 1 (scaling is off)."
    )
    grad_output, grad_v, grad_weights, grad_scores, grad_q, grad_k = BACKWARD
    start = f"{grad_output.explain} {upstream}"
    return [
        stage_step(grad_v, ["weights", "grad_output"], "ta", extra=start),
        stage_step(grad_weights, ["grad_output", "v"], "qk"),
        stage_step(grad_scores, ["weights", "grad_weights"], "row"),
        stage_step(grad_q, ["grad_scores", "k"], "av", extra=factor, scaled=scaled),
        stage_step(grad_k, ["grad_scores", "q"], "ta", extra=factor, scaled=scaled),
    ]
