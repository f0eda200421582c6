"""KV-cache cases: a kernel's ``flash_attn_with_kvcache`` output judged against the exact one.

Shape legend:
    q (B, N, h, d_k)              out (B, N, h, d_v)            lse (B, h, N)
    k_cache, v_cache              (B_c, S, h_kv, d) contiguous, or pages (P, page, h_kv, d)
                                  with block_table (B, max_blocks)
    k, v (new rows)               (B, N_new, h_kv, d)
    cache_seqlens (B,)            L_b: rows in sequence b's cache before the append
    M_b                           L_b + N_new - leftpad_b: the keys sequence b attends to

The exact answer is ``attnlab.flash.flash_attn_with_kvcache`` in float64 (on float64 copies of
the caches, which it appends to: those copies are the exact caches after the append). The
baseline needs each sequence's keys as the kernel holds them: the cache rows leftpad_b ..
L_b + N_new - 1 after the append (new rows turned by rotary, in the cache's dtype), and q
turned at FlashAttention's positions. Packed as a case of B sequences of N queries and M_b keys,
they go through the same plain attention and verdict as any case; masks, windows and ALiBi are
aligned bottom-right on (N, M_b), as FlashAttention aligns them.

``k_cache_out`` and ``v_cache_out``, the caches as the kernel left them, are judged against the
exact caches, rows located as (cache sequence or page, head, row).
"""

from __future__ import annotations

import numpy as np

from attnlab.flash import apply_rotary, flash_attn_with_kvcache
from attnlab.verifier._case import DTYPES, Case
from attnlab.verifier._judging import checked_judging, make_report, verdicts
from attnlab.verifier._options import CaseError, Options, parse_options
from attnlab.verifier._report import judge

__all__ = ["KV_NAMES", "is_kvcache", "verify_kvcache"]

KV_NAMES = (
    "k_cache",
    "v_cache",
    "cache_seqlens",
    "block_table",
    "rotary_cos",
    "rotary_sin",
    "rotary_interleaved",
    "cache_batch_idx",
    "cache_leftpad",
    "k_cache_out",
    "v_cache_out",
)
_OPTIONS = ("causal", "window_size", "softcap", "softmax_scale", "alibi_slopes")
_ALLOWED = ("q", "k", "v", "out", "lse", *KV_NAMES, *_OPTIONS)
_INDEXES = ("cache_seqlens", "block_table", "cache_batch_idx", "cache_leftpad")


def is_kvcache(entries: dict) -> bool:
    return entries.get("k_cache") is not None or entries.get("v_cache") is not None


def _float_array(name: str, entries: dict, ndim: int) -> np.ndarray:
    arr = np.asarray(entries[name])
    if arr.dtype.name not in DTYPES:
        raise CaseError(
            f"{name}: expected float64, float32, float16 or bfloat16, but got {arr.dtype} instead"
        )
    if arr.ndim != ndim or 0 in arr.shape:
        raise CaseError(f"{name}: expected {ndim} non-empty axes, but got shape {arr.shape}")
    return arr


def _check(entries: dict) -> None:
    unknown = sorted(set(entries) - set(_ALLOWED))
    if unknown:
        raise CaseError(
            f"{unknown[0]}: not an entry of a KV-cache case; expected {', '.join(_ALLOWED)}"
        )
    for name in ("q", "k_cache", "v_cache", "out"):
        if entries.get(name) is None:
            raise CaseError(
                f"{name}: missing array; a KV-cache case needs q, k_cache, v_cache, out"
            )


def _index(entries: dict, name: str, batch: int):
    if entries.get(name) is None:
        return None
    arr = np.asarray(entries[name])
    if arr.dtype.kind not in "iu":
        raise CaseError(f"{name}: expected integers, but got dtype {arr.dtype} instead")
    if name == "cache_seqlens" and arr.ndim == 0:
        arr = np.full(batch, int(arr))  # one length for every sequence
    return arr.astype(np.int64)


def _exact(entries: dict, opt: Options, batch: int):
    """FlashAttention's answer in float64, and the float64 caches after the append."""
    f64 = {n: np.array(entries[n], np.float64) for n in ("q", "k", "v") if n in entries}
    kc = np.array(entries["k_cache"], np.float64)  # copies: the append writes into them
    vc = np.array(entries["v_cache"], np.float64)
    rot = {
        n: np.asarray(entries[n], np.float64)
        for n in ("rotary_cos", "rotary_sin")
        if entries.get(n) is not None
    }
    out, lse = flash_attn_with_kvcache(
        f64["q"], kc, vc, f64.get("k"), f64.get("v"), **rot,
        **{n: _index(entries, n, batch) for n in _INDEXES},
        softmax_scale=opt.softmax_scale, causal=opt.causal, window_size=opt.window_size,
        softcap=opt.softcap, rotary_interleaved=bool(entries.get("rotary_interleaved", True)),
        alibi_slopes=opt.alibi_slopes, return_softmax_lse=True,
    )  # fmt: skip
    return out, lse, kc, vc


def _keys(entries: dict, cache: np.ndarray, batch: int, n_new: int):
    """Each sequence's live cache rows after the append, [(M_b, h_kv, d)], and L (B,)."""
    table = _index(entries, "block_table", batch)
    capacity = cache.shape[1] * (1 if table is None else table.shape[1])
    lens = _index(entries, "cache_seqlens", batch)
    lens = np.full(batch, capacity - n_new) if lens is None else lens
    pad = _index(entries, "cache_leftpad", batch)
    pad = np.zeros(batch, np.int64) if pad is None else pad
    which = _index(entries, "cache_batch_idx", batch)
    which = np.arange(batch) if which is None else which
    rows = []
    for b in range(batch):
        idx = np.arange(pad[b], lens[b] + n_new)  # (M_b,) logical rows
        if table is None:
            rows.append(cache[which[b], idx])
        else:
            page = cache.shape[1]
            rows.append(cache[table[b, idx // page], idx % page])
    return rows, lens


def _turned_q(entries, q64, opt: Options, lens) -> np.ndarray:
    """q (B, N, h, d) turned by rotary at FlashAttention's positions, in float64."""
    if entries.get("rotary_cos") is None:
        return q64
    local = opt.causal or tuple(opt.window_size) != (-1, -1)
    steps = np.arange(q64.shape[1]) if local else np.zeros(q64.shape[1], np.int64)
    cos, sin = (np.asarray(entries[n], np.float64) for n in ("rotary_cos", "rotary_sin"))
    interleaved = bool(entries.get("rotary_interleaved", True))
    return apply_rotary(q64, cos, sin, lens[:, None] + steps, interleaved)


def _pack_bshd(x: np.ndarray) -> np.ndarray:
    """(B, R, h, d) -> (h, B * R, d)."""
    return np.moveaxis(x, 2, 0).reshape(x.shape[2], -1, x.shape[-1])


def _cache_verdicts(entries, exact_caches, factor, atol) -> dict:
    """k_cache_out and v_cache_out against the exact caches after the append."""
    found = {}
    for name, exact in zip(("k_cache_out", "v_cache_out"), exact_caches, strict=True):
        if entries.get(name) is None:
            continue
        arr = _float_array(name, entries, 4)
        if arr.shape != exact.shape:
            raise CaseError(
                f"{name}: expected the cache's shape {exact.shape}, but got {arr.shape} instead"
            )
        packed = _pack_bshd(arr)  # (h_kv, B_c * S, d): a row per cache row
        cu = np.arange(arr.shape[0] + 1, dtype=np.int64) * arr.shape[1]
        case = Case({name: packed, "q": packed}, cu, cu, Options(), "kvcache")
        exact_p = _pack_bshd(exact)
        plain = exact_p.astype(arr.dtype).astype(np.float64)  # the new rows in its dtype
        found[name] = judge(name, case, exact_p, plain, factor, atol, arr.dtype)
    return found


def verify_kvcache(entries: dict, layout="bshd", *, factor=2.0, atol=None, memory_budget=None):
    """The verdict on a KV-cache case (entries by FlashAttention's names)."""
    factor, atol, budget = checked_judging(factor, atol, memory_budget)
    if layout != "bshd":
        raise CaseError("layout: a KV-cache case is laid out as FlashAttention's, bshd")
    _check(entries)
    q = _float_array("q", entries, 4)
    batch, n, h, _ = q.shape
    for name in ("k_cache", "v_cache", "k", "v"):
        if entries.get(name) is not None and _float_array(name, entries, 4).dtype != q.dtype:
            raise CaseError(
                f"{name}: expected the dtype of q ({q.dtype.name}), as a kernel reads q and its "
                f"cache in one dtype, but got {np.asarray(entries[name]).dtype} instead"
            )
    opt = parse_options({n_: entries.get(n_) for n_ in _OPTIONS}, batch, h)
    out64, lse64, kc, vc = _exact(entries, opt, batch)
    out = _float_array("out", entries, 4)
    if out.shape != out64.shape:
        raise CaseError(f"out: expected shape (B, N, h, d_v) = {out64.shape}, but got {out.shape}")
    n_new = 0 if entries.get("k") is None else np.asarray(entries["k"]).shape[1]
    kept = [_keys(entries, c.astype(q.dtype), batch, n_new) for c in (kc, vc)]
    (ks, lens), (vs, _) = kept
    qt = _turned_q(entries, np.asarray(q, np.float64), opt, lens).astype(q.dtype)
    arrays = {
        "q": _pack_bshd(qt),  # (h, B * N, d_k)
        "k": np.concatenate(ks).transpose(1, 0, 2),  # (h_kv, T_k, d_k)
        "v": np.concatenate(vs).transpose(1, 0, 2),  # (h_kv, T_k, d_v)
        "out": _pack_bshd(out),  # (h, B * N, d_v)
    }
    exact = {"out": _pack_bshd(out64)}
    if entries.get("lse") is not None:
        lse = _float_array("lse", entries, 3)
        if lse.shape != (batch, h, n):
            raise CaseError(f"lse: expected shape (B, h, N) = {(batch, h, n)}, got {lse.shape}")
        arrays["lse"] = lse.transpose(1, 0, 2).reshape(h, -1)  # (h, B * N)
        exact["lse"] = lse64.transpose(1, 0, 2).reshape(h, -1)
    cu_q = np.arange(batch + 1, dtype=np.int64) * n
    cu_k = np.concatenate([[0], np.cumsum([len(x) for x in ks])]).astype(np.int64)
    case = Case(arrays, cu_q, cu_k, opt, "kvcache")
    tensors = verdicts(case, exact, budget, factor, atol)
    tensors.update(_cache_verdicts(entries, (kc, vc), factor, atol))
    extra = {"cache_seqlens": lens.tolist(), "new_rows": n_new}
    extra["rotary"] = entries.get("rotary_cos") is not None
    extra["paged"] = entries.get("block_table") is not None
    return make_report(case, tensors, factor, extra=extra)
