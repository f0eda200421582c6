"""Attention with one bug planted on purpose: the float64 reference the diagnosis re-runs.

Shape legend: as ``_case.py``; P probe rows of one sequence (their indices ``rows`` within
it), M that sequence's keys.

``Spec`` holds everything a forward pass reads (the scale, the band of keys each row sees and
where it is aligned, ALiBi, softcap and where it is applied, sinks, which key/value head each
query head reads); ``exact_spec`` is the case as FlashAttention defines it, and each
hypothesis in ``_diagnosis.py`` is that spec with one field changed. ``attend`` computes out
and lse of the probe rows densely (P x M scores per head, P chosen small), so every
hypothesis costs a sliver of the verdict. ``partial_sums`` gives each key block's share of the
softmax, from which the answer without any one block follows without another pass.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = [
    "Spec",
    "accumulated",
    "attend",
    "exact_spec",
    "partial_sums",
    "probe_inputs",
    "raw_scores",
]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One forward pass's definition. ``left``/``right``: the band's reach (None: no limit),
    ``shift``: where row i's diagonal falls (M - N bottom-right, 0 top-left)."""

    scale: float
    left: int | None
    right: int | None
    top_left: bool
    slopes: np.ndarray | None  # (h,) ALiBi slopes of this sequence
    softcap: float
    cap_first: bool  # the cap applied before the scale: c tanh(q.k / c) * scale
    sinks: np.ndarray | None  # (h,)
    kv_of: np.ndarray  # (h,) the key/value head each query head reads


def exact_spec(case, b: int) -> Spec:
    """Sequence ``b`` of ``case`` as FlashAttention defines it."""
    opt = case.options
    left, right = opt.window
    g = case.group[1]
    return Spec(
        scale=opt.softmax_scale or 1.0 / math.sqrt(case.arrays["q"].shape[-1]),
        left=None if left < 0 else left,
        right=None if right < 0 else right,
        top_left=False,
        slopes=None if opt.alibi_slopes is None else opt.alibi_slopes[b],
        softcap=opt.softcap,
        cap_first=False,
        sinks=opt.sinks,
        kv_of=np.arange(case.heads) // g,
    )


def probe_inputs(case, qs, ks, rows):
    """float64 q (h, P, d_k) of the probe rows, k (h_kv, M, d_k) and v (h_kv, M, d_v)."""
    a = case.arrays
    q = a["q"][:, qs[0] + rows].astype(np.float64)  # (h, P, d_k)
    k = a["k"][:, ks[0] : ks[1]].astype(np.float64)  # (h_kv, M, d_k)
    v = a["v"][:, ks[0] : ks[1]].astype(np.float64)  # (h_kv, M, d_v)
    return q, k, v


def raw_scores(spec: Spec, q, k) -> np.ndarray:
    """(h, P, M) q . k of each query head with the key/value head ``spec`` maps it to."""
    return _per_kv(spec.kv_of, q, k.swapaxes(-1, -2))


def _per_kv(kv_of: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(h, P, Y): a (h, P, X) of each query head times b (h_kv, X, Y) of its key/value head.
    The heads are grouped by key/value head (g each, in either mapping), so b is never copied
    per query head: one product per key/value head, over its g x P rows."""
    h, p = a.shape[:2]
    h_kv = b.shape[0]
    order = np.argsort(kv_of, kind="stable")
    identity = bool((order == np.arange(h)).all())
    grouped = (a if identity else a[order]).reshape(h_kv, (h // h_kv) * p, a.shape[2])
    out = (grouped @ b).reshape(h, p, b.shape[2])  # (h, P, Y), heads in ``order``
    if identity:
        return out
    back = np.empty_like(out)
    back[order] = out
    return back


def _scores(spec: Spec, q, k, rows, n: int, raw=None) -> np.ndarray:
    """(h, P, M) scores after scale, softcap, ALiBi and the band (-inf outside it); ``raw``:
    the q . k products when already computed (``raw_scores``), which every spec that keeps
    the key/value mapping shares."""
    m = k.shape[1]
    raw = raw_scores(spec, q, k) if raw is None else raw  # (h, P, M)
    if spec.softcap and spec.cap_first:
        s = spec.softcap * np.tanh(raw / spec.softcap) * spec.scale
    elif spec.softcap:
        s = spec.softcap * np.tanh(raw * spec.scale / spec.softcap)
    else:
        s = raw * spec.scale
    i = rows[:, None] + (0 if spec.top_left else m - n)  # (P, 1): each row's diagonal
    j = np.arange(m)[None, :]  # (1, M)
    if spec.slopes is not None:
        s -= spec.slopes[:, None, None] * np.abs(i - j)[None]  # bottom-right, as the case
    seen = np.ones((len(rows), m), dtype=bool)  # (P, M)
    if spec.right is not None:
        seen &= j <= i + spec.right
    if spec.left is not None:
        seen &= j >= i - spec.left
    if not seen.all():
        np.copyto(s, -np.inf, where=~seen)  # broadcast over heads, in place
    return s


def _top(spec: Spec, s: np.ndarray) -> np.ndarray:
    """(h, P, 1) each row's shift: its largest score or sink, 0 for a row with neither."""
    top = s.max(axis=-1, keepdims=True)
    if spec.sinks is not None:
        top = np.maximum(top, spec.sinks[:, None, None])
    top[~np.isfinite(top)] = 0.0
    return top


def attend(spec: Spec, q, k, v, rows, n: int, raw=None) -> tuple[np.ndarray, np.ndarray]:
    """out (h, P, d_v) and natural-log lse (h, P) of the probe rows under ``spec``."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = _scores(spec, q, k, rows, n, raw)
        top = _top(spec, s)
        s -= top
        e = np.exp(s, out=s)  # (h, P, M)
        total = e.sum(axis=-1, keepdims=True)  # (h, P, 1)
        if spec.sinks is not None:
            total += np.exp(spec.sinks[:, None, None] - top)
        out = _per_kv(spec.kv_of, e, v) / np.where(total > 0, total, 1.0)  # (h, P, d_v)
        lse = (np.log(total) + top)[..., 0]  # (h, P): -inf for a row with no key and sink
    return out, lse


def partial_sums(spec: Spec, q, k, v, rows, n: int, block: int, raw=None):
    """(S, Z, top): per key block of ``block`` keys, S (nb, h, P, d_v) = sum exp(s - top) v
    and Z (nb, h, P, 1) = sum exp(s - top); the sink's share is in neither. Larger aligned
    blocks are sums of these (``block`` divides them)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = _scores(spec, q, k, rows, n, raw)
        top = _top(spec, s)
        s -= top
        e = np.exp(s, out=s)  # (h, P, M)
    starts = range(0, k.shape[1], block)
    S = np.stack([_per_kv(spec.kv_of, e[..., c : c + block], v[:, c : c + block]) for c in starts])
    Z = np.stack([e[..., c : c + block].sum(-1, keepdims=True) for c in starts])
    return S, Z, top


def accumulated(spec: Spec, q, k, v, rows, n: int, dtype) -> np.ndarray:
    """out (h, P, d_v) of a kernel that rounds its weights to ``dtype`` and sums P . V key by
    key in ``dtype``: every partial sum rounded, the narrow accumulator."""
    s = _scores(spec, q, k, rows, n)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        top = _top(spec, s)
        e = np.exp(s - top)
        total = e.sum(axis=-1, keepdims=True)
        if spec.sinks is not None:
            total += np.exp(spec.sinks[:, None, None] - top)
        w = (e / np.where(total > 0, total, 1.0)).astype(dtype).astype(np.float32)
    vv = v[spec.kv_of].astype(dtype).astype(np.float32)  # (h, M, d_v)
    acc = np.zeros(w.shape[:2] + (vv.shape[-1],), dtype=np.float32)  # (h, P, d_v)
    for j in range(vv.shape[1]):  # one rounding to the kernel's dtype per key
        acc = (acc + w[..., j : j + 1] * vv[:, None, j]).astype(dtype).astype(np.float32)
    return acc.astype(np.float64)
