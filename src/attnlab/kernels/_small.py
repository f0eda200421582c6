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
the same order as ``kernels/dense.py`` and ``kernels/dense_backward.py`` (so the same bits, which
tests/kernels/test_small.py checks), with:

- what the call's shapes, mask and scale decide worked out once and kept
  (``kernels/_small_plan.py``);
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

import contextlib
import math

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.kernels._fused import loaded
from attnlab.kernels._precision import WIDE, matmul
from attnlab.kernels._small_cores import on_cores
from attnlab.kernels._small_exp import KEEP_FROM, exp_compiled, exp_scores, scores, scratch
from attnlab.kernels._small_masks import banded_output, broadcast, forward_bands
from attnlab.kernels._small_plan import SMALL_BYTES, peak, prepare

__all__ = ["SMALL_BYTES", "broadcast", "small_attention", "small_backward"]

#: A result bounded below a quarter of the dtype's largest number is finite without a look.
_ROOM = {c: float(np.finfo(np.dtype(c)).max) / 4 for c in "fd"}
_NO_CONTEXT = contextlib.nullcontext()  # reusable: entered and left on every quiet call


def small_attention(q, k, v, mask, scale, method, return_weights, return_lse=False):
    """``attention(q, k, v, mask, scale=scale, method=method, return_weights=...,
    return_lse=...)`` for a small problem, or None when the general path must answer (see the
    module docstring)."""
    x = prepare(q, k, v, mask, scale, method)
    if x is None:
        return None
    shapes = _shapes(x, return_weights, return_lse)
    # The kernel's unnormalised sum reaches M · max|v|: where that cannot overflow, no check.
    roomy = x.peaks.v * k.shape[-2] < _ROOM[q.dtype.char]
    with _errors_ignored(not (x.sure and roomy)):
        out = on_cores(_forward, x, None, return_weights, return_lse, shapes=shapes)
    if out is None:
        return None
    if return_lse:  # (..., N, 1) -> (..., N), of the output's leading shape
        lse = out[-1][..., 0]
        want = out[0].shape[:-1]
        out = out[:-1] + (lse if lse.shape == want else np.broadcast_to(lse, want).copy(),)
    if not roomy and not _all_finite(out[0]):
        return None  # a sum of many large values overflowed: the general path rescales
    return out if len(out) > 1 else out[0]


def small_backward(q, k, v, grad_output, mask, scale, method, lse=None):
    """``attention_backward(q, k, v, grad_output, mask, scale=scale, method=method, lse=lse)``
    for a small problem, or None when the general path must answer. With the forward's lse
    (..., N) the weights come from it, exp(s − lse), without the softmax's row max and sum."""
    x = prepare(q, k, v, mask, scale, method, grad_output)
    if x is None:
        return None
    g = grad_output
    if lse is not None:
        g = _with_lse(x, g, lse)
        if g is None:
            return None
    # No gradient, nor O = P V, can come near the dtype's range (see _grad_bound)
    bounded = lse is None and _grad_bound(x) < _ROOM[q.dtype.char]
    with _errors_ignored(not (bounded and x.sure)):
        grads = on_cores(_backward, x, g, shapes=_shapes(x), joined=True)
    if grads is None:
        return None
    if bounded:
        return grads
    # Gradients that overflowed are refused by name on the general path.
    return grads if all(_all_finite(a) for a in grads) else None


def _errors_ignored(needed: bool):
    """numpy's overflow and invalid warnings off where a result may overflow (``needed``); else
    no error-state context at all: where the inputs' peaks bound every result, nothing can
    warn, and entering and leaving the context cost ~5 µs of a ~60 µs call."""
    return np.errstate(over="ignore", invalid="ignore") if needed else _NO_CONTEXT


def _shapes(x, weights: bool | None = None, lse: bool = False) -> tuple:
    """The (rows, cols) of each array the forward (``weights`` given: the output, then the
    weights and the lse as asked) or the backward (dq, dk, dv) returns."""
    q, k, v = x.q, x.k, x.v
    n, m = q.shape[-2], k.shape[-2]
    if weights is None:
        return (n, q.shape[-1]), (m, k.shape[-1]), (m, v.shape[-1])
    return ((n, v.shape[-1]),) + (((n, m),) if weights else ()) + (((n, 1),) if lse else ())


def _with_lse(x, g, lse):
    """(dO, lse (..., N, 1)) when the saved lse can stand for the softmax's row statistics:
    an array of q's dtype and the output's (..., N), finite, and (float32) within ±WIDE as
    the general path keeps its rows in float32; else None."""
    q = x.q
    if (
        type(lse) is not np.ndarray
        or lse.dtype != q.dtype
        or lse.shape != g.shape[:-1]
        # the scores' lead axes are the output's: lse lines up row for row
        or x.table_lead != x.lead
    ):
        return None
    top = peak(lse)  # NaN or inf (a row with no key: -inf) fail both tests
    if not (top <= WIDE if q.dtype.char == "f" else math.isfinite(top)):
        return None
    return g, lse[..., None]  # (..., N, d_v), (..., N, 1)


def _grad_bound(x) -> float:
    """A bound on |dq|, |dk|, |dv| and every table between (dP, D, dS) from the inputs' peaks:
    the weights lie in [0, 1] and sum to 1 per row, so |dP|, |D| <= d_v·max|dO|·max|v|,
    |dS| <= twice that, each gradient sums at most N (or M) rows of products, and ``sum_to``
    at most the batch."""
    q, k, v, top = x.q, x.k, x.v, x.peaks
    n, m = q.shape[-2], k.shape[-2]
    ds = 2.0 * v.shape[-1] * top.g * top.v
    return math.prod(x.lead) * max(n * top.g, ds, ds * abs(x.scale) * max(m * top.k, n * top.q))


def _all_finite(a: np.ndarray) -> bool:
    # One sum for the common case; a sum of large finite values may overflow, so look closer.
    with np.errstate(over="ignore", invalid="ignore"):
        return math.isfinite(float(_sum(a, axis=None))) or bool(np.isfinite(a).all())


def _forward(x, _g, return_weights: bool, return_lse: bool, out=None):
    """The dense kernel's forward pass on prepared inputs (see ``_small_plan.prepare``):
    (output,), then the weights and the lse (..., N, 1) as asked; None where the general path
    must answer.
    ``out``: arrays of those shapes to write into (``on_cores``), or None."""
    # (..., N, M) unnormalised weights (a scratch table unless they are returned), row sums, maxima
    # the weights keep the general path's whole products
    compiled = x.kernel is not None
    bands = None if return_weights else forward_bands(compiled, x.reach, x.q, x.k, x.table_lead)
    s = exp_scores(x, fresh=return_weights, bands=bands)
    if s is None:
        return None
    e, total, top = s
    put = (None,) * 3 if out is None else out
    lse = ()
    if return_lse:  # (..., N, 1), as dense.py's _Rows.lse: log(total) + top, two roundings
        lse = (np.add(np.log(total, out=put[-1]), top, out=put[-1]),)
    if return_weights:
        e /= total  # (..., N, M): rows sum to 1
        return (matmul(e, x.v, out=put[0]), e, *lse)  # (..., N, d_v), (..., N, M)
    if bands is None:
        o = matmul(e, x.v, out=put[0])  # (..., N, d_v): divide the small output, not the table
    else:  # each band of rows on the keys it reaches: past them its weights are 0
        n = e.shape[-2]
        o = np.empty(x.lead + (n, x.v.shape[-1]), e.dtype) if put[0] is None else put[0]
        banded_output(e, x.v, o, bands, (0, n))
    o /= total
    return (o, *lse)


def _backward(x, g, out=None):
    """The dense backward pass, steps 1-6 of ``kernels/dense_backward.py``'s docstring in its
    order, on prepared inputs and dO (..., N, d_v) (or (dO, lse (..., N, 1)): the weights
    from the saved lse); None where a row has no key. ``out``: (dq, dk, dv) arrays of the
    gradients' shapes to write into (``on_cores`` gives each piece its share), or None."""
    q, k, v, sc = x.q, x.k, x.v, x.scale
    if type(g) is tuple:  # the weights straight from the saved lse: no row max, no row sum
        g, lse = g
        if x.kernel is not None:
            p = exp_compiled(x, np.array(np.broadcast_to(lse, x.table_lead + lse.shape[-2:])))[0]
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
    dq, dk, dv = (None, None, None) if out is None else out
    dv = matmul(p.mT, g, out=dv)  # 1) dV = Pᵀ dO (..., M, d_v)
    ds = (
        matmul(g, v.mT, out=scratch("ds", g.shape[:-1] + p.shape[-1:], g.dtype))
        if mine
        else matmul(g, v.mT)
    )
    # 2) dP = dO Vᵀ (..., N, M), made dS in place: 3) D = rowsum(dP ∘ P) (..., N, 1),
    # 4) dS = P ∘ (dP − D); numpy's four passes, or the compiled one with their bits
    kernels = loaded() if mine and x.kernel is not None else None
    if kernels is not None and kernels.softmax_grad_rows is not None:
        rows = (-1, p.shape[-1])
        kernels.softmax_grad_rows(ds.reshape(rows), p.reshape(rows))
    else:
        d = _sum(
            np.multiply(ds, p, out=scratch("dP P", ds.shape, ds.dtype)) if mine else ds * p,
            -1,
            keepdims=True,
        )
        ds -= d
        ds *= p
    scale = q.dtype.type(sc)
    dq = matmul(ds, k, out=dq)  # 5) dQ = dS K · scale (..., N, d_k)
    dq *= scale
    dk = matmul(ds.mT, q, out=dk)  # 6) dK = dSᵀ Q · scale (..., M, d_k)
    dk *= scale
    return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape)


_sum = np.add.reduce  # what ndarray.sum runs, without the Python layer in between
