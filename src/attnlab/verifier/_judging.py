"""From exact answers to a report: the plain baselines, each tensor's verdict, the report.

Shape legend: as ``_case.py``.

Every kind of case (plain, varlen, KV cache, dropout) computes its own exact answers; this
module does the rest the same way for all: one plain run per baseline dtype (the wider of the
kernel's and the stored tensor's, ``_baseline.baseline_dtype``), each tensor judged by
``_report.judge``, and the report's description of the case.
"""

from __future__ import annotations

import math
import os

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._threads import pool_map
from attnlab.verifier._baseline import baseline, baseline_dtype
from attnlab.verifier._case import Case
from attnlab.verifier._report import TENSORS, VerifyReport, judge

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "baseline_plan",
    "checked_judging",
    "make_report",
    "verdicts",
]

#: Bytes the score tables of one step may take: the truth's dense table under
#: ``method="auto"`` (past it, the blockwise path) and the baseline's row block.
DEFAULT_MEMORY_BUDGET = 32 * 2**20


def _positive(name: str, value, *, allow_zero: bool) -> float:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise AttnlabError(f"{name}: expected a finite number {bound}, but got {value!r} instead")
    return float(value)


def checked_judging(factor, atol, memory_budget) -> tuple[float, float | None, float]:
    """(factor, atol, memory budget), each checked; the budget's default filled in."""
    factor = _positive("factor", factor, allow_zero=True)
    if atol is not None:
        atol = _positive("atol", atol, allow_zero=True)
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    return factor, atol, _positive("memory_budget", budget, allow_zero=False)


def baseline_plan(case: Case) -> list[tuple[np.dtype, list[str]]]:
    """(dtype, tensors) for each plain run: one per baseline dtype the case's tensors need."""
    names = [name for name in TENSORS if name in case.arrays]
    dtypes = {name: baseline_dtype(case, name) for name in names}
    return [
        (dtype, [name for name in names if dtypes[name] == dtype])
        for dtype in dict.fromkeys(dtypes.values())
    ]


def verdicts(
    case: Case, exact: dict, budget: float, factor: float, atol, plain=None, only=None
) -> dict:
    """Each attention tensor's verdict (out, lse, dq, dk, dv the case holds, or those of them
    in ``only``), its plain answer computed here unless ``plain`` gives it."""
    names = [name for name in TENSORS if name in case.arrays and (only is None or name in only)]
    dtypes = {name: baseline_dtype(case, name) for name in names}
    plain = dict(plain or {})
    for dtype, want in baseline_plan(case):
        want = [name for name in want if name not in plain and name in names]
        if want:
            plain.update(baseline(case, budget, dtype, want))
    # Each tensor's verdict on its own thread: numpy's passes over the (h, rows, d) tables
    # release the GIL, and every verdict is the one a single thread computes.
    state = np.geterr()  # errstate belongs to each thread: the caller's, carried over

    def one(name):
        with np.errstate(**state):
            return judge(name, case, exact[name], plain[name], factor, atol, dtypes[name])

    with pool_map(min(len(names), os.cpu_count() or 1), len(names)) as each:
        done = each(one, names)
    return dict(zip(names, done, strict=True))


def make_report(case: Case, tensors: dict, factor: float, *, hints=(), extra=None):
    """The report on ``case``: its verdicts, dtype, layout, options and shape."""
    a = case.arrays
    lengths_q, lengths_k = np.diff(case.cu_q).tolist(), np.diff(case.cu_k).tolist()
    ragged = len(set(lengths_q)) > 1 or len(set(lengths_k)) > 1 or case.layout == "varlen"
    shape = {
        "batch": case.batch,
        "heads": case.heads,
        "kv_heads": case.kv_heads,
        "seqlen_q": lengths_q if ragged else lengths_q[0],  # one length, or one per sequence
        "seqlen_k": lengths_k if ragged else lengths_k[0],
        "d_k": a["q"].shape[-1],
        "d_v": a["v"].shape[-1],
    }
    options = case.options.as_dict()
    options.update(extra or {})
    return VerifyReport(
        tensors=tensors,
        dtype=case.dtype.name,
        layout=case.layout,
        factor=factor,
        options=options,
        shape=shape,
        cu_q=case.cu_q,
        cu_k=case.cu_k,
        hints=tuple(hints),
    )
