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
import os

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._threads import pool_map
from attnlab.verifier._baseline import baseline, score_pairs
from attnlab.verifier._case import Case, CaseError, make_case
from attnlab.verifier._cluster import cluster_answers
from attnlab.verifier._dropout_stats import dropout_variance, statistical
from attnlab.verifier._fp8 import is_fp8, verify_fp8
from attnlab.verifier._hint import OTHER, layout_hint, reinterpreted, transposed_hint
from attnlab.verifier._judging import (
    DEFAULT_MEMORY_BUDGET,
    baseline_plan,
    checked_judging,
    make_report,
    verdicts,
)
from attnlab.verifier._kvcache import is_kvcache, verify_kvcache
from attnlab.verifier._load import read_case_file
from attnlab.verifier._mla import is_mla, verify_mla
from attnlab.verifier._repeat import repeat_check
from attnlab.verifier._report import VerifyReport
from attnlab.verifier._rounding import load_ahead
from attnlab.verifier._splits import is_split, verify_splits
from attnlab.verifier._truth import truth

__all__ = ["DEFAULT_MEMORY_BUDGET", "verify", "verify_case", "verify_file"]


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
    dropout_p=None,
    dropout_mask=None,
    S_dmask=None,
    k_cache=None,
    v_cache=None,
    cache_seqlens=None,
    block_table=None,
    rotary_cos=None,
    rotary_sin=None,
    rotary_interleaved=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    k_cache_out=None,
    v_cache_out=None,
    factor=2.0,
    atol=None,
    memory_budget=None,
    repeat=None,
    client=None,
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
        k_cache, v_cache, cache_seqlens, block_table, rotary_cos, rotary_sin,
            rotary_interleaved, cache_batch_idx, cache_leftpad: a KV-cache case, judged as
            ``flash_attn_with_kvcache`` (k and v are then the new rows); k_cache_out,
            v_cache_out: the caches as the kernel left them after its append.
        dropout_p, dropout_mask, S_dmask: dropout, judged exactly under the kernel's keep
            mask ((B, h, N, M) booleans, or FlashAttention's S_dmask, negative = dropped), or
            without one statistically (the output's scaling and spread).
        factor: how many times the baseline's error the kernel may err (2, as FlashAttention).
        atol: the allowance added to the bound; None for 2 ulps of each tensor's dtype at its
            scale (see ``attnlab.verifier._report``).
        memory_budget: bytes one step's score tables may take (default 32 MiB): larger cases
            run block by block, never holding an N x M table.
        repeat: None, or a second run's entries (a dict by the same names): every array must
            equal this run's bit for bit, FlashAttention's determinism test.
        client: None, or a ``dask.distributed.Client``: each sequence's rows for a range of
            key/value heads run as a task on its workers, with the verdict of a local run.

    Returns:
        VerifyReport: ``.passed``, ``.tensors[name]`` (errors, ratio, worst position),
        ``.as_dict()`` (JSON-ready), ``.summary()``, and a table in notebooks.

    Raises:
        CaseError (an AttnlabError) naming the array or option when the case is malformed.
    """
    # One entry per array and option a case holds, in the case's order (ARRAY_NAMES,
    # OPTION_NAMES, DROPOUT_NAMES, KV_NAMES): tests/test_public_signatures.py holds them equal.
    entries = {
        "q": q, "k": k, "v": v, "out": out, "lse": lse, "do": do, "dq": dq, "dk": dk, "dv": dv,
        "causal": causal, "window_size": window_size, "softcap": softcap,
        "softmax_scale": softmax_scale, "alibi_slopes": alibi_slopes, "sinks": sinks,
        "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
        "dropout_p": dropout_p, "dropout_mask": dropout_mask, "S_dmask": S_dmask,
        "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens,
        "block_table": block_table, "rotary_cos": rotary_cos, "rotary_sin": rotary_sin,
        "rotary_interleaved": rotary_interleaved, "cache_batch_idx": cache_batch_idx,
        "cache_leftpad": cache_leftpad, "k_cache_out": k_cache_out, "v_cache_out": v_cache_out,
    }  # fmt: skip
    judging = {"factor": factor, "atol": atol, "memory_budget": memory_budget}
    return _judged(entries, layout, repeat, client=_checked_client(client), **judging)


def _checked_client(client):
    if client is None:
        return None
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("a client needs dask.distributed: pip install 'attnlab[dask]'") from None
    if not isinstance(client, Client):
        raise AttnlabError(
            f"client: expected a dask.distributed Client or None, but got {client!r} instead"
        )
    return client


def verify_file(
    path,
    *,
    layout="bshd",
    factor=2.0,
    atol=None,
    memory_budget=None,
    max_bytes=None,
    repeat=None,
    client=None,
):
    """``verify`` on a case file (.npz or .safetensors) holding the arrays and options by name.
    ``max_bytes`` bounds the array data the file may declare (default 2 GiB), checked from its
    headers before any data is read. ``repeat``: a second case file of the same run, which
    must equal this one bit for bit."""
    entries = read_case_file(path, max_bytes)
    again = None if repeat is None else read_case_file(repeat, max_bytes)
    judging = {"factor": factor, "atol": atol, "memory_budget": memory_budget}
    return _judged(entries, layout, again, client=_checked_client(client), **judging)


def _judged(entries: dict, layout: str, repeat=None, client=None, **judging) -> VerifyReport:
    """The verdict, the repeat's comparison, and on a failure whether the case passes read in
    the other layout."""
    entries = {name: value for name, value in entries.items() if value is not None}
    same = None if repeat is None else repeat_check(entries, repeat)  # refused before any work
    if is_split(entries):  # each partial state judged, then the rest as any case

        def rest(whole, form):
            return _judged(whole, form, None, client, **judging)

        report = verify_splits(entries, layout, rest, **judging)
        return report if same is None else dataclasses.replace(report, repeat=same)
    kinds = ((is_mla, verify_mla), (is_kvcache, verify_kvcache), (is_fp8, verify_fp8))
    kind = next((judged for test, judged in kinds if test(entries)), None)
    if kind is not None:  # a case kind of its own: its exact answer from attnlab.flash
        report = kind(entries, layout, **judging)
        return report if same is None else dataclasses.replace(report, repeat=same)
    case = make_case(entries, layout)
    report = verify_case(case, client=client, **judging)
    if same is not None:
        report = dataclasses.replace(report, repeat=same)
    if all(t.passed for t in report.tensors.values()) or case.layout not in OTHER:
        return report
    try:
        other_case = make_case(entries, OTHER[layout])
        if _forward_fails(other_case, client, **judging):
            return report  # then its whole verdict fails: no hint
        other = verify_case(other_case, client=client, **judging)
    except CaseError:  # the arrays do not make a case in the other layout
        return report
    hint = layout_hint(layout, report, other)
    return report if hint is None else dataclasses.replace(report, hints=(hint, *report.hints))


def _forward_fails(case: Case, client, *, factor, atol, memory_budget) -> bool:
    """Whether the case's forward tensors (out, lse) fail, judged exactly as ``verify_case``
    judges them: then its verdict fails whatever the gradients, and the layout hint needs no
    backward (a failing case of 8 heads of 4,096 rows read in the other layout is 4,096 heads
    of 8 rows, whose backward and judging took about 1 s of CPU). A dropout or Dask case goes
    the whole way."""
    if client is not None or case.dropout is not None or not case.backward:
        return False
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    exact = truth(case, budget, forward_only=True)
    tensors = verdicts(case, exact, budget, factor, atol, only=tuple(exact))
    return not all(t.passed for t in tensors.values())


def verify_case(
    case: Case, *, factor=2.0, atol=None, memory_budget=None, client=None
) -> VerifyReport:
    """The verdict on a checked case (``make_case``); with a Dask ``client``, its sequences
    and key/value heads computed as tasks on the cluster (``_cluster.py``)."""
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    masked = case.dropout is not None and case.dropout.keep is not None
    plain = None
    if client is None and any(dtype.itemsize == 2 for dtype, _ in baseline_plan(case)):
        load_ahead(score_pairs(case))  # numba's load beside the exact answer's work
    if client is not None:
        exact, plain = cluster_answers(case, budget, client, baseline_plan(case), masked)
    elif masked:  # under the kernel's keep mask: the float64 plain answer with that mask
        exact = baseline(case, budget, np.float64, stored=False)
    else:
        exact = truth(case, budget)
    tensors = verdicts(case, exact, budget, factor, atol, plain)
    if case.dropout is not None and not masked:  # no mask: out is judged statistically
        kernel = case.arrays["out"].astype(np.float64)
        variance = dropout_variance(case, budget)
        tensors["out"] = statistical(tensors["out"], kernel, exact["out"], variance)
    failed = [
        name
        for name, t in tensors.items()
        if not t.passed and case.layout in OTHER and case.arrays[name].ndim == 3
    ]

    def hint(name):  # whether the failing tensor is right read in the other layout
        read = reinterpreted(case.arrays[name], case.layout, case.batch).astype(np.float64)
        with np.errstate(invalid="ignore"):
            err = np.abs(read - exact[name])
        return transposed_hint(name, case.layout, bool(err.max() <= tensors[name].tolerance))

    with pool_map(min(len(failed), os.cpu_count() or 1), len(failed)) as each:
        hints = each(hint, failed)  # a tensor a thread: numpy's passes release the GIL
    return make_report(case, tensors, factor, hints=tuple(h for h in hints if h))
