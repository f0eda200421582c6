"""Multi-head attention (§6.6): h heads side by side, joined and mixed by W^O.

Shape legend (the chapter's letters):
    ...      leading batch axes of the inputs      h    heads
    N        query rows                            M    key rows
    d_model  model width (query input width)       kdim, vdim  key and value input widths
    d_k      per-head query/key width              d_v  per-head value width

    head_i        = Attention(query W_i^Q + b_i^Q, key W_i^K + b_i^K, value W_i^V + b_i^V)
    MultiHead     = [head_1; ...; head_h] W^O + b^O
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.api.attention import attention
from attnlab.core._checks import positive_int
from attnlab.core._validate import as_real, compute_dtype, refuse_non_finite
from attnlab.core.masks import Mask
from attnlab.errors import AttnlabError, ShapeError

__all__ = ["MultiHeadAttention", "multi_head_attention"]


def _head_mask(mask, query_ndim: int):
    """Give an array mask a head axis: (..., N, M) -> (..., 1, N, M); (..., h, N, M) stays."""
    if mask is None or isinstance(mask, Mask):
        return mask
    arr = np.asarray(mask)
    if arr.ndim >= 2 and arr.ndim <= query_ndim:
        return np.expand_dims(arr, -3)  # (..., 1, N, M): the same table for every head
    return arr  # already (..., h, N, M)


def _checked(query, key, value, w_q, w_k, w_v, w_o, biases, mask, check_finite):
    """The inputs and weights checked (shapes, finiteness, biases, a batched mask) and cast to
    the compute dtype: dtype in = dtype out, the inputs set it and the weights follow them."""
    query, key, value = as_real("query", query), as_real("key", key), as_real("value", value)
    w_q, w_k, w_v, w_o = (
        as_real(n, w) for n, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o))
    )
    _check_weights(query, key, value, w_q, w_k, w_v, w_o)
    if check_finite:  # name the array the user passed, not the projected heads built from it
        for name, arr in (("query", query), ("key", key), ("value", value), ("w_q", w_q),
                          ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):  # fmt: skip
            refuse_non_finite(name, arr)
    h, d_k, d_v = w_q.shape[0], w_q.shape[2], w_v.shape[2]
    shapes = ((h, d_k), (h, d_k), (h, d_v), (w_o.shape[1],))
    for name, b, shape in zip(("b_q", "b_k", "b_v", "b_o"), biases, shapes, strict=True):
        if b is not None and np.shape(b) != shape:
            raise ShapeError(f"expected {name} of shape {shape}, but got {np.shape(b)} instead")
    if isinstance(mask, Mask) and mask.batched and max(query.ndim, key.ndim, value.ndim) < 3:
        # Without a batch axis the heads would be the first leading axis, and Padding's lengths
        # would silently be read per head.
        raise ShapeError(
            f"expected inputs with a batch axis, (B, ..., N, d_model), for {mask!r}, whose "
            f"lengths index the batch, but got query.shape={query.shape}, key.shape={key.shape} "
            f"and value.shape={value.shape} instead"
        )
    dtype = compute_dtype(query, key, value)
    return tuple(a.astype(dtype, copy=False) for a in (query, key, value, w_q, w_k, w_v, w_o))


def _project(x, w, b):
    """x (..., L, width) through every head's w (h, width, d) at once, plus b (h, d) if given:
    (..., h, L, d)."""
    out = x[..., None, :, :] @ w  # (..., h, L, d)
    if b is not None:
        out += np.asarray(b, dtype=x.dtype)[:, None, :]
    return out


def multi_head_attention(
    query,
    key,
    value,
    w_q,
    w_k,
    w_v,
    w_o,
    *,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
    mask=None,
    scale=None,
    return_weights=False,
    check_finite=True,
    method="auto",
    block_size=None,
    threads=None,
    memory_budget=None,
):
    """Functional multi-head attention.

    Args:
        query: (..., N, d_model).   key: (..., M, kdim).   value: (..., M, vdim).
        w_q: (h, d_model, d_k).   w_k: (h, kdim, d_k).   w_v: (h, vdim, d_v).
        w_o: (h * d_v, d_model_out).   b_q, b_k: (h, d_k).   b_v: (h, d_v).   b_o: (d_model_out,).
        mask: as for ``attention``; an array of shape (..., N, M) applies to every head,
            (..., h, N, M) to each head separately. A ``Padding`` mask indexes the batch axis.
        scale: None for 1/sqrt(d_k).
        check_finite, method, block_size, threads, memory_budget: ``attention``'s run options
            (its names, order and defaults), passed to it; every head goes through it: "auto" switches to the blockwise path when the (..., h, N, M) table would
            exceed the budget, and no (..., h, N, M) table is built unless the weights are asked
            for.

    Returns:
        out (..., N, d_model_out), or (out, weights (..., h, N, M)).
    """
    query, key, value, w_q, w_k, w_v, w_o = _checked(
        query, key, value, w_q, w_k, w_v, w_o, (b_q, b_k, b_v, b_o), mask, check_finite
    )
    dtype = query.dtype
    # 1) project: every head at once, heads as a batch axis
    q = _project(query, w_q, b_q)  # (..., h, N, d_k)
    k = _project(key, w_k, b_k)  # (..., h, M, d_k)
    v = _project(value, w_v, b_v)  # (..., h, M, d_v)

    # 2) attend: the single-head dispatcher, heads as a batch axis
    attended = attention(
        q,
        k,
        v,
        _head_mask(mask, query.ndim),
        scale=scale,
        return_weights=return_weights,
        check_finite=check_finite,
        method=method,
        memory_budget=memory_budget,
        block_size=block_size,
        threads=threads,
    )
    heads, weights = attended if return_weights else (attended, None)  # (..., h, N, d_v)

    # 3) concat [head_1; ...; head_h] along features, then mix with W^O
    joined = np.swapaxes(heads, -2, -3)  # (..., N, h, d_v)
    joined = joined.reshape(joined.shape[:-2] + (-1,))  # (..., N, h * d_v)
    out = joined @ w_o  # (..., N, d_model_out)
    if b_o is not None:
        out += np.asarray(b_o, dtype=dtype)
    return (out, weights) if return_weights else out


def _check_weights(query, key, value, w_q, w_k, w_v, w_o) -> None:
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w.ndim != 3:
            raise ShapeError(
                f"expected {name} of shape (h, in, out), but got {name}.shape={w.shape}"
            )
    h, d_model, d_k = w_q.shape
    checks = [
        (w_k.shape[0] == h and w_v.shape[0] == h, "w_q, w_k and w_v to have the same head count h"),
        (query.shape[-1] == d_model, "query's last axis to equal w_q.shape[1] (d_model)"),
        (key.shape[-1] == w_k.shape[1], "key's last axis to equal w_k.shape[1] (kdim)"),
        (value.shape[-1] == w_v.shape[1], "value's last axis to equal w_v.shape[1] (vdim)"),
        (w_k.shape[2] == d_k, "w_q and w_k to share the per-head width d_k"),
        (w_o.ndim == 2 and w_o.shape[0] == h * w_v.shape[2], "w_o of shape (h * d_v, d_model)"),
    ]
    for ok, what in checks:
        if not ok:
            raise ShapeError(
                f"expected {what}, but got query.shape={query.shape}, key.shape={key.shape}, "
                f"value.shape={value.shape}, w_q.shape={w_q.shape}, w_k.shape={w_k.shape}, "
                f"w_v.shape={w_v.shape}, w_o.shape={w_o.shape} instead"
            )


class MultiHeadAttention:
    """Multi-head attention with per-head projections and the output projection W^O (§6.6).

    Args:
        d_model: model width (the query input width, and the output width).
        num_heads: h.
        d_k, d_v: per-head widths; default d_model / h (which must then divide evenly).
            h * d_v != d_model is allowed: W^O maps it back to d_model.
        kdim, vdim: key and value input widths for cross-attention (default d_model).
        bias: add biases to the four projections.
        seed: seed or numpy Generator for the initial weights (Xavier-uniform, zero biases).

    Attributes:
        w_q (h, d_model, d_k)   w_k (h, kdim, d_k)   w_v (h, vdim, d_v)   w_o (h*d_v, d_model)
        b_q (h, d_k)   b_k (h, d_k)   b_v (h, d_v)   b_o (d_model,)   (None when bias=False)

    >>> mha = MultiHeadAttention(8, 2, seed=0)
    >>> out, w = mha(np.ones((3, 8)), return_weights=True)
    >>> out.shape, w.shape
    ((3, 8), (2, 3, 3))
    """

    def __init__(
        self, d_model, num_heads, *, d_k=None, d_v=None, kdim=None, vdim=None, bias=True, seed=None
    ):
        d_model, h = positive_int("d_model", d_model), positive_int("num_heads", num_heads)
        if (d_k is None or d_v is None) and d_model % h:
            raise AttnlabError(
                f"expected num_heads to divide d_model when d_k or d_v is not given, "
                f"but got d_model={d_model} and num_heads={h}"
            )
        d_k = positive_int("d_k", d_model // h if d_k is None else d_k)
        d_v = positive_int("d_v", d_model // h if d_v is None else d_v)
        kdim = positive_int("kdim", d_model if kdim is None else kdim)
        vdim = positive_int("vdim", d_model if vdim is None else vdim)
        rng = np.random.default_rng(seed)

        def xavier(fan_in, fan_out, shape):
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            return rng.uniform(-bound, bound, size=shape)

        self.d_model, self.num_heads, self.d_k, self.d_v = d_model, h, d_k, d_v
        self.kdim, self.vdim = kdim, vdim
        self.w_q = xavier(d_model, h * d_k, (h, d_model, d_k))
        self.w_k = xavier(kdim, h * d_k, (h, kdim, d_k))
        self.w_v = xavier(vdim, h * d_v, (h, vdim, d_v))
        self.w_o = xavier(h * d_v, d_model, (h * d_v, d_model))
        self.b_q = np.zeros((h, d_k)) if bias else None
        self.b_k = np.zeros((h, d_k)) if bias else None
        self.b_v = np.zeros((h, d_v)) if bias else None
        self.b_o = np.zeros(d_model) if bias else None

    def __repr__(self) -> str:
        return (
            f"MultiHeadAttention(d_model={self.d_model}, num_heads={self.num_heads}, "
            f"d_k={self.d_k}, d_v={self.d_v}, kdim={self.kdim}, vdim={self.vdim}, "
            f"bias={self.b_q is not None})"
        )

    def __call__(
        self,
        query,
        key=None,
        value=None,
        mask=None,
        return_weights=False,
        *,
        check_finite=True,
        method="auto",
        block_size=None,
        threads=None,
        memory_budget=None,
    ):
        """query (..., N, d_model); key (..., M, kdim) defaults to query; value defaults to key.

        ``method``, ``memory_budget``, ``block_size`` and ``threads`` are ``attention``'s: a
        long input switches to the blockwise path instead of running out of memory.

        Returns out (..., N, d_model), or (out, weights (..., h, N, M)).
        """
        key = query if key is None else key
        value = key if value is None else value
        return multi_head_attention(
            query, key, value, self.w_q, self.w_k, self.w_v, self.w_o,
            b_q=self.b_q, b_k=self.b_k, b_v=self.b_v, b_o=self.b_o,
            mask=mask, return_weights=return_weights, check_finite=check_finite, method=method,
            memory_budget=memory_budget, block_size=block_size, threads=threads,
        )  # fmt: skip

    @classmethod
    def from_torch(cls, module) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention``.

        The result computes what the module computes in eval mode (no dropout); call it with
        batch-first inputs (..., N, d_model). torch is needed only to call this method.
        """
        if getattr(module, "bias_k", None) is not None or getattr(module, "add_zero_attn", False):
            raise AttnlabError("expected a MultiheadAttention without add_bias_kv or add_zero_attn")
        e, h = module.embed_dim, module.num_heads
        hd = e // h

        def arr(t):
            return t.detach().cpu().double().numpy()

        if module._qkv_same_embed_dim:
            wq, wk, wv = np.split(arr(module.in_proj_weight), 3)  # each (E, E)
        else:
            wq, wk, wv = (
                arr(module.q_proj_weight),
                arr(module.k_proj_weight),
                arr(module.v_proj_weight),
            )
        mha = cls(e, h, kdim=module.kdim, vdim=module.vdim, bias=module.in_proj_bias is not None)

        def per_head(w):  # torch computes x @ w.T; head i owns output rows i*hd:(i+1)*hd
            return np.ascontiguousarray(w.reshape(h, hd, -1).transpose(0, 2, 1))  # (h, in, hd)

        mha.w_q, mha.w_k, mha.w_v = per_head(wq), per_head(wk), per_head(wv)
        mha.w_o = arr(module.out_proj.weight).T.copy()  # (h*d_v, d_model)
        if module.in_proj_bias is not None:
            bq, bk, bv = np.split(arr(module.in_proj_bias), 3)
            mha.b_q, mha.b_k, mha.b_v = bq.reshape(h, hd), bk.reshape(h, hd), bv.reshape(h, hd)
        mha.b_o = None if module.out_proj.bias is None else arr(module.out_proj.bias)
        return mha
