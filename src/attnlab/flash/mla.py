"""FlashMLA's interface on numpy arrays: dense paged decoding and sparse (top-k) prefill.

Shape legend (FlashMLA's letters):
    b  sequences      s_q  queries per sequence     h_q, h_kv  query and key/value heads
    d  key width (576 in DeepSeek's MLA: 512 latent + 64 rotary)   dv  value width (512)
    dense:  q (b, s_q, h_q, d)   k_cache (num_blocks, page_block_size, h_kv, d)
            block_table (b, max_blocks)   cache_seqlens (b,)   out (b, s_q, h_q, dv)
            lse (b, h_q, s_q)
    sparse: q (s_q, h_q, d_qk)   kv (s_kv, h_kv, d_qk)   indices (s_q, h_kv, topk)
            out (s_q, h_q, d_v)  max_logits, lse (s_q, h_q)

Multi-head latent attention keeps one cache row per token whose first dv columns are the value:
V = K[..., :dv]. Sequence b's keys are its cache rows 0 .. cache_seqlens[b] - 1, paged as
FlashAttention's paged cache (``_paged.py``). ``causal`` is bottom-right: query i of s_q sees
keys up to i + L_b - s_q (several queries per step: speculative decoding). The sparse form
gives each query its own keys, ``indices`` into kv per key/value head; -1, or any index >= s_kv,
is no key (FlashMLA's convention), and a key listed twice counts twice.

Every softmax is ``attnlab.attention``'s (through ``_attend.py``); the log-sum-exps are natural
logs of the scaled scores, as FlashMLA's current reference computes them (its first README wrote
the sparse one in base 2). A row that sees no key gets output 0 and lse +inf (FlashMLA's choice,
so that exp(-lse) is 0), and max_logits -inf. float16 and bfloat16 compute in float64 and round
once; their lse and max_logits come back in float32 (FlashMLA's), float32 and float64 stay
themselves.
"""

from __future__ import annotations

import numpy as np

from attnlab.api.attention import attention
from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import _attend
from attnlab.flash._arrays import Precision, array_of_shape, one_dtype, real_array, whole_numbers
from attnlab.flash._options import read_options
from attnlab.flash._paged import check_table

__all__ = ["flash_mla_backward", "flash_mla_sparse_fwd", "flash_mla_with_kvcache"]


def _dense_arrays(q, k_cache, block_table, cache_seqlens, head_dim_v):
    q = real_array("q", q, (4,), "(batch_size, seq_len_q, num_heads_q, head_dim)")
    k_cache = real_array(
        "k_cache", k_cache, (4,), "(num_blocks, page_block_size, num_heads_k, head_dim)"
    )
    one_dtype(("q", q), ("k_cache", k_cache))
    b, _, h_q, d = q.shape
    if k_cache.shape[-1] != d or h_q % max(k_cache.shape[2], 1) or 0 in k_cache.shape:
        raise ShapeError(
            f"expected k_cache of shape (num_blocks, page_block_size, h_kv, {d}) with h_kv "
            f"dividing q's {h_q} heads, but got k_cache.shape={k_cache.shape} instead"
        )
    _check_dv(head_dim_v, d, "head_dim_v")
    lens = whole_numbers("cache_seqlens", cache_seqlens, f"({b},)")
    if lens.shape != (b,) or (lens < 0).any():
        raise AttnlabError(
            f"expected cache_seqlens of shape ({b},) with no negative length, but got "
            f"{lens.tolist() if lens.size <= 8 else lens.shape} instead"
        )
    table = check_table(block_table, b, k_cache.shape[0], k_cache.shape[1], lens)
    return q, k_cache, table, lens


def _check_dv(dv, d: int, name: str) -> None:
    ok = isinstance(dv, int | np.integer) and not isinstance(dv, bool) and 0 < dv <= d
    if not ok:
        raise AttnlabError(
            f"expected {name} to be an integer from 1 to the key width {d} (V is the first "
            f"{name} columns of K), but got {dv!r} instead"
        )


def _keys(k_cache, table_row, page: int, length: int) -> np.ndarray:
    """One sequence's cache rows 0 .. length - 1, heads first: (h_kv, L, d)."""
    rows = np.arange(length)
    return np.swapaxes(k_cache[table_row[rows // page], rows % page], 0, 1)  # (h_kv, L, d)


def flash_mla_with_kvcache(
    q,
    k_cache,
    block_table,
    cache_seqlens,
    head_dim_v,
    tile_scheduler_metadata=None,
    num_splits=None,
    softmax_scale=None,
    causal=False,
):
    """FlashMLA's ``flash_mla_with_kvcache``: exact dense decoding over a paged latent cache.

    Args:
        q: (b, s_q, h_q, d).  k_cache: (num_blocks, page_block_size, h_kv, d): keys, whose
            first head_dim_v columns are the values.
        block_table: (b, max_blocks) integers: sequence b's pages in order.
        cache_seqlens: (b,) integers: the keys each sequence attends to.
        head_dim_v: the value width dv.
        tile_scheduler_metadata, num_splits: FlashMLA's work split from get_mla_metadata;
            accepted and unused (attnlab's answer does not depend on a schedule).
        softmax_scale: multiplies q kᵀ; None for 1/sqrt(d).
        causal: query i sees keys up to i + cache_seqlens[b] - s_q (bottom-right).

    Returns:
        (out (b, s_q, h_q, dv) in q's dtype, lse (b, h_q, s_q): natural log, float32 for
        half types; a row with no key: out 0 and lse +inf).
    """
    q, k_cache, table, lens = _dense_arrays(q, k_cache, block_table, cache_seqlens, head_dim_v)
    opts = read_options(0.0, softmax_scale, causal, (-1, -1), 0.0, None, False, None)
    prec = Precision.of(q.dtype)
    b, s_q, h_q, _ = q.shape
    out = np.zeros((b, s_q, h_q, head_dim_v), prec.compute)
    lse = np.full((b, h_q, s_q), np.inf, prec.compute)  # rows with no key keep +inf
    page = k_cache.shape[1]
    for i in range(b):
        if lens[i] == 0:
            continue
        k = _keys(k_cache, table[i], page, int(lens[i])).astype(prec.compute)  # (h_kv, L, d)
        qi = np.swapaxes(q[i], 0, 1).astype(prec.compute)  # (h_q, s_q, d)
        res = _attend.forward(qi, k, k[..., :head_dim_v], opts, lse=True)
        out[i] = np.swapaxes(res.out, 0, 1)  # (s_q, h_q, dv)
        lse[i] = np.where(np.isneginf(res.lse), np.inf, res.lse)
    return prec.rounded("out", out), prec.rounded("softmax_lse", lse, prec.lse)


def flash_mla_backward(
    dout,
    q,
    k_cache,
    block_table,
    cache_seqlens,
    head_dim_v,
    out=None,
    softmax_lse=None,
    softmax_scale=None,
    causal=False,
):
    """The gradients of ``flash_mla_with_kvcache``'s out for an upstream dout (b, s_q, h_q, dv).

    Returns (dq (b, s_q, h_q, d), dk_cache (num_blocks, page_block_size, h_kv, d)): the value
    is a slice of the key, so a cache row's gradient is its key gradient plus its value
    gradient on the first head_dim_v columns, summed over every sequence and query head that
    reads it (rows no sequence reads get 0). ``out`` and ``softmax_lse`` are accepted as
    FlashAttention's backward takes them and not needed (the weights are recomputed).
    """
    q, k_cache, table, lens = _dense_arrays(q, k_cache, block_table, cache_seqlens, head_dim_v)
    b, s_q, h_q, _ = q.shape
    dout = array_of_shape("dout", dout, (b, s_q, h_q, head_dim_v), "out's shape")
    prec = Precision.of(one_dtype(("q", q), ("dout", dout)))
    opts = read_options(0.0, softmax_scale, causal, (-1, -1), 0.0, None, False, None)
    dq = np.zeros(q.shape, prec.compute)
    dk_cache = np.zeros(k_cache.shape, prec.compute)
    page = k_cache.shape[1]
    for i in range(b):
        if lens[i] == 0:
            continue
        k = _keys(k_cache, table[i], page, int(lens[i])).astype(prec.compute)  # (h_kv, L, d)
        qi = np.swapaxes(q[i], 0, 1).astype(prec.compute)  # (h_q, s_q, d)
        doi = np.swapaxes(dout[i], 0, 1).astype(prec.compute)  # (h_q, s_q, dv)
        gq, gk, gv = _attend.backward(qi, k, k[..., :head_dim_v], doi, opts)
        gk[..., :head_dim_v] += gv  # V = K[..., :dv]: both uses of a row add
        rows = np.arange(int(lens[i]))
        dq[i] = np.swapaxes(gq, 0, 1)
        # Pages may be shared between sequences (a common prefix): accumulate, never assign.
        np.add.at(dk_cache, (table[i][rows // page], rows % page), np.swapaxes(gk, 0, 1))
    return prec.rounded("dq", dq), prec.rounded("dk_cache", dk_cache)


def _sparse_arrays(q, kv, indices, d_v):
    q = real_array("q", q, (3,), "(s_q, h_q, d_qk)")
    kv = real_array("kv", kv, (3,), "(s_kv, h_kv, d_qk)")
    one_dtype(("q", q), ("kv", kv))
    s_q, h_q, d = q.shape
    if kv.shape[-1] != d or 0 in kv.shape or h_q % kv.shape[1]:
        raise ShapeError(
            f"expected kv of shape (s_kv, h_kv, {d}) with h_kv dividing q's {h_q} heads, but "
            f"got kv.shape={kv.shape} instead"
        )
    _check_dv(d_v, d, "d_v")
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" or idx.ndim != 3 or idx.shape[:2] != (s_q, kv.shape[1]):
        raise ShapeError(
            f"expected indices to be an integer array of shape (s_q, h_kv, topk) = "
            f"({s_q}, {kv.shape[1]}, topk), but got dtype {idx.dtype} and shape {idx.shape} "
            "instead"
        )
    if idx.shape[2] == 0:
        raise ShapeError(
            f"expected indices with at least one slot per query (topk >= 1), but got "
            f"indices.shape={idx.shape} instead"
        )
    idx = idx.astype(np.int64)
    if (idx < -1).any():
        where = tuple(int(i) for i in np.argwhere(idx < -1)[0])
        raise AttnlabError(
            f"expected indices from 0 to s_kv - 1 = {kv.shape[0] - 1}, or -1 (or >= s_kv) for "
            f"no key, but got {int(idx[where])} at index {where} instead"
        )
    return q, kv, idx


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512):
    """FlashMLA's ``flash_mla_sparse_fwd``: each query attends only to its top-k keys.

    Args:
        q: (s_q, h_q, d_qk).  kv: (s_kv, h_kv, d_qk): keys, whose first d_v columns are the
            values.  indices: (s_q, h_kv, topk) integers into kv's rows, per query and
            key/value head; -1 or >= s_kv is no key.  sm_scale: multiplies q kᵀ.
        d_v: the value width.

    Returns:
        (out (s_q, h_q, d_v) in q's dtype, max_logits (s_q, h_q), lse (s_q, h_q)), both
        float32 for half types: the largest scaled score and the natural log-sum-exp of the scaled scores
        over the query's keys; a row with no key: out 0, max_logits -inf, lse +inf.
    """
    q, kv, idx = _sparse_arrays(q, kv, indices, d_v)
    try:  # FlashMLA's name for FlashAttention's softmax_scale, checked by the same rule
        scale = read_options(0.0, sm_scale, False, (-1, -1), 0.0, None, False, None).scale
    except AttnlabError as err:
        raise AttnlabError(str(err).replace("softmax_scale", "sm_scale")) from None
    prec = Precision.of(q.dtype)
    s_q, h_q, d = q.shape
    s_kv, h_kv = kv.shape[:2]
    valid = (idx >= 0) & (idx < s_kv)  # (s_q, h_kv, topk)
    heads = np.arange(h_kv)[None, :, None]
    keys = kv[np.where(valid, idx, 0), heads].astype(prec.compute)  # (s_q, h_kv, topk, d)
    qg = q.reshape(s_q, h_kv, h_q // h_kv, 1, d).astype(prec.compute)  # (s_q, h_kv, g, 1, d)
    k5 = keys[:, :, None]  # (s_q, h_kv, 1, topk, d)
    allowed = valid[:, :, None, None, :]  # (s_q, h_kv, 1, 1, topk)
    out, lse = attention(
        qg, k5, k5[..., :d_v], allowed, scale=scale, return_lse=True, fully_masked="zero"
    )  # (s_q, h_kv, g, 1, d_v), (s_q, h_kv, g, 1)
    with np.errstate(invalid="ignore"):
        scores = np.where(allowed, qg @ np.swapaxes(k5, -1, -2), -np.inf)  # (s_q, h_kv, g, 1, topk)
    scores *= scale if scale is not None else 1.0 / np.sqrt(d)
    max_logits = scores.max(axis=-1).reshape(s_q, h_q)
    lse = np.where(np.isneginf(lse), np.inf, lse).reshape(s_q, h_q)
    return (
        prec.rounded("out", out.reshape(s_q, h_q, d_v)),
        max_logits.astype(prec.lse),
        lse.astype(prec.lse),
    )
