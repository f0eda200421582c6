"""``attnlab.verify``: judge a kernel's attention against the exact answer, as FlashAttention's
tests judge theirs.

    truth     the case in float64 through attnlab's own attention and gradients (``_truth.py``)
    baseline  a plain implementation in the kernel's dtype (``_baseline.py``)
    verdict   each tensor passes when its error <= factor x the baseline's error + atol
              (``_report.py``, where atol's default is stated)

>>> import numpy as np, attnlab as al
>>> rng = np.random.default_rng(0)
>>> q, k, v = (rng.standard_normal((1, 8, 2, 4)) for _ in range(3))   # (B, N, h, d)
>>> out = al.attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3),
...                    v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
>>> al.verify(q=q, k=k, v=v, out=out).passed
True
>>> al.verify(q=q, k=k, v=v, out=out, causal=True).tensors["out"].worst["row"] < 8
True
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.verifier._baseline import baseline, baseline_dtype
from attnlab.verifier._case import Case, CaseError, make_case
from attnlab.verifier._hint import OTHER, layout_hint, reinterpreted, transposed_hint
from attnlab.verifier._load import read_case_file
from attnlab.verifier._report import TENSORS, VerifyReport, judge
from attnlab.verifier._truth import truth

__all__ = ["DEFAULT_MEMORY_BUDGET", "verify", "verify_case", "verify_file"]

#: Bytes the score tables of one step may take: the truth's dense table under
#: ``method="auto"`` (past it, the blockwise path) and the baseline's row block.
DEFAULT_MEMORY_BUDGET = 32 * 2**20


def verify(
    q=None,
    k=None,
    v=None,
    out=None,
    lse=None,
    do=None,
    dq=None,
    dk=None,
    dv=None,
    *,
    layout="bshd",
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    softmax_scale=None,
    alibi_slopes=None,
    sinks=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    factor=2.0,
    atol=None,
    memory_budget=None,
) -> VerifyReport:
    """Judge a kernel's output (and gradients) against attnlab's exact answer.

    Args:
        q, k, v: the kernel's inputs, float64/32/16 or bfloat16 (one dtype). Layout "bshd"
            (FlashAttention): q (B, N, h, d_k), k (B, M, h_kv, d_k), v (B, M, h_kv, d_v);
            "bhsd" (PyTorch SDPA): q (B, h, N, d_k), k (B, h_kv, M, d_k), ...; varlen (with
            cu_seqlens_q/k): q (T_q, h, d_k), k (T_k, h_kv, d_k). GQA when h_kv divides h.
        out: the kernel's output, laid out as q with d_v.
        lse: its log-sum-exp (natural log), (B, h, N), or (h, T_q) for varlen.
        do: dL/dout, as out; dq, dk, dv: the kernel's gradients, laid out as q, k, v.
        causal, window_size, softcap, softmax_scale, alibi_slopes, sinks, cu_seqlens_q,
            cu_seqlens_k: FlashAttention's options with its names and defaults.
        factor: how many times the baseline's error the kernel may err (2, as FlashAttention).
        atol: the allowance added to the bound; None for 2 ulps of each tensor's dtype at its
            scale (see ``attnlab.verifier._report``).
        memory_budget: bytes one step's score tables may take (default 32 MiB): larger cases
            run block by block, never holding an N x M table.

    Returns:
        VerifyReport: ``.passed``, ``.tensors[name]`` (errors, ratio, worst position),
        ``.as_dict()`` (JSON-ready), ``.summary()``, and a table in notebooks.

    Raises:
        CaseError (an AttnlabError) naming the array or option when the case is malformed.
    """
    # One entry per array and option a case holds (``ARRAY_NAMES``, ``OPTION_NAMES``, their
    # order and the case's defaults: tests/test_public_signatures.py holds them equal).
    entries = {
        "q": q, "k": k, "v": v, "out": out, "lse": lse, "do": do, "dq": dq, "dk": dk, "dv": dv,
        "causal": causal, "window_size": window_size, "softcap": softcap,
        "softmax_scale": softmax_scale, "alibi_slopes": alibi_slopes, "sinks": sinks,
        "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
    }  # fmt: skip
    return _judged(entries, layout, factor=factor, atol=atol, memory_budget=memory_budget)


def verify_file(path, *, layout="bshd", factor=2.0, atol=None, memory_budget=None, max_bytes=None):
    """``verify`` on a case file (.npz or .safetensors) holding the arrays and options by name.
    ``max_bytes`` bounds the array data the file may declare (default 2 GiB), checked from its
    headers before any data is read."""
    entries = read_case_file(path, max_bytes)
    return _judged(entries, layout, factor=factor, atol=atol, memory_budget=memory_budget)


def _judged(entries: dict, layout: str, **judging) -> VerifyReport:
    """The verdict, and on a failure whether the case passes read in the other layout."""
    case = make_case(entries, layout)
    report = verify_case(case, **judging)
    if report.passed or case.layout not in OTHER:
        return report
    try:
        other = verify_case(make_case(entries, OTHER[layout]), **judging)
    except CaseError:  # the arrays do not make a case in the other layout
        return report
    hint = layout_hint(layout, report, other)
    return report if hint is None else dataclasses.replace(report, hints=(hint, *report.hints))


def _positive(name: str, value, *, allow_zero: bool) -> float:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise AttnlabError(f"{name}: expected a finite number {bound}, but got {value!r} instead")
    return float(value)


def verify_case(case: Case, *, factor=2.0, atol=None, memory_budget=None) -> VerifyReport:
    """The verdict on a checked case (``make_case``)."""
    factor = _positive("factor", factor, allow_zero=True)
    if atol is not None:
        atol = _positive("atol", atol, allow_zero=True)
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    budget = _positive("memory_budget", budget, allow_zero=False)
    exact = truth(case, budget)
    names = [name for name in TENSORS if name in case.arrays]
    dtypes = {name: baseline_dtype(case, name) for name in names}
    plain = {}
    for dtype in dict.fromkeys(dtypes.values()):  # one plain run per baseline dtype
        want = [name for name in names if dtypes[name] == dtype]
        plain.update(baseline(case, budget, dtype, want))
    tensors = {
        name: judge(name, case, exact[name], plain[name], factor, atol, dtypes[name])
        for name in names
    }
    hints = []
    for name, t in tensors.items():
        if not t.passed and case.layout in OTHER and case.arrays[name].ndim == 3:
            read = reinterpreted(case.arrays[name], case.layout, case.batch).astype(np.float64)
            with np.errstate(invalid="ignore"):
                err = np.abs(read - exact[name])
            hints.append(transposed_hint(name, case.layout, bool(err.max() <= t.tolerance)))
    a = case.arrays
    lengths_q, lengths_k = np.diff(case.cu_q).tolist(), np.diff(case.cu_k).tolist()
    varlen = case.layout == "varlen"
    shape = {
        "batch": case.batch,
        "heads": case.heads,
        "kv_heads": case.kv_heads,
        "seqlen_q": lengths_q if varlen else lengths_q[0],  # one length, or one per sequence
        "seqlen_k": lengths_k if varlen else lengths_k[0],
        "d_k": a["q"].shape[-1],
        "d_v": a["v"].shape[-1],
    }
    return VerifyReport(
        tensors=tensors,
        dtype=case.dtype.name,
        layout=case.layout,
        factor=factor,
        options=case.options.as_dict(),
        shape=shape,
        cu_q=case.cu_q,
        cu_k=case.cu_k,
        hints=tuple(h for h in hints if h),
    )
