"""The executable spec: attention and its gradients in plain numpy, one step a line.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

The equation, with every variant attnlab computes:

    S = q kᵀ · scale                       the scores
    C = c · tanh(S / c)                    with a softcap c (else C = S)
    Z = C + mask                           the mask after the cap: 0 / -inf, ALiBi, a float bias
    lse = log(Σ_j exp(Z_j) + exp(σ))       a sink σ per head joins the divisor only
    P = exp(Z − lse),  O = P v             a row with no allowed key: P = 0, O = 0, lse = -inf

No bands, tiles, threads, plans or compiled passes: every fast path in ``attnlab.kernels`` is
tested against this module (tests/kernels/test_kernels_property.py), and this module against torch
autograd (tests/api/test_reference_oracle.py). It checks nothing either: the dispatchers validate.
The arithmetic runs in the inputs' float dtype (float64 for integers), so float64 inputs give
the exact answer and float32 inputs a plain float32 attention to judge a kernel's error by.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.core._mask_base import Mask
from attnlab.core.masks import Dense

__all__ = ["attention", "gradients"]


def attention(q, k, v, mask=None, *, scale=None, softcap=None, sinks=None, return_lse=False):
    """softmax(q kᵀ · scale, capped, + mask) v: (..., N, d_v), and with ``return_lse`` the
    natural log of each row's divisor (..., N), the sink included.

    ``mask``: an attnlab mask spec, a bool array (True = attend) or a float array (added),
    broadcastable to (..., N, M). ``sinks``: one logit per head, (h,) or (B, h).

    >>> q = k = np.eye(2)
    >>> attention(q, k, [[1.0], [3.0]], scale=np.log(3.0))   # weights 3/4, 1/4 and 1/4, 3/4
    array([[1.5],
           [2.5]])
    """
    f = _forward(q, k, v, mask, scale, softcap, sinks)
    return (f.o, f.lse) if return_lse else f.o


def gradients(
    q, k, v, grad_output, mask=None, *, scale=None, softcap=None, sinks=None, lse=None
) -> dict:
    """The gradient of sum(grad_output ∘ attention(...)) with respect to each input, by the
    chain rule run backward through the forward's steps: a dict with keys "q", "k", "v" (each
    of its input's shape), "bias" (the float mask's shape, or None without exactly one float
    table among the mask's parts) and "sinks" (the sinks' shape, or None without sinks).
    ``lse`` (..., N): a saved log-sum-exp, as ``attention_backward(lse=)`` reads it: the
    weights are exp(Z − lse) from it, its rounding included."""
    f = _forward(q, k, v, mask, scale, softcap, sinks, lse)
    g = np.asarray(grad_output, dtype=f.dtype)  # (..., N, d_v): dO
    # 1) dV = Pᵀ dO                                                   (..., M, d_v)
    dv = np.swapaxes(f.p, -1, -2) @ g
    # 2) dP = dO vᵀ                                                   (..., N, M)
    dp = g @ np.swapaxes(f.v, -1, -2)
    # 3) D = rowsum(dP ∘ P) = rowsum(dO ∘ O): softmax's Jacobian, a row at a time  (..., N, 1)
    d = np.sum(g * f.o, axis=-1, keepdims=True)
    # 4) dZ = P ∘ (dP − D): the gradient of the masked logits (0 where the mask blocks)
    dz = f.p * (dp - d)  # (..., N, M)
    # 5) the bias is added to the logits, so its gradient is dZ, summed to its own shape
    dbias = None if f.bias_shape is None else sum_to(dz, f.bias_shape)
    # 6) the sink's weight in row i is exp(σ − lse_i); it meets no value, so dσ = −Σ_i P_iσ D_i
    dsinks = None
    if f.sinks is not None:
        share = np.exp(f.sinks[..., None] - f.lse_finite)  # (..., N); D = 0 on an empty row
        dsinks = sum_to(-(share * d[..., 0]).sum(axis=-1), f.sinks.shape)
    # 7) through the cap: d(c · tanh(S / c))/dS = 1 − tanh²(S / c)   (..., N, M)
    ds = dz if f.tanh is None else dz * (1.0 - f.tanh * f.tanh)
    # 8) dQ = dS k · scale and dK = dSᵀ q · scale                     (..., N, d_k), (..., M, d_k)
    dq = ds @ f.k * f.scale
    dk = np.swapaxes(ds, -1, -2) @ f.q * f.scale
    return {
        "q": sum_to(dq, f.q.shape),
        "k": sum_to(dk, f.k.shape),
        "v": sum_to(dv, f.v.shape),
        "bias": dbias,
        "sinks": dsinks,
    }


def _forward(q, k, v, mask, scale, softcap, sinks, saved=None) -> SimpleNamespace:
    """Every forward table the gradients read, step by step (the module docstring's lines)."""
    dtype = np.result_type(np.asarray(q), np.asarray(k), np.asarray(v), np.float32)
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    q, k, v = (np.asarray(a, dtype=dtype) for a in (q, k, v))
    n, m = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
    # 1) S = q kᵀ · scale                                             (..., N, M)
    s = q @ np.swapaxes(k, -1, -2) * dtype.type(scale)
    # 2) C = c · tanh(S / c): the cap bounds every logit to (−c, c) before the mask
    tanh = None if softcap is None else np.tanh(s / dtype.type(softcap))
    c = s if tanh is None else dtype.type(softcap) * tanh
    # 3) Z = C + mask: 0 where allowed, −inf where blocked, plus ALiBi and float biases
    additive, bias_shape = _additive(mask, n, m, len(lead), dtype)
    z = c + additive  # (..., N, M)
    # 4) lse = log(Σ_j exp(Z_ij) + exp(σ)), shifted by the row's largest logit for range
    sink = None if sinks is None else np.asarray(sinks, dtype=dtype)  # (h,) or (B, h)
    z = np.broadcast_to(z, lead + (n, m))
    empty = np.isneginf(z).all(axis=-1)  # (..., N): rows that allow no key
    top = np.where(empty, 0.0, z.max(axis=-1))  # (..., N)
    if sink is not None:
        top = np.maximum(top, sink[..., None])
    total = np.exp(z - top[..., None]).sum(axis=-1)  # (..., N)
    if sink is not None:
        total = total + np.exp(sink[..., None] - top)
    total = np.where(empty, 1.0, total)  # an empty row's sum is 0: 0 stands in for its lse
    lse_finite = np.where(empty, 0.0, top + np.log(total))  # (..., N)
    if saved is not None:  # the weights from a saved lse instead (same rows empty)
        lse_finite = np.where(empty, 0.0, np.asarray(saved, dtype=dtype))
    # 5) P = exp(Z − lse): each row sums to 1 less the sink's share; 0 on an empty row
    p = np.where(empty[..., None], 0.0, np.exp(z - lse_finite[..., None]))  # (..., N, M)
    # 6) O = P v                                                      (..., N, d_v)
    o = p @ v
    lse = np.where(empty, -np.inf, lse_finite)
    return SimpleNamespace(
        q=q, k=k, v=v, dtype=dtype, scale=dtype.type(scale), tanh=tanh, p=p, o=o, lse=lse,
        lse_finite=lse_finite, sinks=sink, bias_shape=bias_shape,
    )  # fmt: skip


def _additive(mask, n: int, m: int, lead_ndim: int, dtype) -> tuple:
    """(the additive table broadcastable to (..., N, M), the shape of the one float table among
    the mask's parts or None): a spec renders itself, a bool array is 0 / −inf, a float array
    is added as it is."""
    if mask is None:
        return dtype.type(0.0), None
    if isinstance(mask, Mask):
        floats = [p for p in mask.parts() if isinstance(p, Dense) and not p.boolean]
        shape = floats[0].array.shape if len(floats) == 1 else None
        return mask.additive(n, m, lead_ndim=lead_ndim, dtype=dtype), shape
    table = np.asarray(mask)
    if table.dtype == bool:
        return np.where(table, dtype.type(0.0), dtype.type(-np.inf)), None
    return table.astype(dtype), table.shape
