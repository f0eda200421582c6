"""FlashMLA cases: a kernel's dense paged decoding or sparse top-k prefill, judged as any case.

Shape legend (FlashMLA's, ``attnlab.flash.mla``):
    dense:  q (b, s_q, h_q, d)   k_cache (num_blocks, page, h_kv, d)   block_table (b, blocks)
            cache_seqlens (b,)   head_dim_v   out (b, s_q, h_q, dv)    lse (b, h_q, s_q)
    sparse: q (s_q, h_q, d)      kv (s_kv, h_kv, d)   indices (s_q, h_kv, topk)   sm_scale   d_v
            out (s_q, h_q, d_v)  lse, max_logits (s_q, h_q)
    G       h_q / h_kv, the query heads of one key/value head

The exact answers are ``attnlab.flash.mla``'s in float64. The baseline needs the keys each
query sees as the kernel holds them, V the first dv columns of K:

- dense: sequence b's cache rows 0 .. L_b - 1 through its block table, a case of b sequences
  of s_q queries and L_b keys (causal bottom-right on (s_q, L_b), as FlashMLA aligns it);
- sparse: each (query, key/value head) is a sequence of one query row of G heads over its
  valid indices' rows (a key listed twice counts twice); rows with no valid index are exact
  zeros (out 0; lse and max_logits have no finite value) and judged as such.

FlashMLA's lse of a row with no key is +inf; the verdict takes +inf or -inf there. The sparse
``max_logits`` is held to the largest score computed plainly in float32 from the stored inputs.
"""

from __future__ import annotations

import numpy as np

from attnlab.flash.mla import flash_mla_sparse_fwd, flash_mla_with_kvcache
from attnlab.verifier._baseline import baseline
from attnlab.verifier._case import DTYPES, Case
from attnlab.verifier._judging import checked_judging, make_report, verdicts
from attnlab.verifier._options import CaseError, Options, parse_options
from attnlab.verifier._report import judge

__all__ = ["MLA_NAMES", "is_mla", "verify_mla"]

_DENSE = ("q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "out", "lse")
_DENSE_OPTIONS = ("softmax_scale", "causal", "tile_scheduler_metadata", "num_splits")
_SPARSE = ("q", "kv", "indices", "sm_scale", "d_v", "out", "lse", "max_logits")
MLA_NAMES = ("head_dim_v", "kv", "indices", "sm_scale", "d_v", "max_logits")


def is_mla(entries: dict) -> bool:
    return entries.get("head_dim_v") is not None or entries.get("indices") is not None


def _float(entries: dict, name: str, ndim: int) -> np.ndarray:
    if entries.get(name) is None:
        raise CaseError(f"{name}: missing array of this FlashMLA case")
    arr = np.asarray(entries[name])
    if arr.dtype.name not in DTYPES or arr.ndim != ndim or 0 in arr.shape:
        raise CaseError(
            f"{name}: expected {ndim} non-empty axes of float64, float32, float16 or bfloat16, "
            f"but got dtype {arr.dtype} and shape {arr.shape} instead"
        )
    return arr


def _int(entries: dict, name: str, default=None) -> int:
    value = entries.get(name, default)
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "iu":
        raise CaseError(f"{name}: expected one integer, but got {value!r} instead")
    return int(arr)


def _only(entries: dict, allowed: tuple) -> None:
    unknown = sorted(set(entries) - set(allowed))
    if unknown:
        raise CaseError(
            f"{unknown[0]}: not an entry of this FlashMLA case; expected {', '.join(allowed)}"
        )


def _shaped(entries: dict, name: str, want: tuple) -> np.ndarray:
    arr = _float(entries, name, len(want))
    if arr.shape != want:
        raise CaseError(f"{name}: expected shape {want}, but got {arr.shape} instead")
    return arr


def _verify_dense(entries: dict, factor, atol, budget):
    _only(entries, _DENSE + _DENSE_OPTIONS)
    q, cache = _float(entries, "q", 4), _float(entries, "k_cache", 4)
    if cache.dtype != q.dtype:
        raise CaseError(f"k_cache: expected q's dtype {q.dtype}, but got {cache.dtype} instead")
    b, s_q, h_q, _ = q.shape
    dv = _int(entries, "head_dim_v")
    opt = parse_options({n: entries.get(n) for n in ("causal", "softmax_scale")}, b, h_q)
    for name in ("block_table", "cache_seqlens"):
        if entries.get(name) is None:
            raise CaseError(f"{name}: missing array; a dense FlashMLA case needs it")
    lens = np.asarray(entries.get("cache_seqlens"))
    if lens.dtype.kind in "iu" and (lens == 0).any():
        raise CaseError("cache_seqlens: expected every sequence to hold a key, but got a 0")
    out64, lse64 = flash_mla_with_kvcache(
        q.astype(np.float64), cache.astype(np.float64), entries.get("block_table"), lens, dv,
        softmax_scale=opt.softmax_scale, causal=opt.causal,
    )  # fmt: skip
    out = _shaped(entries, "out", out64.shape)
    table, page = np.asarray(entries["block_table"]).astype(np.int64), cache.shape[1]
    keys = [cache[table[i, np.arange(n) // page], np.arange(n) % page] for i, n in enumerate(lens)]
    k = np.concatenate(keys).transpose(1, 0, 2)  # (h_kv, T_k, d)
    arrays = {"q": _heads_first(q), "k": k, "v": k[..., :dv], "out": _heads_first(out)}
    exact = {"out": _heads_first(out64)}
    if entries.get("lse") is not None:
        arrays["lse"] = _shaped(entries, "lse", lse64.shape).transpose(1, 0, 2).reshape(h_q, -1)
        exact["lse"] = _finite_or_empty(lse64.transpose(1, 0, 2).reshape(h_q, -1))
    cu_q = np.arange(b + 1, dtype=np.int64) * s_q
    cu_k = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    case = Case(arrays, cu_q, cu_k, opt, "mla")
    tensors = verdicts(case, exact, budget, factor, atol)
    extra = {"mla": "dense", "head_dim_v": dv, "cache_seqlens": lens.tolist()}
    return make_report(case, tensors, factor, extra=extra)


def _heads_first(x: np.ndarray) -> np.ndarray:
    """(b, s_q, h, d) -> (h, b * s_q, d)."""
    return np.moveaxis(x, 2, 0).reshape(x.shape[2], -1, x.shape[-1])


def _finite_or_empty(lse: np.ndarray) -> np.ndarray:
    return np.where(np.isposinf(lse), -np.inf, lse)  # FlashMLA's +inf: a row with no key


def _sparse_rows(q, kv, idx, h_kv):
    """Per (query, key/value head) row: its valid key rows; q as (G, s_q * h_kv, d)."""
    s_q, h_q, d = q.shape
    valid = (idx >= 0) & (idx < kv.shape[0])  # (s_q, h_kv, topk)
    rows = valid.reshape(s_q * h_kv, -1)  # (R, topk)
    heads = np.repeat(np.arange(h_kv)[None, :], s_q, axis=0).reshape(-1)  # (R,)
    flat = idx.reshape(s_q * h_kv, -1)
    keys = [kv[flat[r][rows[r]], heads[r]] for r in range(s_q * h_kv)]  # [(n_r, d)]
    packed_q = q.reshape(s_q * h_kv, h_q // h_kv, d).transpose(1, 0, 2)  # (G, R, d)
    return packed_q, keys, rows.any(axis=1)


def _sparse_case(entries: dict):
    _only(entries, _SPARSE)
    q, kv = _float(entries, "q", 3), _float(entries, "kv", 3)
    if kv.dtype != q.dtype:
        raise CaseError(f"kv: expected q's dtype {q.dtype}, but got {kv.dtype} instead")
    scale = entries.get("sm_scale")
    if scale is not None:
        arr = np.asarray(scale)
        if arr.ndim != 0 or arr.dtype.kind not in "iuf":
            raise CaseError(f"sm_scale: expected one number, but got {scale!r} instead")
        scale = float(arr)
    dv = _int(entries, "d_v", 512)
    exact = flash_mla_sparse_fwd(
        q.astype(np.float64), kv.astype(np.float64), entries.get("indices"), scale, dv
    )
    return q, kv, np.asarray(entries["indices"]).astype(np.int64), scale, dv, exact


def _verify_sparse(entries: dict, factor, atol, budget):
    q, kv, idx, scale, dv, (out64, max64, lse64) = _sparse_case(entries)
    s_q, h_q, _ = q.shape
    h_kv = kv.shape[1]
    g = h_q // h_kv
    packed_q, keys, seen = _sparse_rows(q, kv, idx, h_kv)
    seq = np.flatnonzero(seen)  # the rows with a key: one sequence each

    def packed(x):  # (s_q, h_q[, w]) -> (G, R[, w])
        return np.moveaxis(x.reshape((s_q * h_kv, g) + x.shape[2:]), 1, 0)

    kernel = {"out": packed(_shaped(entries, "out", out64.shape))}
    exact = {"out": packed(out64)}
    for name, value in (("lse", lse64), ("max_logits", max64)):
        if entries.get(name) is not None:
            kernel[name] = packed(_shaped(entries, name, value.shape))
            exact[name] = _finite_or_empty(packed(value.astype(np.float64)))
    k = np.concatenate([keys[r] for r in seq])[None]  # (1, T_k, d)
    cu_q = np.arange(seq.size + 1, dtype=np.int64)
    cu_k = np.concatenate([[0], np.cumsum([len(keys[r]) for r in seq])]).astype(np.int64)
    opt = Options(softmax_scale=scale)
    sub = {"q": packed_q[:, seq], "k": k, "v": k[..., :dv]}
    sub.update({n: kernel[n][:, seq] for n in ("out", "lse") if n in kernel})
    case = Case(sub, cu_q, cu_k, opt, "mla")
    everything = np.arange(s_q * h_kv + 1, dtype=np.int64)
    whole = Case({**kernel, "q": packed_q}, everything, everything, opt, "mla")
    tensors = {}
    for name in kernel:
        stored = kernel[name].dtype
        dtype = stored if stored.itemsize > q.dtype.itemsize else q.dtype
        plain = np.array(exact[name])  # rows with no key: the exact 0 / -inf is the plain too
        if name == "max_logits":
            plain[:, seq] = _plain_max(packed_q[:, seq], keys, seq, scale)
        else:
            plain[:, seq] = baseline(case, budget, dtype, [name])[name]
        tensors[name] = judge(name, whole, exact[name], plain, factor, atol, dtype)
    extra = {"mla": "sparse", "d_v": dv, "rows_without_key": int((~seen).sum())}
    return make_report(case, tensors, factor, extra=extra)


def _plain_max(q, keys, seq, scale) -> np.ndarray:
    """The largest scaled score of each (head, row), from the stored inputs in float32."""
    d = q.shape[-1]
    s = np.float32(1 / np.sqrt(d) if scale is None else scale)
    found = np.empty(q.shape[:2])  # (G, rows)
    for j, r in enumerate(seq):
        found[:, j] = (q[:, j].astype(np.float32) @ keys[r].astype(np.float32).T * s).max(-1)
    return found.astype(np.float32).astype(np.float64)


def verify_mla(entries: dict, layout="bshd", *, factor=2.0, atol=None, memory_budget=None):
    """The verdict on a FlashMLA case: dense (head_dim_v given) or sparse (indices given)."""
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    if layout != "bshd":
        raise CaseError("layout: a FlashMLA case is laid out as FlashMLA's, bshd")
    if entries.get("indices") is not None:
        return _verify_sparse(entries, factor, atol, budget)
    return _verify_dense(entries, factor, atol, budget)
