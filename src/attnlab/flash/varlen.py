"""FlashAttention 2's variable-length functions: sequences of different lengths packed in a row.

Shape legend (FlashAttention's packed layout; T_q and T_k total rows, B sequences):
    q (T_q, h, d)   k (T_k, h_k, d)   v (T_k, h_k, d_v)   out (T_q, h, d_v)
    cu_seqlens_q (B + 1,)  cu_seqlens_k (B + 1,): sequence b is rows cu[b] .. cu[b + 1] - 1
    softmax_lse (h, T_q)   probs (B, h, max_seqlen_q, max_seqlen_k), zero-padded
    with block_table (B, max_blocks): k, v are pages (num_blocks, page, h_k, d)

Each sequence is its own attention problem, aligned on its own lengths N_b and M_b: causal
masks, windows and ALiBi distances are bottom-right aligned per sequence, as FlashAttention
aligns them. attnlab runs the sequences one after another through the same path as
``flash_attn_func`` (``_attend.forward``). The signatures are FlashAttention's, written out.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import _attend, _paged
from attnlab.flash._arrays import (
    Precision,
    backward_arrays,
    one_dtype,
    real_array,
    scalar_int,
    unstack,
    whole_numbers,
)
from attnlab.flash._options import check_heads, read_backward_options, read_options

__all__ = [
    "flash_attn_varlen_backward",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
]


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    rng=None,
):
    """FlashAttention 2's ``flash_attn_varlen_func``: packed sequences, each attended alone.

    Args:
        q: (T_q, h, d).  k, v: (T_k, h_k, d) and (T_k, h_k, d_v), or with ``block_table``
            pages (num_blocks, page, h_k, d), sequence b's keys in the pages block_table[b].
        cu_seqlens_q, cu_seqlens_k: (B + 1,) integers from 0, never decreasing, ending at
            T_q (and T_k without pages): the sequences' boundaries.
        max_seqlen_q, max_seqlen_k: at least the longest sequence (the probs' padded shape):
            an int, or a 0-d integer array or tensor.
        The other options are ``flash_attn_func``'s, applied to each sequence on its own
        lengths; alibi_slopes (B, h) gives sequence b the row b. After return_attn_probs
        comes block_table=None, then the keyword-only rng=None.

    Returns:
        out (T_q, h, d_v); with return_attn_probs, (out, softmax_lse (h, T_q),
        probs (B, h, max_seqlen_q, max_seqlen_k)).
    """
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    seqs = _Sequences.read(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table, opts
    )
    return _forward(seqs, opts, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
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
    """``flash_attn_varlen_func`` on qkv (T, 3, h, d): self-attention per packed sequence."""
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    q, k, v = unstack("qkv", qkv, 3, "(total, 3, nheads, headdim)", "(T, 3, h, d)")
    seqs = _Sequences.read(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, None, opts)
    return _forward(seqs, opts, return_attn_probs)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
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
    """``flash_attn_varlen_func`` on q (T_q, h, d) and kv (T_k, 2, h_k, d)."""
    opts = read_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
    )
    k, v = unstack("kv", kv, 2, "(total_k, 2, nheads_k, headdim)", "(T_k, 2, h_k, d)")
    seqs = _Sequences.read(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None, opts
    )
    return _forward(seqs, opts, return_attn_probs)


def flash_attn_varlen_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
):
    """``flash_attn_backward`` for ``flash_attn_varlen_func``: packed (dq, dk, dv).

    dout (T_q, h, d_v); out and softmax_lse (h, T_q) may be None (the row sums are then
    recomputed). Returns dq (T_q, h, d), dk (T_k, h_k, d), dv (T_k, h_k, d_v), in q's dtype.
    """
    opts = read_backward_options(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic
    )
    seqs = _Sequences.read(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None, opts
    )
    t_q, h = seqs.q.shape[:2]
    dout, lse = backward_arrays(dout, softmax_lse, (t_q, h, seqs.v.shape[-1]), (h, t_q))
    prec = seqs.precision
    one_dtype(("q", seqs.q), ("dout", dout))
    dout = dout.astype(prec.compute, copy=False)
    lse = None if lse is None else lse.astype(prec.compute)
    grads = [np.zeros(a.shape, prec.compute) for a in (seqs.q, seqs.k, seqs.v)]
    for b in range(seqs.batch):
        qb, kb, vb = seqs.problem(b)
        rows_q = slice(seqs.cu_q[b], seqs.cu_q[b + 1])
        rows_k = slice(seqs.cu_k[b], seqs.cu_k[b + 1])
        gb = np.swapaxes(dout[rows_q], 0, 1)  # (h, N_b, d_v)
        lb = None if lse is None else lse[:, rows_q]  # (h, N_b)
        dq, dk, dv = _attend.backward(qb, kb, vb, gb, opts, lse=lb, slopes=seqs.slopes(b))
        for grad, part, rows in zip(grads, (dq, dk, dv), (rows_q, rows_k, rows_k), strict=True):
            grad[rows] = np.swapaxes(part, 0, 1)  # (rows_b, heads, width)
    return tuple(prec.rounded(n, g) for n, g in zip(("dq", "dk", "dv"), grads, strict=True))


def _forward(seqs: _Sequences, opts, return_attn_probs: bool):
    """``flash_attn_varlen_func`` once its arguments are read: every forward form ends here."""
    h, d_v = seqs.q.shape[1], seqs.v.shape[-1]
    prec, dtype = seqs.precision, seqs.precision.compute
    out = np.zeros((seqs.q.shape[0], h, d_v), dtype)  # (T_q, h, d_v)
    lse = np.full((h, seqs.q.shape[0]), -np.inf, dtype) if return_attn_probs else None
    probs = np.zeros((seqs.batch, h, seqs.max_q, seqs.max_k), dtype) if return_attn_probs else None
    for b in range(seqs.batch):
        rows = slice(seqs.cu_q[b], seqs.cu_q[b + 1])
        qb, kb, vb = seqs.problem(b)  # (h, N_b, d), (h_k, M_b, d), (h_k, M_b, d_v)
        res = _attend.forward(
            qb, kb, vb, opts, lse=return_attn_probs, probs=return_attn_probs, slopes=seqs.slopes(b)
        )
        out[rows] = np.swapaxes(res.out, 0, 1)  # (N_b, h, d_v)
        if return_attn_probs:
            lse[:, rows] = res.lse  # (h, N_b)
            probs[b, :, : qb.shape[1], : kb.shape[1]] = res.probs
    out = prec.rounded("out", out)
    if not return_attn_probs:
        return out
    return out, prec.rounded("softmax_lse", lse, prec.lse), prec.rounded("probs", probs)


class _Sequences:
    """The packed arrays and their boundaries, checked; ``problem(b)`` cuts out sequence b."""

    @classmethod
    def read(cls, q, k, v, cu_q, cu_k, max_q, max_k, block_table, opts):
        self = cls()
        self.q = real_array("q", q, (3,), "(total_q, nheads, headdim)")
        paged = block_table is not None
        layout = (
            "(num_blocks, page_block_size, nheads_k, headdim)"
            if paged
            else "(total_k, nheads_k, headdim)"
        )
        self.k = real_array("k", k, (4,) if paged else (3,), layout)
        self.v = real_array("v", v, (4,) if paged else (3,), layout)
        if self.k.shape[:-1] != self.v.shape[:-1]:
            raise ShapeError(
                f"expected k and v to share all but the last axis, but got "
                f"k.shape={self.k.shape} and v.shape={self.v.shape} instead"
            )
        self.cu_q = _boundaries("cu_seqlens_q", cu_q, self.q.shape[0])
        self.cu_k = _boundaries("cu_seqlens_k", cu_k, None if paged else self.k.shape[0])
        if self.cu_q.size != self.cu_k.size:
            raise ShapeError(
                f"expected cu_seqlens_q and cu_seqlens_k of the same length B + 1, "
                f"but got {self.cu_q.size} and {self.cu_k.size} instead"
            )
        self.batch = self.cu_q.size - 1
        self.max_q = _max_len("max_seqlen_q", max_q, np.diff(self.cu_q))
        self.max_k = _max_len("max_seqlen_k", max_k, np.diff(self.cu_k))
        self.table = None
        if paged:
            self.table = _paged.check_table(
                block_table, self.batch, self.k.shape[0], self.k.shape[1], np.diff(self.cu_k)
            )
        check_heads(self.q, self.k, self.v, opts.slopes, self.batch)
        self.precision = Precision.of(one_dtype(("q", self.q), ("k", self.k), ("v", self.v)))
        self._slopes = opts.slopes
        return self

    def problem(self, b: int):
        """Sequence b as (h, N_b, d), (h_k, M_b, d), (h_k, M_b, d_v)."""
        qb = self.q[self.cu_q[b] : self.cu_q[b + 1]]  # (N_b, h, d)
        length = self.cu_k[b + 1] - self.cu_k[b]
        if self.table is None:
            rows = slice(self.cu_k[b], self.cu_k[b + 1])
            kb, vb = self.k[rows], self.v[rows]  # (M_b, h_k, d)
        else:
            where = _paged.slots(self.table[b], self.k.shape[1], 0, length)
            kb, vb = self.k[where], self.v[where]  # (M_b, h_k, d)
        dtype = self.precision.compute
        return tuple(np.swapaxes(x, 0, 1).astype(dtype, copy=False) for x in (qb, kb, vb))

    def slopes(self, b: int):
        """Sequence b's ALiBi slopes (h,), or None."""
        if self._slopes is None or self._slopes.ndim == 1:
            return self._slopes
        return self._slopes[b]


def _boundaries(name: str, cu, total: int | None) -> np.ndarray:
    cu = whole_numbers(name, cu, "(batch_size + 1,)")
    if cu.size < 2 or cu[0] != 0 or (np.diff(cu) < 0).any():
        raise AttnlabError(
            f"expected {name} to start at 0 and never decrease, with at least "
            f"two entries, but got {cu.tolist()} instead"
        )
    if total is not None and cu[-1] != total:
        raise AttnlabError(
            f"expected {name} to end at the {total} packed rows, but it ends at {int(cu[-1])}"
        )
    return cu


def _max_len(name: str, value, lengths: np.ndarray) -> int:
    longest = int(lengths.max())
    got = scalar_int(value)  # an int, or a 0-d integer array or tensor
    if got is None or got < longest:
        raise AttnlabError(
            f"expected {name} to be an integer at least the longest sequence "
            f"({longest}), but got {value!r} instead"
        )
    return got
