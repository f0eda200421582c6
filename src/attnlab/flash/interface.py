"""FlashAttention 2's fixed-length functions on numpy arrays: same names, order, defaults, returns.

Shape legend (FlashAttention's layout, sequence before heads):
    q (B, N, h, d)   k (B, M, h_k, d)   v (B, M, h_k, d_v)   out (B, N, h, d_v)
    qkv (B, N, 3, h, d)   kv (B, M, 2, h_k, d)   softmax_lse (B, h, N)   probs (B, h, N, M)

``causal`` and ``window_size`` are aligned bottom-right, as FlashAttention aligns them: query i
sees keys i + M - N - left .. i + M - N + right (causal: right = 0). Rows that see no key give
output 0 and log-sum-exp -inf. The arithmetic is ``attnlab.attention``'s, dense or blockwise by
the memory budget; docs/kernels.md ("attnlab.flash") maps every option and what differs.

Each signature is FlashAttention's, written out (its names, order and defaults); the bodies
share the checks (``_options.read_options``, ``_arrays``) and the computation (``_forward``).
float16 and bfloat16 are computed in float64 and rounded once into q's dtype at the end.
``flash_attn_func`` also takes FlashAttention 3's FP8 inputs with their descales (``_fp8.py``):
computed on the dequantised values in float64, returned in bfloat16.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import _attend, _fp8
from attnlab.flash._arrays import Precision, backward_arrays, one_dtype, real_array, unstack
from attnlab.flash._options import check_heads, read_backward_options, read_options

__all__ = [
    "flash_attn_backward",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
]


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    rng=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """FlashAttention 2's ``flash_attn_func``: exact attention for q (B, N, h, d).

    Args:
        q: (B, N, h, d).  k: (B, M, h_k, d).  v: (B, M, h_k, d_v). h_k divides h: query
            heads g·h/h_k .. (g+1)·h/h_k - 1 share key/value head g (GQA; MQA when h_k = 1).
        dropout_p: probability of dropping a weight (kept ones grow by 1/(1 - p)); needs ``rng``.
        softmax_scale: multiplies q kᵀ; None for 1/sqrt(d).
        causal: query i sees keys up to i + M - N (bottom-right aligned).
        window_size: (left, right); -1 is unbounded. Query i sees keys
            i + M - N - left .. i + M - N + right.
        softcap: > 0 replaces each scaled score s by softcap·tanh(s/softcap); 0 or negative
            is off.
        alibi_slopes: (h,) or (B, h): adds -slope·|i + M - N - j| to score (i, j).
        deterministic: accepted for compatibility; attnlab is always deterministic.
        return_attn_probs: also return the log-sum-exp and the attention weights.
        rng: a ``numpy.random.Generator``, required when dropout_p > 0.
        q_descale, k_descale, v_descale: FlashAttention 3's FP8 descales, for q, k, v in
            ``float8_e4m3fn`` or ``float8_e5m2``: each None (1), a scalar or (B, h_k); the
            kernel's tensor is the stored value times the descale of its key/value head (a
            query head takes its group's). out is then bfloat16.

    Returns:
        out (B, N, h, d_v); with return_attn_probs, (out, softmax_lse (B, h, N), probs
        (B, h, N, M)): the exact softmax weights, a dropped weight negated (FlashAttention's
        sign code for its dropout pattern), rows that see no key all 0. out and probs have
        q's dtype (float64 for integers); softmax_lse is float32 for float16 and bfloat16.
    """
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    return _forward(q, k, v, opts, return_attn_probs, (q_descale, k_descale, v_descale))


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    rng=None,
):
    """``flash_attn_func`` on qkv (B, N, 3, h, d): self-attention, q, k and v stacked."""
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    q, k, v = unstack("qkv", qkv, 3, "(batch_size, seqlen, 3, nheads, headdim)", "(B, N, 3, h, d)")
    return _forward(q, k, v, opts, return_attn_probs)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    rng=None,
):
    """``flash_attn_func`` on q (B, N, h, d) and kv (B, M, 2, h_k, d): k and v stacked."""
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    k, v = unstack("kv", kv, 2, "(batch_size, seqlen_k, 2, nheads_k, headdim)", "(B, M, 2, h_k, d)")
    return _forward(q, k, v, opts, return_attn_probs)


def flash_attn_backward(
    dout,
    q,
    k,
    v,
    out=None,
    softmax_lse=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
):
    """The gradients FlashAttention's autograd backward returns for ``flash_attn_func``.

    Mirrors FlashAttention's ``_flash_attn_backward`` (without its preallocated dq, dk, dv and
    its rng state): ``dout`` (B, N, h, d_v) is ∂L/∂out; returns (dq (B, N, h, d),
    dk (B, M, h_k, d), dv (B, M, h_k, d_v)), a shared key/value head's gradient summed over
    the query heads it serves. ``out`` is accepted and not needed (attnlab recomputes the
    weights); ``softmax_lse`` (B, h, N), when given, is used instead of recomputing the row
    sums. The options mean what they mean for ``flash_attn_func``; dropout has no backward
    here (pass dropout_p=0). dout shares q's dtype; the gradients come back in it.
    """
    opts = read_backward_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic
    )
    q, k, v = _fixed_arrays(q, k, v, opts)
    b, n, h = q.shape[:3]
    dout, lse = backward_arrays(dout, softmax_lse, (b, n, h, v.shape[-1]), (b, h, n))
    prec = Precision.of(one_dtype(("q", q), ("dout", dout)))
    q, k, v, dout = (x.astype(prec.compute, copy=False) for x in (q, k, v, dout))
    lse = None if lse is None else lse.astype(prec.compute)
    grads = _attend.backward(
        _heads_first(q), _heads_first(k), _heads_first(v), _heads_first(dout), opts, lse=lse
    )
    return tuple(
        prec.rounded(name, _seq_first(g)) for name, g in zip(("dq", "dk", "dv"), grads, strict=True)
    )


def _forward(q, k, v, opts, return_attn_probs: bool, descales=None):
    """``flash_attn_func`` after its options are read: every forward form ends here.
    ``descales``: (q_descale, k_descale, v_descale) of flash_attn_func, which alone takes FP8."""
    q, k, v = _fixed_arrays(q, k, v, opts, fp8=descales is not None)
    prec = Precision.of(q.dtype)
    if descales is not None:
        q, k, v = _descaled(q, k, v, descales)
    q, k, v = (_heads_first(x).astype(prec.compute, copy=False) for x in (q, k, v))
    res = _attend.forward(q, k, v, opts, lse=return_attn_probs, probs=return_attn_probs)
    out = prec.rounded("out", _seq_first(res.out))  # (B, N, h, d_v)
    if not return_attn_probs:
        return out
    return out, prec.rounded("softmax_lse", res.lse, prec.lse), prec.rounded("probs", res.probs)


def _descaled(q, k, v, descales):
    """FP8 q, k, v times their descales, in float64; other dtypes as they are (no descale)."""
    fp8 = _fp8.is_fp8(q.dtype)
    batch, kv_heads = k.shape[0], k.shape[2]
    out = []
    for name, x, given in zip(_fp8.DESCALES, (q, k, v), descales, strict=True):
        if given is not None and not fp8:
            raise AttnlabError(
                f"expected {name} only with float8 inputs (it undoes their scaling), but got "
                f"q.dtype={q.dtype} instead"
            )
        out.append(
            _fp8.dequantised(x, _fp8.read_descale(name, given, batch, kv_heads)) if fp8 else x
        )
    return out


def _fixed_arrays(q, k, v, opts, fp8=False):
    """q (B, N, h, d), k (B, M, h_k, d), v (B, M, h_k, d_v), checked against each other."""
    q = real_array("q", q, (4,), "(batch_size, seqlen_q, nheads, headdim)", fp8=fp8)
    k = real_array("k", k, (4,), "(batch_size, seqlen_k, nheads_k, headdim)", fp8=fp8)
    v = real_array("v", v, (4,), "(batch_size, seqlen_k, nheads_k, headdim_v)", fp8=fp8)
    if not q.shape[0] == k.shape[0] == v.shape[0] or k.shape[1] != v.shape[1]:
        raise ShapeError(
            "expected q, k and v to share the batch size and k and v the key count, but got "
            f"q.shape={q.shape}, k.shape={k.shape} and v.shape={v.shape} instead"
        )
    one_dtype(("q", q), ("k", k), ("v", v))
    check_heads(q, k, v, opts.slopes, q.shape[0])
    return q, k, v


def _heads_first(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)  # (B, N, h, d) -> (B, h, N, d)


def _seq_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))  # (B, h, N, d) -> (B, N, h, d)
