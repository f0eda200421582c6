"""One attention problem in attnlab's layout, with FlashAttention's options, on attnlab's paths.

Shape legend:
    ...  leading axes (B,) or none      h, h_k  query and key/value heads
    N    query rows   M   key rows       d       head width      d_v  value width

The public functions of ``attnlab.flash`` bring their arrays to (..., h, N, d) and call
``forward`` / ``backward`` here; these call ``attnlab.attention`` / ``attnlab.attention_backward``
with the options as attnlab's own arguments (masks aligned bottom-right, ``softcap=``,
``return_lse=``), so ``method="auto"`` picks the dense or the blockwise path by the memory
budget, and the blockwise path keeps long sequences in memory O(N).

Rows that see no key (bottom-right causal with N > M, or a window that ends before key 0) are
a prefix of the rows (``Options.first_open_row``): they are cut off before the call and come
back as FlashAttention returns them, output 0 and log-sum-exp -inf.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.api.attention import attention
from attnlab.api.backward import attention_backward
from attnlab.flash._options import Options

__all__ = ["Result", "backward", "forward"]


@dataclass
class Result:
    out: np.ndarray  # (..., h, N, d_v)
    lse: np.ndarray | None  # (..., h, N)
    probs: np.ndarray | None  # (..., h, N, M): softmax weights, dropped ones negated


def forward(q, k, v, opts: Options, *, lse=False, probs=False, slopes=None) -> Result:
    """attention(q, k, v) under ``opts``: q (..., h, N, d), k (..., h_k, M, d), v (..., h_k, M, d_v).

    ``lse`` and ``probs`` ask for the log-sum-exp and the weights; ``slopes`` overrides the
    options' ALiBi slopes (one sequence of a packed batch).
    """
    k, v = _repeat_heads(q, k), _repeat_heads(q, v)  # (..., h, M, d)
    n, m = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # (..., h)
    dtype = np.result_type(q, k, v, np.float32)
    res = Result(
        out=np.zeros(lead + (n, v.shape[-1]), dtype=dtype),  # (..., h, N, d_v)
        lse=np.full(lead + (n,), -np.inf, dtype=dtype) if lse else None,  # (..., h, N)
        probs=np.zeros(lead + (n, m), dtype=dtype) if probs or opts.dropout_p else None,
    )
    r0 = opts.first_open_row(n, m)
    if r0 < n:
        _fill(res, r0, q[..., r0:, :], k, v, opts, opts.mask(slopes))
    if not probs:
        res.probs = None
    return res


def _fill(res: Result, r0: int, q, k, v, opts: Options, mask) -> None:
    """Rows r0 .. N - 1 of ``res`` from attention over q (..., h, N - r0, d)."""
    kwargs = _core_options(opts)
    if res.probs is None:
        if res.lse is None:
            res.out[..., r0:, :] = attention(q, k, v, mask, **kwargs)
        else:
            # attnlab's log-sum-exp is over the scores it softmaxes: scaled, capped, biased.
            res.out[..., r0:, :], res.lse[..., r0:] = attention(
                q, k, v, mask, return_lse=True, **kwargs
            )
        return
    got = attention(
        q,
        k,
        v,
        mask,
        return_weights=True,
        return_lse=res.lse is not None,
        method="dense",
        **kwargs,
    )  # out, weights (..., h, N - r0, M)[, lse]
    weights = got[1]
    if res.lse is not None:
        res.lse[..., r0:] = got[2]
    res.out[..., r0:, :] = got[0]
    if opts.dropout_p:
        # One uniform number per (..., h, N - r0, M) cell, in C order, for the rows that see a
        # key. Kept weights grow by 1/(1 - p), as in training.
        keep = opts.rng.random(weights.shape) >= opts.dropout_p
        drawn = np.where(keep, weights / (1.0 - opts.dropout_p), 0.0).astype(weights.dtype)
        res.out[..., r0:, :] = drawn @ v  # (..., h, N - r0, d_v)
        weights = np.where(keep, weights, -weights)  # FlashAttention's sign code: < 0 = dropped
    res.probs[..., r0:, :] = weights


def _core_options(opts: Options) -> dict:
    """attnlab's own arguments for the options (softcap only when on)."""
    kwargs = {"scale": opts.scale}
    if opts.softcap is not None:
        kwargs["softcap"] = opts.softcap
    return kwargs


def backward(q, k, v, dout, opts: Options, *, lse=None, slopes=None):
    """(dq, dk, dv) of ``forward``'s output for an upstream gradient dout (..., h, N, d_v)."""
    group = q.shape[-3] // k.shape[-3]
    k_rep, v_rep = _repeat_heads(q, k), _repeat_heads(q, v)  # (..., h, M, d)
    n, m = q.shape[-2], k.shape[-2]
    dtype = np.result_type(q, k, v, dout, np.float32)
    dq = np.zeros(q.shape, dtype=dtype)  # (..., h, N, d): rows that see no key get 0
    r0 = opts.first_open_row(n, m)
    if r0 == n:
        return dq, np.zeros(k.shape, dtype), np.zeros(v.shape, dtype)
    kwargs = _core_options(opts)
    if lse is not None:
        kwargs["lse"] = lse[..., r0:]  # (..., h, N - r0)
    dq[..., r0:, :], dk, dv = attention_backward(
        q[..., r0:, :], k_rep, v_rep, dout[..., r0:, :], opts.mask(slopes), **kwargs
    )
    return dq, _sum_heads(dk, group), _sum_heads(dv, group)


def _repeat_heads(q: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """k or v (..., h_k, M, d) with each head serving h / h_k consecutive query heads."""
    group = q.shape[-3] // kv.shape[-3]
    return kv if group == 1 else np.repeat(kv, group, axis=-3)  # (..., h, M, d)


def _sum_heads(grad: np.ndarray, group: int) -> np.ndarray:
    """A repeated head's gradient summed back onto its key/value head: (..., h_k, M, d)."""
    if group == 1:
        return grad
    lead, (h, m, d) = grad.shape[:-3], grad.shape[-3:]
    return grad.reshape(lead + (h // group, group, m, d)).sum(axis=-3)  # (..., h_k, M, d)
