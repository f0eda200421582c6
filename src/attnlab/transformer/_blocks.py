"""One layer of the tiny transformer, forward and backward: multi-head attention, then the MLP.

Attention is attnlab's own: one ``attnlab.attention`` call per layer with the heads as a batch
axis, and one ``attnlab.attention_backward`` call for its gradients (given the forward's
log-sum-exp, so a training step computes the softmax's row statistics once), so what the model learns
with is exactly the function the rest of attnlab shows, computes and checks. Everything around
it (projections, W^O, residuals, layer norm, MLP) is plain matrix algebra written out here.

Parameters of layer l (dict keys ``layer{l}.NAME``), D = d_model, h heads of width e = D / h:

    w_q, w_k, w_v   (h, D, e)   one projection per head, as ``attnlab.MultiHeadAttention``
    w_o             (h·e, D)    W^O on the concatenated heads
    norm1.gain/bias (D,)        layer norm before attention   } only with the MLP (pre-norm,
    norm2.gain/bias (D,)        layer norm before the MLP     } as GPT-2)
    mlp.w_in (D, F), mlp.b_in (F,), mlp.w_out (F, D), mlp.b_out (D,)   with F = 4D

Shape legend: B sequences, N positions, D = d_model, h heads, e = D / h, F = 4D, R = B·N.
"""

from __future__ import annotations

import numpy as np

from attnlab import attention, attention_backward
from attnlab.transformer._ops import gelu, gelu_backward, layer_norm, layer_norm_backward

__all__ = ["attend", "attend_backward", "heads_of", "mlp", "mlp_backward"]


def _flat(w: np.ndarray) -> np.ndarray:
    """(h, D, e) -> (D, h·e): every head's projection side by side, for one matrix product."""
    h, d, e = w.shape
    return w.transpose(1, 0, 2).reshape(d, h * e)


def heads_of(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (B, N, D) projected by w (h, D, e) -> (B, h, N, e)."""
    b, n, _ = x.shape
    h, _, e = w.shape
    return (x @ _flat(w)).reshape(b, n, h, e).transpose(0, 2, 1, 3)  # (B, h, N, e)


def _merge(o: np.ndarray) -> np.ndarray:
    """(B, h, N, e) -> (B, N, h·e): the heads concatenated, as W^O reads them."""
    b, h, n, e = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, n, h * e)


def attend(x, p: dict, prefix: str, mask, scale, *, weights: bool = False, off=(),
           mean: bool = False):  # fmt: skip
    """x + MultiHead(x) for layer ``prefix`` -> (x', cache[, attention weights (B, h, N, N)]).

    ``off``: heads of this layer knocked out before W^O: their output rows are zeros, or with
    ``mean`` that head's mean output over the batch's sequences and positions (ablation).
    """
    a_in, norm_cache = x, None
    if prefix + "norm1.gain" in p:  # pre-norm, only in models with the MLP
        a_in, norm_cache = layer_norm(x, p[prefix + "norm1.gain"], p[prefix + "norm1.bias"])
    # 1) project: each head's queries, keys and values
    q = heads_of(a_in, p[prefix + "w_q"])  # (B, h, N, e)
    k = heads_of(a_in, p[prefix + "w_k"])  # (B, h, N, e)
    v = heads_of(a_in, p[prefix + "w_v"])  # (B, h, N, e)
    # 2) attend: attnlab's attention, the heads a batch axis; its log-sum-exp is kept so
    # that the backward takes the weights from it instead of computing the softmax again
    if weights:
        o, w, lse = attention(q, k, v, mask, scale=scale, return_weights=True, return_lse=True)
    else:
        (o, lse), w = attention(q, k, v, mask, scale=scale, return_lse=True), None
    # o (B, h, N, e), lse (B, h, N), w (B, h, N, N)
    if off:
        o = _ablated(o, off, mean)  # (B, h, N, e)
    # 3) concatenate and mix with W^O, added to the residual stream
    o_cat = _merge(o)  # (B, N, h·e)
    out = x + o_cat @ p[prefix + "w_o"]  # (B, N, D)
    cache = (a_in, norm_cache, q, k, v, o_cat, lse)
    return (out, cache, w) if weights else (out, cache)


def _ablated(o: np.ndarray, off, mean: bool) -> np.ndarray:
    """o (B, h, N, e) with heads ``off`` replaced: zeros, or their mean over B and N."""
    o = o.copy()
    heads = list(off)
    if mean:
        o[:, heads] = o[:, heads].mean(axis=(0, 2), keepdims=True)  # (1, k, 1, e) broadcast
    else:
        o[:, heads] = 0
    return o


def attend_backward(dx: np.ndarray, p: dict, prefix: str, mask, scale, cache, grads: dict):
    """(∂L/∂x, ∂L/∂attention output (B, h, N, e)) of ``attend`` for dx = ∂L/∂x'.

    The layer's parameter gradients go into ``grads``.
    """
    a_in, norm_cache, q, k, v, o_cat, lse = cache
    b, n, d = dx.shape
    h, _, e = p[prefix + "w_q"].shape
    rows = a_in.reshape(b * n, d)  # (R, D)
    grads[prefix + "w_o"] = o_cat.reshape(b * n, h * e).T @ dx.reshape(b * n, d)  # (h·e, D)
    do = (dx @ p[prefix + "w_o"].T).reshape(b, n, h, e).transpose(0, 2, 1, 3)  # (B, h, N, e)
    dq, dk, dv = attention_backward(q, k, v, do, mask, scale=scale, lse=lse)  # (B, h, N, e)
    da = np.zeros_like(a_in)  # (B, N, D)
    for name, g in (("w_q", dq), ("w_k", dk), ("w_v", dv)):
        g_cat = _merge(g)  # (B, N, h·e)
        grads[prefix + name] = (rows.T @ g_cat.reshape(b * n, h * e)).reshape(
            d, h, e).transpose(1, 0, 2)  # fmt: skip  # (h, D, e)
        da += g_cat @ _flat(p[prefix + name]).T  # (B, N, D)
    if norm_cache is None:
        return dx + da, do
    dx_norm, grads[prefix + "norm1.gain"], grads[prefix + "norm1.bias"] = layer_norm_backward(
        da, norm_cache)  # fmt: skip
    return dx + dx_norm, do


def mlp(x: np.ndarray, p: dict, prefix: str):
    """x + MLP(LayerNorm(x)) -> (x', cache): a GELU layer of width F = 4D."""
    m_in, norm_cache = layer_norm(x, p[prefix + "norm2.gain"], p[prefix + "norm2.bias"])
    hidden = m_in @ p[prefix + "mlp.w_in"] + p[prefix + "mlp.b_in"]  # (B, N, F)
    act = gelu(hidden)  # (B, N, F)
    out = x + act @ p[prefix + "mlp.w_out"] + p[prefix + "mlp.b_out"]  # (B, N, D)
    return out, (m_in, norm_cache, hidden, act)


def mlp_backward(dx: np.ndarray, p: dict, prefix: str, cache, grads: dict) -> np.ndarray:
    """∂L/∂x of ``mlp`` for dx = ∂L/∂x'; the parameter gradients go into ``grads``."""
    m_in, norm_cache, hidden, act = cache
    b, n, d = dx.shape
    f = hidden.shape[-1]
    rows = dx.reshape(b * n, d)  # (R, D)
    grads[prefix + "mlp.w_out"] = act.reshape(b * n, f).T @ rows  # (F, D)
    grads[prefix + "mlp.b_out"] = rows.sum(axis=0)  # (D,)
    dhidden = gelu_backward(dx @ p[prefix + "mlp.w_out"].T, hidden).reshape(b * n, f)  # (R, F)
    grads[prefix + "mlp.w_in"] = m_in.reshape(b * n, d).T @ dhidden  # (D, F)
    grads[prefix + "mlp.b_in"] = dhidden.sum(axis=0)  # (F,)
    dm = (dhidden @ p[prefix + "mlp.w_in"].T).reshape(b, n, d)  # (B, N, D)
    dx_norm, grads[prefix + "norm2.gain"], grads[prefix + "norm2.bias"] = layer_norm_backward(
        dm, norm_cache)  # fmt: skip
    return dx + dx_norm
