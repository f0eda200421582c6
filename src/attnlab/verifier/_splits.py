"""Split-K cases: a kernel's partial states over key ranges, each judged, and its merged output.

Shape legend (as ``_case.py``; S partial states, one per key range):
    "bshd": out_partials (S, B, N, h, d_v)   "bhsd": out_partials (S, B, h, N, d_v)
    lse_partials (S, B, h, N)                kv_splits (S + 1,): key boundaries 0 = m_0 <= ... = M

A split-K kernel (FlashAttention's split-KV decoding, FlashInfer's cascade) attends each query
to keys m_s .. m_{s+1} - 1 alone, keeps that partial output and its log-sum-exp, and merges
them (``attnlab.merge_attention_states``). Each partial is judged as a case of its own: the
same q against k[m_s:m_{s+1}] and v[m_s:m_{s+1}], its rows that see none of those keys
output 0 and lse -inf. The kernel's ``out`` (and ``lse``) are judged as the whole case's.

The options keep their meaning over the whole key axis: bottom-right alignment puts query i's
window at i + M - N - left .. i + M - N + right, which on the slice of L = m_{s+1} - m_s keys
is the bottom-right window of (N, L) moved right by M - m_{s+1} (so ``causal`` becomes
``window_size=(-1, M - m_{s+1})``). ALiBi's distances and sinks are not split this way, so a
split case with either is refused, as are varlen, dropout and gradients.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from attnlab.verifier._case import make_case
from attnlab.verifier._judging import checked_judging, verdicts
from attnlab.verifier._options import CaseError, parse_options
from attnlab.verifier._truth import truth

__all__ = ["SPLIT_NAMES", "is_split", "verify_splits"]

SPLIT_NAMES = ("out_partials", "lse_partials", "kv_splits")
_REFUSED = ("alibi_slopes", "sinks", "cu_seqlens_q", "cu_seqlens_k", "dropout_p", "do")


def is_split(entries: dict) -> bool:
    return any(entries.get(name) is not None for name in SPLIT_NAMES)


def _boundaries(entries: dict, m: int) -> list[int]:
    arr = np.asarray(entries["kv_splits"])
    ok = arr.ndim == 1 and arr.size >= 2 and arr.dtype.kind in "iu"
    if not ok or arr[0] != 0 or arr[-1] != m or (np.diff(arr) < 0).any():
        raise CaseError(
            f"kv_splits: expected S + 1 integer key boundaries rising from 0 to M = {m}, but "
            f"got {arr.tolist() if arr.size <= 8 else arr.shape} instead"
        )
    return [int(x) for x in arr]


def _window(opts, m: int, stop: int) -> tuple[int, int]:
    """The whole case's window, as FlashAttention's (left, right) on the slice ending at key
    ``stop``: bottom-right on the slice, moved right by M - stop."""
    left, right = opts.window_size
    right = 0 if opts.causal else right
    shift = m - stop
    if left != -1 and left - shift < 0:
        raise CaseError(
            f"kv_splits: expected each split to end within the window's left = {left} keys "
            f"of M = {m} (its window then stays a window on the slice), but got a split "
            f"ending at key {stop} instead; judge such a windowed case without kv_splits"
        )
    return (-1 if left == -1 else left - shift, -1 if right == -1 else right + shift)


def _split_entries(entries: dict, layout: str, s: int, start: int, stop: int, opts, m: int):
    axis = 1 if layout == "bshd" else 2  # the key axis of k and v
    part = {n: v for n, v in entries.items() if n not in (*SPLIT_NAMES, "out", "lse")}
    part["k"] = np.take(entries["k"], np.arange(start, stop), axis=axis)
    part["v"] = np.take(entries["v"], np.arange(start, stop), axis=axis)
    part["out"] = np.asarray(entries["out_partials"])[s]
    if entries.get("lse_partials") is not None:
        part["lse"] = np.asarray(entries["lse_partials"])[s]
    part["causal"] = False
    part["window_size"] = _window(opts, m, stop)
    return part


def split_verdicts(entries: dict, layout: str, factor=2.0, atol=None, memory_budget=None):
    """Each partial state's verdicts, named out_partials[s] and lse_partials[s]."""
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    for name in ("out_partials", "kv_splits"):
        if entries.get(name) is None:
            raise CaseError(f"{name}: missing; a split case needs out_partials and kv_splits")
    refused = [n for n in _REFUSED if entries.get(n) is not None]
    if refused:
        raise CaseError(
            f"{refused[0]}: not taken with kv_splits (its meaning does not split by keys); "
            "judge the merged output alone"
        )
    k = np.asarray(entries["k"])
    m = k.shape[1 if layout == "bshd" else 2] if k.ndim == 4 else -1
    bounds = _boundaries(entries, m)
    parts = np.asarray(entries["out_partials"])
    if parts.shape[:1] != (len(bounds) - 1,):
        raise CaseError(
            f"out_partials: expected {len(bounds) - 1} partial states (one per kv_splits "
            f"range) on axis 0, but got shape {parts.shape} instead"
        )
    opts = parse_options(entries, 1, 1)  # the window's edges; heads are checked per split
    tensors = {}
    for s, (start, stop) in enumerate(itertools.pairwise(bounds)):
        if stop == start:
            continue  # an empty range: the kernel has nothing to be judged on
        case = make_case(_split_entries(entries, layout, s, start, stop, opts, m), layout)
        exact = truth(case, budget, forward_only=True)
        for name, t in verdicts(case, exact, budget, factor, atol).items():
            whole = f"{name}_partials[{s}]"
            tensors[whole] = dataclasses.replace(t, name=whole)
    return tensors


def verify_splits(entries: dict, layout: str, verify_rest, **judging):
    """The whole case's report (``verify_rest(entries, layout)`` on the entries without the
    split ones: out, lse as any case), with each partial state's verdicts added."""
    tensors = split_verdicts(entries, layout, **judging)
    rest = {n: v for n, v in entries.items() if n not in SPLIT_NAMES}
    report = verify_rest(rest, layout)
    bounds = [int(x) for x in np.asarray(entries["kv_splits"])]
    options = {**report.options, "kv_splits": bounds}
    return dataclasses.replace(report, tensors={**report.tensors, **tensors}, options=options)
