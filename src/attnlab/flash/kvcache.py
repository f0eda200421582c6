"""FlashAttention 2's ``flash_attn_with_kvcache``: decoding against a key/value cache.

Shape legend:
    q (B, N, h, d)      k, v new rows (B, N_new, h_k, d), (B, N_new, h_k, d_v)
    k_cache, v_cache    (B_c, S, h_k, d) contiguous, or pages (num_blocks, page, h_k, d) with
                        block_table (B, max_blocks)
    cache_seqlens (B,)  rows already in each sequence's cache: L_b
    out (B, N, h, d_v)  softmax_lse (B, h, N)

Sequence b attends to its cache rows leftpad_b .. L_b + N_new - 1 (after the new rows are
written at L_b .. L_b + N_new - 1, in place), M_b = L_b + N_new - leftpad_b keys, with causal
masks, windows and ALiBi bottom-right aligned on (N, M_b). Rotary turns the new keys at
positions L_b + s and the queries at L_b + i (causal or windowed) or all at L_b (otherwise).

A refused call leaves the cache as it was: every input is checked (shapes, dtypes, NaN and inf
in q, the new rows and the live cache rows, the turned keys fitting the cache's dtype) before
the first row is written, and should the attention itself still fail, the overwritten rows are
put back before the error goes on.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._validate import refuse_non_finite
from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import _attend, _paged
from attnlab.flash._arrays import Precision, one_dtype, real_array, scalar_int, whole_numbers
from attnlab.flash._options import check_heads, read_options
from attnlab.flash.rotary import apply_rotary

__all__ = ["flash_attn_with_kvcache"]


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attend q to a key/value cache, first appending k and v to it in place.

    Args:
        q: (B, N, h, d).
        k_cache, v_cache: numpy arrays (B_c, S, h_k, d) and (B_c, S, h_k, d_v), or pages
            (num_blocks, page, h_k, d) with ``block_table``, of q's dtype. Written in place
            when k is given (a CPU torch tensor works too, bfloat16 included: its memory is
            shared); a refused call leaves them as they were.
        k, v: None, or new rows (B, N_new, h_k, d) and (B, N_new, h_k, d_v) of q's dtype,
            written at rows cache_seqlens[b] .. cache_seqlens[b] + N_new - 1.
        rotary_cos, rotary_sin: None, or (S_ro, r / 2): turn features 0 .. r - 1 of q and of
            the new k (needs k) by position (see ``attnlab.flash.rotary``).
        cache_seqlens: None (every cache row: S, or max_blocks·page), an int (or a 0-d
            integer array), or (B,).
        cache_batch_idx: (B,): which cache row sequence b uses (not with block_table).
        cache_leftpad: (B,): the first cache row of each sequence (rows before it are unused).
        block_table: (B, max_blocks): sequence b's pages, in order.
        softmax_scale, causal, window_size, softcap, alibi_slopes: as ``flash_attn_func``
            (softcap 0 or negative is off).
        rotary_interleaved: True pairs features (0, 1), (2, 3), ...; False (0, r/2), ....
        num_splits: accepted for compatibility (attnlab does not split the keys).
        return_softmax_lse: also return the log-sum-exp (B, h, N).

    Returns:
        out (B, N, h, d_v) in q's dtype, or (out, softmax_lse (B, h, N)), the lse in float32
        for float16 and bfloat16.
    """
    # FlashAttention's kv-cache call has no dropout (0.0, no rng) and no deterministic flag.
    opts = read_options(0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, False, None)
    if (
        isinstance(num_splits, bool)
        or not isinstance(num_splits, int | np.integer)
        or num_splits < 0
    ):
        raise AttnlabError(f"expected num_splits to be an integer >= 0, but got {num_splits!r}")
    c = _Cache.read(
        q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, cache_leftpad, block_table, opts
    )
    c.refuse_non_finite()
    q = c.q.astype(c.precision.compute, copy=False)  # (B, N, h, d)
    if rotary_cos is not None or rotary_sin is not None:
        q = _rotate(q, c, rotary_cos, rotary_sin, rotary_interleaved, opts)
    if c.k is not None:  # the rows as the cache will hold them, refused if past its dtype
        c.k = c.precision.rounded("k", c.k, c.k_cache.dtype)
        c.v = c.precision.rounded("v", c.v, c.v_cache.dtype)
    saved = c.append()
    try:
        return _attend_cache(q, c, opts, return_softmax_lse)
    except BaseException:
        c.restore(saved)  # a refused call leaves the cache as it found it
        raise


def _rotate(q, c: _Cache, cos, sin, interleaved: bool, opts) -> np.ndarray:
    """Turn the new keys (in ``c``) and return q turned, at FlashAttention's positions."""
    local = opts.left is not None or opts.right is not None
    cos, sin = _rotary_tables(cos, sin, c, q.shape[1], local)
    # Causal or windowed queries stand at L_b + i; otherwise all at L_b, the first new row.
    steps = np.arange(q.shape[1]) if local else np.zeros(q.shape[1], np.int64)
    new = c.seqlens[:, None] + np.arange(c.k.shape[1])  # (B, N_new)
    k = c.k.astype(c.precision.compute, copy=False)
    c.k = apply_rotary(k, cos, sin, new, interleaved)  # (B, N_new, h_k, d)
    return apply_rotary(q, cos, sin, c.seqlens[:, None] + steps, interleaved)  # (B, N, h, d)


def _attend_cache(q, c: _Cache, opts, want_lse: bool):
    """Each sequence's queries against its live cache rows: out (B, N, h, d_v)[, lse]."""
    h, d_v = q.shape[2], c.v_cache.shape[-1]
    prec = c.precision
    out = np.zeros(q.shape[:3] + (d_v,), prec.compute)  # (B, N, h, d_v)
    lse = np.full((q.shape[0], h, q.shape[1]), -np.inf, prec.compute) if want_lse else None
    for b in range(q.shape[0]):
        kb, vb = c.keys(b)  # (h_k, M_b, d), (h_k, M_b, d_v)
        slopes = None if opts.slopes is None or opts.slopes.ndim == 1 else opts.slopes[b]
        res = _attend.forward(np.swapaxes(q[b], 0, 1), kb, vb, opts, lse=want_lse, slopes=slopes)
        out[b] = np.swapaxes(res.out, 0, 1)  # (N, h, d_v)
        if want_lse:
            lse[b] = res.lse  # (h, N)
    out = prec.rounded("out", out)
    return (out, prec.rounded("softmax_lse", lse, prec.lse)) if want_lse else out


class _Cache:
    """The cache, the new rows and the per-sequence bookkeeping, checked once."""

    @classmethod
    def read(cls, q, k_cache, v_cache, k, v, seqlens, batch_idx, leftpad, block_table, opts):
        self = cls()
        self.q = real_array("q", q, (4,), "(batch_size, seqlen_q, nheads, headdim)")
        batch = self.q.shape[0]
        paged = block_table is not None
        layout = (
            "(num_blocks, page_block_size, nheads_k, headdim)"
            if paged
            else "(batch_size_cache, seqlen_cache, nheads_k, headdim)"
        )
        writes = k is not None or v is not None  # the caches must be their owner's memory
        self.k_cache = real_array("k_cache", k_cache, (4,), layout, shared=writes)
        self.v_cache = real_array("v_cache", v_cache, (4,), layout, shared=writes)
        if self.k_cache.shape[:-1] != self.v_cache.shape[:-1]:
            raise ShapeError(
                "expected k_cache and v_cache to share all but the last axis, but "
                f"got {self.k_cache.shape} and {self.v_cache.shape} instead"
            )
        self.page = self.k_cache.shape[1] if paged else None
        check_heads(self.q, self.k_cache, self.v_cache, opts.slopes, batch)
        self.k, self.v = self._new_rows(k, v, k_cache, v_cache, batch)
        self.precision = Precision.of(
            one_dtype(
                ("q", self.q),
                ("k_cache", self.k_cache),
                ("v_cache", self.v_cache),
                ("k", self.k),
                ("v", self.v),
            )
        )
        n_new = 0 if self.k is None else self.k.shape[1]
        if paged and batch_idx is not None:
            raise AttnlabError(
                "expected cache_batch_idx=None with a block_table (a paged cache "
                "is indexed by its block_table), but got both"
            )
        self.rows = self._batch_rows(batch_idx, batch, n_new > 0)
        if paged:
            capacity = np.asarray(block_table).shape[-1] * self.page
        else:
            capacity = self.k_cache.shape[1]
        self.seqlens = self._seqlens(seqlens, batch, capacity, n_new)
        self.leftpad = np.zeros(batch, np.int64)
        if leftpad is not None:
            self.leftpad = whole_numbers("cache_leftpad", leftpad, f"({batch},)")
            if (
                self.leftpad.shape != (batch,)
                or (self.leftpad < 0).any()
                or (self.leftpad > self.seqlens).any()
            ):
                raise AttnlabError(
                    f"expected cache_leftpad of shape ({batch},) with 0 <= "
                    f"cache_leftpad[b] <= cache_seqlens[b] = {self.seqlens.tolist()}, "
                    f"but got {self.leftpad.tolist()} instead"
                )
        self.table = None
        if paged:
            self.table = _paged.check_table(
                block_table, batch, self.k_cache.shape[0], self.page, self.seqlens + n_new
            )
        return self

    def _new_rows(self, k, v, k_cache, v_cache, batch):
        if k is None and v is None:
            return None, None
        if k is None or v is None:
            raise AttnlabError(
                "expected k and v together (both new rows or neither), but got "
                f"only {'k' if v is None else 'v'}"
            )
        k = real_array("k", k, (4,), "(batch_size, seqlen_new, nheads_k, headdim)")
        v = real_array("v", v, (4,), "(batch_size, seqlen_new, nheads_k, headdim_v)")
        if (
            k.shape[0] != batch
            or k.shape[2:] != self.k_cache.shape[2:]
            or v.shape[:3] != k.shape[:3]
            or v.shape[3] != self.v_cache.shape[3]
        ):
            raise ShapeError(
                f"expected k (B, N_new, h_k, d) and v (B, N_new, h_k, d_v) matching q's batch "
                f"and the caches' heads and widths, but got k.shape={k.shape}, v.shape={v.shape}, "
                f"k_cache.shape={self.k_cache.shape}, v_cache.shape={self.v_cache.shape}"
            )
        for name, cache, arr in (
            ("k_cache", k_cache, self.k_cache),
            ("v_cache", v_cache, self.v_cache),
        ):
            # A numpy array, or an object whose memory numpy shares (a CPU torch tensor): a
            # list would be copied, and the append lost.
            if not hasattr(cache, "__array__") or not arr.flags.writeable:
                raise AttnlabError(
                    f"expected {name} to be a writeable numpy array, to append the "
                    f"new rows in place, but got {type(cache).__name__}"
                )
        return k, v

    def _batch_rows(self, batch_idx, batch, appending):
        if batch_idx is None:
            if self.page is None and self.k_cache.shape[0] < batch:
                raise ShapeError(
                    f"expected a cache with at least {batch} sequences, but got "
                    f"k_cache.shape={self.k_cache.shape}"
                )
            return np.arange(batch)
        rows = whole_numbers("cache_batch_idx", batch_idx, f"({batch},)")
        if rows.shape != (batch,) or (rows < 0).any() or (rows >= self.k_cache.shape[0]).any():
            raise AttnlabError(
                f"expected cache_batch_idx of shape ({batch},) indexing the "
                f"{self.k_cache.shape[0]} cached sequences, but got {rows.tolist()}"
            )
        if appending and np.unique(rows).size != batch:
            raise AttnlabError(
                "expected distinct cache_batch_idx when k and v are appended (two "
                f"sequences would write the same cache row), but got {rows.tolist()}"
            )
        return rows

    def _seqlens(self, seqlens, batch, capacity, n_new):
        if seqlens is None:
            if n_new:
                raise AttnlabError("expected cache_seqlens with k and v: where to append them")
            return np.full(batch, capacity, np.int64)
        if scalar_int(seqlens) is not None:  # one length for every sequence
            seqlens = np.full(batch, scalar_int(seqlens))
        lens = whole_numbers("cache_seqlens", seqlens, f"({batch},)")
        if lens.shape != (batch,) or (lens < 0).any() or (lens + n_new > capacity).any():
            raise AttnlabError(
                f"expected cache_seqlens of shape ({batch},) with 0 <= "
                f"cache_seqlens[b] + {n_new} new rows <= {capacity} cache rows, but "
                f"got {lens.tolist()} instead"
            )
        return lens

    def refuse_non_finite(self) -> None:
        """NaN or inf in q, the new rows or a sequence's live cache rows, refused by name."""
        for name, arr in (("q", self.q), ("k", self.k), ("v", self.v)):
            if arr is not None:
                refuse_non_finite(name, arr, hint=False)
        for b in range(self.q.shape[0]):
            where = self._where(b, self.leftpad[b], self.seqlens[b])
            for name, cache in (("k_cache", self.k_cache), ("v_cache", self.v_cache)):
                refuse_non_finite(f"{name}'s live rows of sequence {b}", cache[where], hint=False)

    def append(self) -> list:
        """Write the new rows into the cache, in place, at rows L_b .. L_b + N_new - 1; return
        what they overwrote, in writing order, for ``restore``."""
        saved = []
        if self.k is None:
            return saved
        for b in range(self.q.shape[0]):
            where = self._where(b, self.seqlens[b], self.seqlens[b] + self.k.shape[1])
            saved.append((where, self.k_cache[where].copy(), self.v_cache[where].copy()))
            self.k_cache[where] = self.k[b]  # (N_new, h_k, d)
            self.v_cache[where] = self.v[b]  # (N_new, h_k, d_v)
        return saved

    def restore(self, saved: list) -> None:
        """Undo ``append``: the overwritten rows back, last write first (pages may repeat)."""
        for where, k_rows, v_rows in reversed(saved):
            self.k_cache[where] = k_rows
            self.v_cache[where] = v_rows

    def keys(self, b: int):
        """Sequence b's keys and values after the append, in the compute dtype: (h_k, M_b, d),
        (h_k, M_b, d_v)."""
        stop = self.seqlens[b] + (0 if self.k is None else self.k.shape[1])
        where = self._where(b, self.leftpad[b], stop)
        dtype = self.precision.compute
        return tuple(
            np.swapaxes(cache[where], 0, 1).astype(dtype, copy=False)
            for cache in (self.k_cache, self.v_cache)
        )

    def _where(self, b: int, start: int, stop: int):
        if self.table is None:
            return self.rows[b], slice(start, stop)
        return _paged.slots(self.table[b], self.page, start, stop)


def _rotary_tables(cos, sin, c: _Cache, n: int, local: bool):
    if cos is None or sin is None:
        raise AttnlabError("expected rotary_cos and rotary_sin together, but got only one")
    if c.k is None:
        raise AttnlabError(
            "expected new k and v with rotary_cos/rotary_sin (rotary turns the "
            "appended keys), but got k=None"
        )
    cos = real_array("rotary_cos", cos, (2,), "(seqlen_ro, rotary_dim / 2)")
    sin = real_array("rotary_sin", sin, (2,), "(seqlen_ro, rotary_dim / 2)")
    d = c.q.shape[-1]
    if cos.shape != sin.shape or not 0 < 2 * cos.shape[1] <= d:
        raise ShapeError(
            f"expected rotary_cos and rotary_sin of one shape (S_ro, r/2) with "
            f"r <= headdim {d}, but got {cos.shape} and {sin.shape} instead"
        )
    reach = int((c.seqlens + max(c.k.shape[1], n if local else 1)).max())
    if cos.shape[0] < reach:
        raise ShapeError(
            f"expected rotary tables with at least {reach} positions (the last "
            f"position turned), but got {cos.shape[0]} rows instead"
        )
    return cos, sin
