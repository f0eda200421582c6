"""The stepper's steps for the two variants real models add: a softcap and attention sinks.

Gemma 2 caps every scaled score at ±c with c · tanh(s / c) before the mask; gpt-oss gives each
head a sink, a logit with no value row that enters every row's softmax divisor and so takes a
share of the weight that no key gets. With a softcap the walk gains a step between "scaled"
and "masked" (the stage ``CAPPED`` of ``core/stages.py``), and the mask is added to the capped
table; with a sink the softmax step shows a table of its own, one row per query: the sink's
logit and its share of that row's divisor, which is what the row's weights fall short of 1 by.

Every number comes from ``trace_attention(..., softcap=, sinks=)``; the sink's share is read
off the trace's log-sum-exp (exp(sink − lse)), not recomputed by another softmax.

Shape legend: N query rows, M key rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnlab.core.numbers import format_number
from attnlab.core.stages import CAPPED
from attnlab.errors import AttnlabError
from attnlab.figures._data import Matrix, matrix
from attnlab.figures._steps import Step, Table

__all__ = ["MAX_SINK", "MAX_SOFTCAP", "SINK_COLS", "check_variants", "sink_share",
           "variant_steps", "variant_table", "variant_values"]  # fmt: skip

MAX_SOFTCAP = 1e4  # Gemma 2 caps at 50; a cap past this is no cap at the stepper's scores
MAX_SINK = 1000.0  # as the stepper's entries: a sink logit within ±1000


def check_variants(softcap, sink) -> tuple[float | None, float | None]:
    """(softcap, sink) as floats, or an error naming the one out of range."""
    out = []
    for name, value, ok, said in (
        ("softcap", softcap, lambda x: 0 < x <= MAX_SOFTCAP, f"from above 0 to {MAX_SOFTCAP:g}"),
        ("sink", sink, lambda x: abs(x) <= MAX_SINK, f"within ±{MAX_SINK:g}"),
    ):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
            raise AttnlabError(f"expected {name} to be a number, but got {value!r} instead")
        if not (np.isfinite(value) and ok(float(value))):
            raise AttnlabError(f"expected {name} {said}, but got {value!r} instead")
        out.append(float(value))
    return out[0], out[1]


def sink_share(trace, sink: float) -> np.ndarray:
    """(N,) the sink's share of each row's divisor: exp(sink − lse), lse including the sink."""
    return np.exp(sink - trace.lse)  # (N,)


SINK_COLS = ["sink logit", "sink's share"]


def variant_values(trace, softcap, sink) -> dict[str, Matrix]:
    """The capped table (with a softcap) and the sink's (N, 2) table (with a sink)."""
    out: dict[str, Matrix] = {}
    if softcap is not None:
        out["capped"] = matrix(trace.capped)  # (N, M)
    if sink is not None:
        share = sink_share(trace, sink)  # (N,)
        out["sink"] = matrix(np.stack([np.full_like(share, sink), share], axis=-1))  # (N, 2)
    return out


def variant_table(name: str, values: Matrix, queries: list[str], keys: list[str]) -> Table:
    """A variant's table labelled as the stepper labels its query rows and key columns."""
    if name == "capped":
        return Table(name, f"{CAPPED.title}: {CAPPED.formula}", queries, keys, values)
    return Table(name, "The sink: its logit and its share of each row's divisor", queries,
                 SINK_COLS, values)  # fmt: skip


def variant_steps(steps: list[Step], softcap, sink) -> list[Step]:
    """The forward steps with the capped step after "scaled" and the sink beside the softmax.

    With a softcap the backward steps are left out: their formulas (dQ = dS K · scale) skip
    the cap's derivative, 1 − tanh², and would not match the trace's numbers."""
    out = []
    for step in steps:
        if softcap is not None and step.id == "masked":
            out.append(Step(CAPPED.name, CAPPED.title, CAPPED.formula,
                            f"{CAPPED.explain} Here c = {format_number(softcap)}.", ["scaled"],
                            "capped", "cell"))  # fmt: skip
            step = dataclasses.replace(
                step, inputs=["capped", "mask"], formula="capped + M",
                explain=step.explain.replace("The mask M adds", "The mask M is added to the "
                                             "capped scores: it adds"))  # fmt: skip
        if sink is not None and step.id == "weights":
            step = dataclasses.replace(
                step, inputs=[*step.inputs, "sink"],
                formula="A = exp(row) / (Σ exp(row) + exp(sink))",
                explain=step.explain + " Here the head has a sink: a logit with no value row "
                "that joins every row's divisor, so each row's weights add up to 1 minus the "
                f"sink's share (its own column beside the scores). The sink is {format_number(sink)}.",
            )  # fmt: skip
        if softcap is not None and step.phase == "backward":
            continue
        out.append(step)
    return out
