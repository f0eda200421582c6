"""FP8 cases: a FlashAttention 3 style kernel's output from float8 q, k, v and their descales.

Shape legend (as ``_case.py``):
    "bshd": q (B, N, h, d_k)   k (B, M, h_kv, d_k)   v (B, M, h_kv, d_v)   out (B, N, h, d_v)
    "bhsd": q (B, h, N, d_k)   ...                                         lse (B, h, N)
    q_descale, k_descale, v_descale   () or (B, h_kv)

The kernel's tensors are the stored float8 values times their descales (``attnlab.flash._fp8``:
a query head takes its key/value head's descale), which float64 holds exactly. The case is
judged as any forward case on those dequantised tensors:

    exact     attention of the dequantised tensors in float64 (``_truth.py``)
    baseline  plain attention of the dequantised tensors rounded into the kernel's compute
              dtype, the dtype it returns out in (bfloat16 for FlashAttention 3; float16 and
              float32 are taken too); the lse's in the wider of that and the lse's own dtype
    verdict   ``_report.judge``, as every case

A dump names its float8 arrays by their dtype: ``.safetensors`` stores F8_E4M3 / F8_E5M2 itself;
``.npz`` cannot name either, so it holds their bytes (uint8, or the 1-byte records ``np.savez``
writes) and the entry ``fp8_format``: "float8_e4m3fn" or "float8_e5m2". FP8 kernels have no
backward here: a dump with gradients is refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.flash._fp8 import DESCALES, FP8, dequantised, read_descale
from attnlab.verifier._baseline import baseline
from attnlab.verifier._case import make_case
from attnlab.verifier._judging import checked_judging, make_report
from attnlab.verifier._options import OPTION_NAMES, CaseError
from attnlab.verifier._report import judge
from attnlab.verifier._truth import truth

__all__ = ["FP8_NAMES", "is_fp8", "verify_fp8"]

FP8_NAMES = (*DESCALES, "fp8_format")
_FORMATS = {dtype.name: dtype for dtype in FP8}
_OUT_DTYPES = ("bfloat16", "float16", "float32")
_VARLEN = ("cu_seqlens_q", "cu_seqlens_k")
_ALLOWED = ("q", "k", "v", "out", "lse", *(n for n in OPTION_NAMES if n not in _VARLEN), *FP8_NAMES)


def is_fp8(entries: dict) -> bool:
    """Whether the entries are an FP8 case: float8 q, k or v, a descale, or ``fp8_format``."""
    if any(entries.get(name) is not None for name in FP8_NAMES):
        return True
    return any(getattr(entries.get(n), "dtype", None) in FP8 for n in ("q", "k", "v"))


def _float8(entries: dict) -> dict:
    """q, k, v as float8 arrays of one format, read through ``fp8_format`` where given."""
    fmt = entries.get("fp8_format")
    if fmt is not None:
        name = str(np.asarray(fmt))
        if name not in _FORMATS:
            raise CaseError(
                f"fp8_format: expected one of {', '.join(_FORMATS)}, but got {name!r} instead"
            )
    arrays = {}
    for name in ("q", "k", "v"):
        if entries.get(name) is None:
            raise CaseError(f"{name}: missing array; an FP8 case needs q, k, v and out")
        arr = np.asarray(entries[name])
        if fmt is not None and arr.dtype.itemsize == 1 and arr.dtype not in FP8:
            arr = np.ascontiguousarray(arr).view(_FORMATS[str(np.asarray(fmt))])
        if arr.dtype not in FP8:
            raise CaseError(
                f"{name}: expected float8_e4m3fn or float8_e5m2 (an FP8 case, as its "
                f"descales or fp8_format say), but got {arr.dtype} instead"
            )
        arrays[name] = arr
    for name in ("k", "v"):
        if arrays[name].dtype != arrays["q"].dtype:
            raise CaseError(
                f"{name}: expected the dtype of q ({arrays['q'].dtype}), as an FP8 kernel "
                f"reads q, k and v in one format, but got {arrays[name].dtype} instead"
            )
    return arrays


def _dequantised(entries: dict, arrays: dict, layout: str) -> dict:
    """q, k, v times their descales, float64, in the case's layout."""
    bhsd = layout == "bhsd"
    seq = {n: np.swapaxes(a, 1, 2) if bhsd else a for n, a in arrays.items()}  # bshd
    if seq["k"].ndim != 4 or seq["q"].ndim != 4:
        raise CaseError(
            f"k: expected 4 axes (B, M, h_kv, d_k) in layout bshd, but got shape "
            f"{arrays['k'].shape} instead"
        )
    batch, kv_heads = seq["k"].shape[0], seq["k"].shape[2]
    out = {}
    for name, descale_name in zip(("q", "k", "v"), DESCALES, strict=True):
        try:
            scale = read_descale(descale_name, entries.get(descale_name), batch, kv_heads)
        except AttnlabError as err:
            raise CaseError(str(err)) from None
        if name == "q" and seq["q"].shape[2] % kv_heads:
            raise CaseError(
                f"k: expected key/value heads h_kv that divide the query heads h = "
                f"{seq['q'].shape[2]} (GQA), but got h_kv = {kv_heads} instead"
            )
        x = dequantised(seq[name], scale)  # (B, rows, heads, d) float64
        out[name] = np.swapaxes(x, 1, 2) if bhsd else x
    return out


def verify_fp8(entries: dict, layout="bshd", *, factor=2.0, atol=None, memory_budget=None):
    """The verdict on an FP8 case (entries by FlashAttention 3's names)."""
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    unknown = sorted(set(entries) - set(_ALLOWED))
    if unknown:
        raise CaseError(
            f"{unknown[0]}: not an entry of an FP8 case (forward only, no varlen); expected "
            f"{', '.join(_ALLOWED)}"
        )
    if entries.get("out") is None:
        raise CaseError("out: missing array; an FP8 case needs q, k, v and out")
    kind = np.asarray(entries["out"]).dtype
    if kind.name not in _OUT_DTYPES:
        raise CaseError(
            f"out: expected bfloat16, float16 or float32 (the FP8 kernel's compute dtype), "
            f"but got {kind} instead"
        )
    fp8 = _float8(entries)
    deq = _dequantised(entries, fp8, layout)
    plain_entries = {n: v for n, v in entries.items() if n not in FP8_NAMES}
    case = make_case({**plain_entries, **deq}, layout)  # q, k, v float64: exact values
    exact = truth(case, budget, forward_only=True)
    tensors = {}
    for name in ("out", "lse"):
        if name not in case.arrays:
            continue
        stored = case.arrays[name].dtype
        dtype = stored if stored.itemsize > kind.itemsize else kind  # the wider of the two
        plain = baseline(case, budget, dtype, [name])[name]
        tensors[name] = judge(name, case, exact[name], plain, factor, atol, dtype)
    extra = {"fp8": fp8["q"].dtype.name, "compute_dtype": kind.name}
    report = make_report(case, tensors, factor, extra=extra)
    return dataclasses.replace(report, dtype=fp8["q"].dtype.name)
