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
from attnlab.core._fused import loaded, rows_softmax
from attnlab.core._grad import sum_to
from attnlab.core._precision import WIDE
from attnlab.core._small_cores import join, on_cores
from attnlab.core._small_exp import KEEP_FROM, exp_compiled, exp_scores, scores, scratch
from attnlab.core._small_masks import broadcast, mask_tables
from attnlab.core._validate import score_limit

__all__ = ["SMALL_BYTES", "broadcast", "small_attention", "small_backward"]

#: The largest score table (..., N, M) the fast path takes: past it the dense kernel's bands
#: and thread pool pay for their overhead.
SMALL_BYTES = 2**23
#: A quarter of ``_validate.score_limit``: a call near the limit goes to the general path.
_LIMIT = {c: score_limit(np.dtype(c)) / 4 for c in "fd"}
#: A result bounded below a quarter of the dtype's largest number is finite without a look.
_ROOM = {c: float(np.finfo(np.dtype(c)).max) / 4 for c in "fd"}
#: Up to this many elements of q, k, v (and dO) in all, their peaks come from one joined copy.
_JOINED_PEAKS = 2**14


def small_attention(q, k, v, mask, scale, method, return_weights, return_lse=False):
    """``attention(q, k, v, mask, scale=scale, method=method, return_weights=...,
    return_lse=...)`` for a small problem, or None when the general path must answer (see the
    module docstring)."""
    x = _prepare(q, k, v, mask, scale, method)
    if x is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        pieces = on_cores(
            _forward,
            x,
            None,
            return_weights,
            return_lse,
            shapes=_shapes(x, return_weights, return_lse),
        )
    if pieces is None:
        return None
    out = tuple(join([p[i] for p in pieces], x[4]) for i in range(len(pieces[0])))
    if return_lse:  # (..., N, 1) -> (..., N), of the output's leading shape
        lse = out[-1][..., 0]
        want = out[0].shape[:-1]
        out = out[:-1] + (lse if lse.shape == want else np.broadcast_to(lse, want).copy(),)
    # The kernel's unnormalised sum reaches M · max|v|: where that cannot overflow, no check.
    if x[9][2] * k.shape[-2] >= _ROOM[q.dtype.char] and not _all_finite(out[0]):
        return None  # a sum of many large values overflowed: the general path rescales
    return out if len(out) > 1 else out[0]


def small_backward(q, k, v, grad_output, mask, scale, method, lse=None):
    """``attention_backward(q, k, v, grad_output, mask, scale=scale, method=method, lse=lse)``
    for a small problem, or None when the general path must answer. With the forward's lse
    (..., N) the weights come from it, exp(s − lse), without the softmax's row max and sum."""
    x = _prepare(q, k, v, mask, scale, method, grad_output)
    if x is None:
        return None
    g = grad_output
    if lse is not None:
        g = _with_lse(x, g, lse)
        if g is None:
            return None
    with np.errstate(over="ignore", invalid="ignore"):
        pieces = on_cores(_backward, x, g, shapes=_shapes(x), joined=True)
    if pieces is None:
        return None
    grads = tuple(join([p[i] for p in pieces], a.shape[:-2]) for i, a in enumerate((q, k, v)))
    if lse is None and _grad_bound(x) < _ROOM[q.dtype.char]:
        return grads  # no gradient can come near the dtype's range (see _grad_bound)
    # Gradients that overflowed are refused by name on the general path.
    return grads if all(_all_finite(a) for a in grads) else None


def _shapes(x, weights: bool | None = None, lse: bool = False) -> tuple:
    """The (rows, cols) of each array the forward (``weights`` given: the output, then the
    weights and the lse as asked) or the backward (dq, dk, dv) returns."""
    q, k, v = x[:3]
    n, m = q.shape[-2], k.shape[-2]
    if weights is None:
        return (n, q.shape[-1]), (m, k.shape[-1]), (m, v.shape[-1])
    return ((n, v.shape[-1]),) + (((n, m),) if weights else ()) + (((n, 1),) if lse else ())


def _with_lse(x, g, lse):
    """(dO, lse (..., N, 1)) when the saved lse can stand for the softmax's row statistics:
    an array of q's dtype and the output's (..., N), finite, and (float32) within ±WIDE as
    the general path keeps its rows in float32; else None."""
    q = x[0]
    if (
        type(lse) is not np.ndarray
        or lse.dtype != q.dtype
        or lse.shape != g.shape[:-1]
        or x[5] != x[4]  # the scores' lead axes are the output's: lse lines up row for row
    ):
        return None
    top = _peak(lse)  # NaN or inf (a row with no key: -inf) fail both tests
    if not (top <= WIDE if q.dtype.char == "f" else math.isfinite(top)):
        return None
    return g, lse[..., None]  # (..., N, d_v), (..., N, 1)


def _grad_bound(x) -> float:
    """A bound on |dq|, |dk|, |dv| and every table between (dP, D, dS) from the inputs' peaks:
    the weights lie in [0, 1] and sum to 1 per row, so |dP|, |D| <= d_v·max|dO|·max|v|,
    |dS| <= twice that, each gradient sums at most N (or M) rows of products, and ``sum_to``
    at most the batch."""
    q, k, v, sc, lead = x[:5]
    top_q, top_k, top_v, _, top_g = x[9]
    n, m = q.shape[-2], k.shape[-2]
    ds = 2.0 * v.shape[-1] * top_g * top_v
    return math.prod(lead) * max(n * top_g, ds, ds * abs(sc) * max(m * top_k, n * top_q))


def _all_finite(a: np.ndarray) -> bool:
    # One sum for the common case; a sum of large finite values may overflow, so look closer.
    with np.errstate(over="ignore", invalid="ignore"):
        return math.isfinite(float(_sum(a, axis=None))) or bool(np.isfinite(a).all())


def _forward(x, _g, return_weights: bool, return_lse: bool, out=None):
    """The dense kernel's forward pass on prepared inputs (see ``_prepare``): (output,), then
    the weights and the lse (..., N, 1) as asked; None where the general path must answer.
    ``out``: arrays of those shapes to write into (``on_cores``), or None."""
    # (..., N, M) unnormalised weights (a scratch table unless they are returned), row sums, maxima
    s = exp_scores(x, fresh=return_weights)
    if s is None:
        return None
    e, total, top = s
    put = (None,) * 3 if out is None else out
    lse = ()
    if return_lse:  # (..., N, 1), as dense.py's _Rows.lse: log(total) + top, two roundings
        lse = (np.add(np.log(total, out=put[-1]), top, out=put[-1]),)
    if return_weights:
        e /= total  # (..., N, M): rows sum to 1
        return (np.matmul(e, x[2], out=put[0]), e, *lse)  # (..., N, d_v), (..., N, M)
    o = np.matmul(e, x[2], out=put[0])  # (..., N, d_v): divide the small output, not the table
    o /= total
    return (o, *lse)


def _backward(x, g, out=None):
    """The dense backward pass, steps 1-6 of ``core/dense_backward.py``'s docstring in its
    order, on prepared inputs and dO (..., N, d_v) (or (dO, lse (..., N, 1)): the weights
    from the saved lse); None where a row has no key. ``out``: (dq, dk, dv) arrays of the
    gradients' shapes to write into (``on_cores`` gives each piece its share), or None."""
    q, k, v, sc = x[:4]
    if type(g) is tuple:  # the weights straight from the saved lse: no row max, no row sum
        g, lse = g
        if x[11] is not None:
            p = exp_compiled(x, np.array(np.broadcast_to(lse, x[5] + lse.shape[-2:])))[0]
        else:
            p = scores(x)
            p -= lse
            np.exp(p, out=p)  # (..., N, M): the weights P
    else:
        s = exp_scores(x)
        if s is None:
            return None
        p, total, _ = s
        p /= total  # (..., N, M): the weights P
    # The tables that never leave the call go to scratch buffers (``_small_exp.scratch``).
    # P, O and dO share the output's lead axes, and the tables are worth keeping
    mine = p.shape[:-2] == g.shape[:-2] and p.nbytes >= KEEP_FROM
    o = np.matmul(p, v, out=scratch("o", g.shape, g.dtype)) if mine else p @ v  # (..., N, d_v)
    dq, dk, dv = (None, None, None) if out is None else out
    dv = np.matmul(p.mT, g, out=dv)  # 1) dV = Pᵀ dO (..., M, d_v)
    ds = (
        np.matmul(g, v.mT, out=scratch("ds", g.shape[:-1] + p.shape[-1:], g.dtype))
        if mine
        else g @ v.mT
    )
    # 2) dP = dO Vᵀ (..., N, M), made dS in place: 3) D = rowsum(dO ∘ O) (..., N, 1),
    # 4) dS = P ∘ (dP − D); numpy's four passes, or the compiled one with their bits
    kernels = loaded() if mine and x[11] is not None else None
    if kernels is not None and kernels.softmax_grad_rows is not None:
        rows = (-1, p.shape[-1])
        kernels.softmax_grad_rows(
            ds.reshape(rows),
            p.reshape(rows),
            np.ascontiguousarray(g).reshape(-1, g.shape[-1]),
            o.reshape(-1, g.shape[-1]),
        )
    else:
        d = _sum(
            np.multiply(g, o, out=scratch("dO O", g.shape, g.dtype)) if mine else g * o,
            -1,
            keepdims=True,
        )
        ds -= d
        ds *= p
    scale = q.dtype.type(sc)
    dq = np.matmul(ds, k, out=dq)  # 5) dQ = dS K · scale (..., N, d_k)
    dq *= scale
    dk = np.matmul(ds.mT, q, out=dk)  # 6) dK = dSᵀ Q · scale (..., M, d_k)
    dk *= scale
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


def _prepare(q, k, v, mask, scale, method, g=None):
    """(q, k, v, scale, lead, table lead, blocked, biases, sure, peaks) when every check the
    general path makes would pass (on dO ``g`` too, when given) and the problem is small;
    None at any doubt. ``peaks``: max|q|, max|k|, max|v|, the bound on the scores, max|g|."""
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
    if lead is None or (
        g is not None
        and (type(g) is not np.ndarray or g.dtype != dtype or g.shape != lead + (n, vs[-1]))
    ):
        return None
    table = math.prod(lead) * n * m * dtype.itemsize  # what method="auto" weighs
    if method == "auto":
        if table > blockwise.DEFAULT_MEMORY_BUDGET:
            return None
    elif method != "dense":
        return None
    sc = _scale(scale, d_k)
    tops = None if sc is None else _finite_and_safe(sc, dtype, q, k, v, g)
    drawn = None if tops is None else mask_tables(mask, n, m, lead, dtype)
    if drawn is None:
        return None
    shape, blocked, biases, hollow, reach = drawn
    tlead = broadcast(qs[:-2], ks[:-2], shape[:-2] or qs[:-2])  # the score table's lead axes
    if (
        tlead is None
        or len(tlead) != len(lead)
        or math.prod(tlead) * n * m * dtype.itemsize > SMALL_BYTES
    ):
        return None
    # Rows need no check (a max of -inf, scores past ±WIDE) when no float part can move a
    # score, no row is blocked whole, and the scores' bound already keeps them within ±WIDE.
    sure = not biases and not hollow and (dtype.char == "d" or tops[3] <= WIDE)
    return (
        q,
        k,
        v,
        sc,
        lead,
        tlead,
        blocked,
        biases,
        sure,
        tops,
        reach,
        rows_softmax(dtype, tlead, n, m, blocked, biases),
    )


def _scale(scale, d_k: int) -> float | None:
    if scale is None:
        return 1.0 / math.sqrt(d_k)  # §6.3: keeps Var(score) = 1 at any d_k
    if type(scale) in (float, int, np.float64, np.float32) and abs(scale) < 2**1000:
        return float(scale)  # finite (a NaN fails the test above)
    return None


def _finite_and_safe(scale: float, dtype, q, k, v, g):
    """(max|q|, max|k|, max|v|, the bound on |scaled score|, max|g| or 0) when q, k, v (and g)
    are finite and no score can come near overflow, else None: a peak is NaN or inf exactly
    when its array holds one, and max|q|, max|k| bound the scores as
    ``_validate.may_overflow`` does (see ``_LIMIT``)."""
    top_q, top_k, top_v, *top_g = _peaks((q, k, v) if g is None else (q, k, v, g))
    if not all(map(math.isfinite, (top_q, top_k, top_v, *top_g))):
        return None
    limit = _LIMIT[dtype.char]
    top = top_q * abs(scale)
    bound = top * top_k * q.shape[-1]
    if not (top < limit and bound < limit):
        return None
    return top_q, top_k, top_v, bound, top_g[0] if top_g else 0.0


# The ufuncs' reductions called directly: what ndarray.max, .sum and .all run, without the
# Python layer in between (a microsecond each, on calls of a few dozen).
_max, _min, _sum, _all = np.maximum.reduce, np.minimum.reduce, np.add.reduce, np.logical_and.reduce
_max_at = np.maximum.reduceat


def _peak(a: np.ndarray) -> float:
    """max|a|: NaN or inf exactly when ``a`` holds one (both reductions carry a NaN). Two
    passes that read ``a`` beat |a|'s fresh copy: 2 ms of a 20 ms call at (8, 8, 128, 64)."""
    return max(float(_max(a, axis=None)), -float(_min(a, axis=None)))


def _peaks(arrays) -> list[float]:
    """[max|a| for a in arrays] (of one dtype): in three numpy calls when they are small,
    where each call, not the arithmetic, is the cost (2.4x faster for the worked example)."""
    starts, end = [], 0
    for a in arrays:  # each array's first element in the joined copy
        starts.append(end)
        end += a.size
    if end > _JOINED_PEAKS:
        return [_peak(a) for a in arrays]
    flat = np.concatenate(arrays, axis=None)  # (Σ sizes,)
    np.abs(flat, out=flat)
    return _max_at(flat, starts).tolist()
