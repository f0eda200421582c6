"""The fast path for small problems: the dense kernel's arithmetic without its per-call machinery.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

A tiny transformer's training batch, (B, h, N, d) = (64, 4, 32, 16), or the worked example
(1, 1, 4, 2), spends most of a call of the general path on work that does not grow with the
problem: validation in several passes, the mask rendered afresh, the overflow bound, error-state
contexts, the dispatcher's options. At (1, 1, 4, 2) that was about 110 µs a call where the
arithmetic takes a few. This module answers the common calls from the same numpy operations in
the same order as ``core/dense.py`` and ``core/dense_backward.py`` (so the same bits, which
tests/test_small.py checks), with:

- validation as a handful of cheap tests that only ever say "fine" or "not sure": any doubt (a
  list instead of an array, mixed dtypes, a NaN, a score that might overflow, a bad mask, a row
  with no key) returns None, and the caller runs the general path, which raises its own error;
- mask specs rendered once per (spec, N, M, axes) and kept (specs are frozen dataclasses, so
  equal specs share a table);
- the whole batch in one matmul over every leading axis and the softmax in place.

The public dispatchers (``attention``, ``attention_backward``) try it first when no option
beyond the defaults is set.
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.core import blockwise
from attnlab.core._grad import sum_to
from attnlab.core._precision import WIDE
from attnlab.core._small_cores import join, on_cores
from attnlab.core._validate import score_limit
from attnlab.core.masks import Causal, Mask, Padding, SlidingWindow, as_mask

__all__ = ["SMALL_BYTES", "small_attention", "small_backward"]

#: The largest score table (..., N, M) the fast path takes: past it the dense kernel's bands
#: and thread pool pay for their overhead.
SMALL_BYTES = 2**23
#: Rows of the softmax per pass: about 1 MiB of scores, as the dense kernel's bands.
_BAND_BYTES = 2**20
#: Mask kinds whose rendered tables are kept (hashable, frozen specs).
_KEPT = (Causal, SlidingWindow, Padding)
_kept: dict = {}
#: A quarter of ``_validate.score_limit``: a call near the limit goes to the general path.
_LIMIT = {c: score_limit(np.dtype(c)) / 4 for c in "fd"}
_LOWEST = {c: np.finfo(np.dtype(c)).min for c in "fd"}
_KEEP_AT_MOST = 256


def small_attention(q, k, v, mask, scale, method, return_weights):
    """``attention(q, k, v, mask, scale=scale, method=method, return_weights=...)`` for a small
    problem, or None when the general path must answer (see the module docstring)."""
    x = _prepare(q, k, v, mask, scale, method)
    if x is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        pieces = on_cores(_forward, x, None, return_weights)
    if pieces is None:
        return None
    if return_weights:
        out = join([p[0] for p in pieces], x[4]), join([p[1] for p in pieces], x[4])
    else:
        out = join(pieces, x[4])
    # A sum of many large values can overflow though each is finite: the general path rescales.
    return out if _all_finite(out[0] if return_weights else out) else None


def small_backward(q, k, v, grad_output, mask, scale, method):
    """``attention_backward(q, k, v, grad_output, mask, scale=scale, method=method)`` for a small
    problem, or None when the general path must answer."""
    x = _prepare(q, k, v, mask, scale, method)
    if x is None:
        return None
    g = grad_output
    if (
        type(g) is not np.ndarray
        or g.dtype != q.dtype
        or g.shape != x[4] + (q.shape[-2], v.shape[-1])
        or not math.isfinite(_peak(g))
    ):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        pieces = on_cores(_backward, x, g)
    if pieces is None:
        return None
    grads = tuple(join([p[i] for p in pieces], a.shape[:-2]) for i, a in enumerate((q, k, v)))
    # Gradients that overflowed are refused by name on the general path.
    return grads if all(_all_finite(a) for a in grads) else None


def _all_finite(a: np.ndarray) -> bool:
    # One sum for the common case; a sum of large finite values may overflow, so look closer.
    with np.errstate(over="ignore", invalid="ignore"):
        return math.isfinite(float(_sum(a, axis=None))) or bool(np.isfinite(a).all())


def _forward(x, _g, return_weights: bool):
    """The dense kernel's forward pass on prepared inputs (see ``_prepare``), or None."""
    s = _exp_scores(x)  # (..., N, M) unnormalised weights and their row sums
    if s is None:
        return None
    e, total = s
    if return_weights:
        e /= total  # (..., N, M): rows sum to 1
        return e @ x[2], e  # (..., N, d_v), (..., N, M)
    out = e @ x[2]  # (..., N, d_v): divide the small output, not the table
    out /= total
    return out


def _backward(x, g):
    """The dense backward pass, steps 1-6 of ``core/dense_backward.py``'s docstring in its
    order, on prepared inputs and dO (..., N, d_v); None where a row has no key."""
    q, k, v, sc = x[:4]
    s = _exp_scores(x)
    if s is None:
        return None
    p, total = s
    p /= total  # (..., N, M): the weights P
    o = p @ v  # (..., N, d_v)
    dv = np.swapaxes(p, -1, -2) @ g  # 1) dV = Pᵀ dO (..., M, d_v)
    ds = g @ np.swapaxes(v, -1, -2)  # 2) dP = dO Vᵀ (..., N, M), made dS in place
    d = np.sum(g * o, axis=-1, keepdims=True)  # 3) D = rowsum(dO ∘ O) (..., N, 1)
    ds -= d  # 4) dS = P ∘ (dP − D)
    ds *= p
    scale = q.dtype.type(sc)
    dq = ds @ k  # 5) dQ = dS K · scale (..., N, d_k)
    dq *= scale
    dk = np.swapaxes(ds, -1, -2) @ q  # 6) dK = dSᵀ Q · scale (..., M, d_k)
    dk *= scale
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


def _prepare(q, k, v, mask, scale, method):
    """(q, k, v, scale, lead, table lead, blocked, biases) when every check the general path
    makes would pass and the problem is small; None at any doubt."""
    if type(q) is not np.ndarray or type(k) is not np.ndarray or type(v) is not np.ndarray:
        return None
    dtype = q.dtype
    if not (dtype.char in "fd" and dtype.isnative and k.dtype == dtype and v.dtype == dtype):
        return None  # integers, float16 and mixed dtypes are converted by the general path
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) < 2 or len(ks) < 2 or len(vs) < 2 or 0 in qs or 0 in ks or 0 in vs:
        return None
    if qs[-1] != ks[-1] or ks[-2] != vs[-2]:
        return None
    lead = broadcast(qs[:-2], ks[:-2], vs[:-2])
    n, m, d_k = qs[-2], ks[-2], qs[-1]
    if lead is None:
        return None
    table = math.prod(lead) * n * m * dtype.itemsize  # what method="auto" weighs
    if method == "auto":
        if table > blockwise.DEFAULT_MEMORY_BUDGET:
            return None
    elif method != "dense":
        return None
    sc = _scale(scale, d_k)
    if sc is None or not _finite_and_safe(q, k, v, sc, dtype):
        return None
    drawn = _mask(mask, n, m, lead, dtype)
    if drawn is None:
        return None
    shape, blocked, biases = drawn
    tlead = broadcast(qs[:-2], ks[:-2], shape[:-2] or qs[:-2])  # the score table's lead axes
    if (
        tlead is None
        or len(tlead) != len(lead)
        or math.prod(tlead) * n * m * dtype.itemsize > SMALL_BYTES
    ):
        return None
    return q, k, v, sc, lead, tlead, blocked, biases


def _scale(scale, d_k: int) -> float | None:
    if scale is None:
        return 1.0 / math.sqrt(d_k)  # §6.3: keeps Var(score) = 1 at any d_k
    if type(scale) in (float, int, np.float64, np.float32) and abs(scale) < 2**1000:
        return float(scale)  # finite (a NaN fails the test above)
    return None


def _finite_and_safe(q, k, v, scale: float, dtype) -> bool:
    """Whether q, k, v are finite and no score can come near overflow: max|q| and max|k| are
    NaN or inf exactly when their array holds one, and bound the scores as
    ``_validate.may_overflow`` does (see ``_LIMIT``)."""
    top_q, top_k = _peak(q), _peak(k)
    if not (math.isfinite(top_q) and math.isfinite(top_k) and math.isfinite(_peak(v))):
        return False
    limit = _LIMIT[dtype.char]
    top = top_q * abs(scale)
    return top < limit and top * top_k * q.shape[-1] < limit


# The ufuncs' reductions called directly: what ndarray.max, .sum and .all run, without the
# Python layer in between (a microsecond each, on calls of a few dozen).
_max, _sum, _all = np.maximum.reduce, np.add.reduce, np.logical_and.reduce


def _peak(a: np.ndarray) -> float:
    """max|a|: NaN or inf exactly when ``a`` holds one."""
    return float(_max(np.abs(a), axis=None))


def _mask(mask, n: int, m: int, lead: tuple[int, ...], dtype):
    """(table shape, blocked pairs or None, float biases) of the mask, or None at any doubt."""
    if mask is None:
        return (n, m), None, ()
    if not isinstance(mask, np.ndarray | Mask):
        return None  # lists and other tensors: the general path converts them
    try:
        mask = as_mask(mask).for_dtype(dtype)  # as validate reads it
        drawn = _kept_render(mask, n, m, len(lead))
    except (ValueError, TypeError):  # the general path raises its own error
        return None
    table = lead + (n, m)
    if drawn[0] != table[len(table) - len(drawn[0]) :] and broadcast(table, drawn[0]) != table:
        return None
    return drawn


def _kept_render(mask, n: int, m: int, lead_ndim: int):
    parts = mask.parts()
    if not all(type(p) in _KEPT for p in parts):
        return _render(mask, n, m, lead_ndim)
    key = (parts, n, m, lead_ndim)
    drawn = _kept.get(key)
    if drawn is None:
        drawn = _render(mask, n, m, lead_ndim)
        if drawn[1] is not None:
            drawn[1].flags.writeable = False  # shared by every later call
        if len(_kept) >= _KEEP_AT_MOST:
            _kept.clear()
        _kept[key] = drawn
    return drawn


def _render(mask, n: int, m: int, lead_ndim: int):
    """The mask as ``dense.apply_mask`` applies it: the union of the pairs its boolean parts
    block (each set to -inf, so one union does the same), and its float parts, added in order."""
    shape = mask.table_shape(n, m, lead_ndim)
    blocked, biases = None, []
    for part in mask.parts():
        if part.boolean:
            b = ~part.block((0, n), (0, m), n, m, lead_ndim)  # broadcastable to (..., N, M)
            blocked = b if blocked is None else blocked | b
        else:
            biases.append(part.bias((0, n), (0, m), n, m, lead_ndim))
    return tuple(shape), blocked, tuple(biases)


def _exp_scores(x):
    """exp(q kᵀ · scale + mask − row max) in place (..., N, M) and its row sums (..., N, 1),
    or None when a row has no allowed key (the general path raises that error)."""
    q, k, _, sc, _, tlead, blocked, biases = x
    s = q @ np.swapaxes(k, -1, -2)  # (..., N, M)
    if s.shape[:-2] != tlead:  # the mask varies along an axis q and k lack
        s = np.array(np.broadcast_to(s, tlead + s.shape[-2:]))  # (..., N, M)
    n = s.shape[-2]
    band = _BAND_BYTES // (s.size // n * s.itemsize) or 1
    if band >= n:
        return _softmax_rows(s, sc, blocked, biases)
    totals = []
    for a in range(0, n, band):  # cache-sized bands, as the dense kernel's softmax
        rows = (a, min(n, a + band))
        part = _softmax_rows(
            s[..., rows[0] : rows[1], :],
            sc,
            _band(blocked, rows),
            tuple(_band(b, rows) for b in biases),
        )
        if part is None:
            return None
        totals.append(part[1])
    return s, np.concatenate(totals, axis=-2)  # (..., N, M), (..., N, 1)


def _band(table, rows):
    if table is None or np.ndim(table) < 2 or np.shape(table)[-2] == 1:
        return table
    return table[..., rows[0] : rows[1], :]


def _softmax_rows(s, sc: float, blocked, biases):
    s *= s.dtype.type(sc)
    if blocked is not None:
        np.copyto(s, -np.inf, where=blocked)
    for b in biases:
        s += b
    top = _max(s, axis=-1, keepdims=True)  # (..., rows, 1)
    if s.dtype == np.float32 and _max(np.abs(top), axis=None) > WIDE:
        return None  # scores far from 0: the general path computes these in float64
    # A row with no allowed key has max -inf; raise it to the lowest finite number so that
    # -inf - max stays -inf (not NaN) and its sum comes out 0, which sends it to the general path.
    np.maximum(top, _LOWEST[s.dtype.char], out=top)
    s -= top
    np.exp(s, out=s)  # unnormalised weights
    total = _sum(s, axis=-1, keepdims=True)  # (..., rows, 1)
    if not _all(total, axis=None):
        return None
    return s, total


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """``np.broadcast_shapes`` in plain Python (several times faster on a few short shapes), or
    None where the shapes do not broadcast."""
    first = shapes[0]
    for shape in shapes:
        if shape != first:
            break
    else:  # the common case, and the one a call of a few microseconds cannot spend loops on
        return first
    out = list(max(shapes, key=len))
    width = len(out)
    for shape in shapes:
        for i, size in enumerate(shape, width - len(shape)):
            if size != out[i]:
                if out[i] == 1:
                    out[i] = size
                elif size != 1:
                    return None
    return tuple(out)
