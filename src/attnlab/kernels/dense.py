"""The dense kernel: softmax(q kᵀ · scale + mask) v with the whole (..., N, M) table, as §6.2 draws it.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

Three plainly named entry points share one computation, scores -> scaled -> masked -> weights
-> output: ``dense_output`` keeps the output only, ``dense_weights`` the output and the
weights, ``dense_tables`` a copy of every table. They take ``Inputs`` already validated by
``core/_validate.py`` (the public functions in ``api/attention.py`` call them) and never
validate again. It is one of several fast paths in ``kernels/`` (the small-problem path, this
kernel, the blockwise one, the compiled passes), each held to ``core/reference.py`` by the
property suite; ``kernels/blockwise.py`` is also tested equal to this one.

Rows are independent, so the table is computed a band of rows at a time, each step in place:
a band stays in cache through its five passes instead of the whole table streaming from memory
five times. When only the output is wanted, each band goes all the way to its output rows and
the N x M table is never allocated (a fresh 128 MiB table costs more in page faults than the
q kᵀ matmul that fills it); the weights and the trace keep it whole.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from attnlab.core._validate import (
    Inputs,
    check_overflow,
    check_q_scale,
    may_overflow,
    raise_empty_rows,
)
from attnlab.core.masks import Mask
from attnlab.kernels._fused import NO_REACH, kernel_mask, may_compile, rows_softmax
from attnlab.kernels._precision import matmul, narrow, too_wide, widen
from attnlab.kernels._small_masks import banded_output, banded_scores, forward_bands, mask_tables
from attnlab.kernels._threads import on_threads, one_blas_thread

__all__ = ["apply_mask", "dense_output", "dense_tables", "dense_weights"]

_BAND_BYTES = 2**20  # rows per band of the softmax: about 1 MiB of scores (half the L2)
_OUT_BAND_BYTES = 2**24  # output-only bands: 16 MiB of scores (measured best of 2-32 MiB, N = 2048)
_THREADED_BYTES = 2**23  # below 8 MiB of scores the pool's start-up costs more than it saves


def apply_mask(scores: np.ndarray, mask: Mask, rows, cols, n: int, m: int, lead_ndim: int) -> None:
    """Add ``mask`` to a tile of scaled scores in place; masks combine by adding (§6.4)."""
    for part in mask.parts():
        if part.boolean:
            np.copyto(scores, -np.inf, where=~part.block(rows, cols, n, m, lead_ndim))
        else:
            scores += part.bias(rows, cols, n, m, lead_ndim)


class _Rows:
    """The shared steps for one call: scores of a band of rows, and their softmax in place."""

    def __init__(self, x: Inputs, keep: dict | None = None):
        self.x, self.keep = x, keep  # keep: where the trace copies each table, or None
        self.lead = x.table_lead()
        self.sink = None
        if x.sinks is not None:  # one logit per head: its axes may be the table's only ones
            self.lead = tuple(np.broadcast_shapes(self.lead, x.sinks.shape))
            self.sink = x.sinks[..., None, None]  # (..., h, 1, 1)
        self.row_max = np.empty(self.lead + (x.n, 1), x.q.dtype)  # (..., N, 1)
        self.total = np.empty_like(self.row_max)  # (..., N, 1): each row's Σ exp
        self.hollow = np.zeros(self.row_max.shape, bool)  # (..., N, 1): rows with no key
        self.kT = np.swapaxes(x.k, -1, -2)  # (..., d_k, M), a view
        self.risky = may_overflow(x)
        if self.risky:  # refused as the blockwise kernels refuse it, whichever path runs
            check_q_scale(x)
        self.compiled = None if keep is not None else _compiled(x, self)

    def scores(self, rows) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked at the max
            s = matmul(self.x.q[..., rows[0] : rows[1], :], self.kT)  # (..., rows, M)
        if s.shape[:-2] != self.lead:  # the mask varies along an axis only v (or it) carries
            s = np.array(np.broadcast_to(s, self.lead + s.shape[-2:]))  # (..., rows, M)
        return s

    def banded_scores(self, rows, bands) -> np.ndarray:
        """``scores`` on the keys each band of rows reaches (``_small_masks.gemm_bands``), the
        rest of each row left unset for the compiled pass to write as 0."""
        x = self.x
        s = np.empty(self.lead + (rows[1] - rows[0], x.m), x.q.dtype)  # (..., rows, M)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked at the max
            banded_scores(x.q, x.k, s, bands, rows)
        return s

    def softmax(self, s: np.ndarray, rows) -> None:
        """Scale, mask and exponentiate s (..., rows, M) in place; fill the rows' max and sum."""
        x = self.x
        with np.errstate(over="ignore"):  # overflow is checked just below
            s *= s.dtype.type(x.scale)
        if self.risky:
            check_overflow(x, s, rows)
        if self.keep is not None:
            self.keep["scaled"] = s.copy()
        if x.softcap is not None:  # before the mask, as FlashAttention and Gemma 2 cap
            cap = s.dtype.type(x.softcap)
            s /= cap
            np.tanh(s, out=s)
            s *= cap
            if self.keep is not None:
                self.keep["capped"] = s.copy()
        if x.mask is not None:
            apply_mask(s, x.mask, rows, (0, x.m), x.n, x.m, s.ndim - 2)
        if self.keep is not None:
            self.keep["masked"] = s.copy()
        # Safe softmax (see core/softmax.py), fused in place: shift by the row max and
        # exponentiate; a row with no allowed key is shifted by 0 (all its weights are 0).
        band = (..., slice(rows[0], rows[1]), slice(None))
        top = np.max(s, axis=-1, keepdims=True, out=self.row_max[band])
        np.isneginf(top, out=self.hollow[band])
        if self.sink is not None:  # the sink's logit joins the row: the max covers it too
            np.maximum(top, self.sink, out=top)
        top[np.isneginf(top)] = 0.0
        s -= top
        np.exp(s, out=s)  # now the unnormalised weights
        total = np.sum(s, axis=-1, keepdims=True, out=self.total[band])
        if self.sink is not None:  # in the divisor, with no value: weights sum to < 1
            total += np.exp(self.sink - top)

    def softmax_compiled(self, s: np.ndarray, rows, at: int) -> None:
        """``softmax`` by the compiled pass (``_fused.rows_softmax``) for the call's rows
        [r0, r1), which are rows [at, at + r1 − r0) of s (..., R, M), C-contiguous: the same
        roundings as ``softmax`` but exp's, the keys past a row's reach written as 0."""
        kernel, blocked, reach = self.compiled
        r0, r1 = rows
        s3 = s.reshape((-1,) + s.shape[-2:])  # (P, R, M), a view
        top = np.empty((s3.shape[0], r1 - r0), s.dtype)  # (P, rows): maxima, then sums
        total = np.empty_like(top)
        shut = blocked if blocked.size == 0 else blocked[r0 - at :]
        reach = reach if reach.size == 0 else reach[r0 - at :]
        kernel(s3, at, at + r1 - r0, self.x.scale, shut, reach, top, total, False)
        band = (..., slice(r0, r1), slice(None))
        top = top.reshape(self.lead + (r1 - r0, 1))  # (..., rows, 1)
        np.isneginf(top, out=self.hollow[band])
        top[self.hollow[band]] = 0.0
        self.row_max[band] = top
        self.total[band] = total.reshape(top.shape)  # numpy's pairwise row sums, bit for bit

    def check_empty(self, empty_rows: str) -> None:
        if empty_rows == "raise" and self.hollow.any():
            raise_empty_rows(self.x, np.argwhere(self.hollow[..., 0]))

    def lse(self, shape: tuple[int, ...]) -> np.ndarray:
        """Each row's log Σ exp (natural log, sinks included), (..., N) broadcast to ``shape``;
        -inf for a row that allows no key."""
        with np.errstate(divide="ignore"):
            lse = (np.log(self.total) + self.row_max)[..., 0]  # (..., N)
        lse[self.hollow[..., 0]] = -np.inf
        return lse if lse.shape == shape else np.broadcast_to(lse, shape).copy()

    def row_bytes(self) -> int:
        return math.prod(self.lead) * self.x.m * self.x.q.dtype.itemsize


def _compiled(x: Inputs, r: _Rows):
    """(kernel, blocked (N, M), reach (N,)) where the compiled softmax takes this call (see
    ``_fused.rows_softmax``: the question ``kernels/_small.py`` asks too), else None: a plain
    float32 call (no cap, sinks or overflow risk, inputs checked finite) whose mask is
    boolean and the same for every batch element."""
    if x.q.dtype != np.float32 or x.softcap is not None or r.sink is not None:
        return None
    if r.risky or not x.check_finite or not may_compile(x.q.dtype, r.lead, x.n, x.m):
        return None  # (the last: too small a call; asked before the mask is drawn)
    drawn = mask_tables(x.mask, x.n, x.m, x.lead, x.q.dtype)
    if drawn is None:
        return None
    _, blocked, biases, _, reach = drawn
    kernel = rows_softmax(x.q.dtype, r.lead, x.n, x.m, blocked, biases)
    if kernel is None:
        return None
    return kernel, kernel_mask(blocked, x.n, x.m), NO_REACH if reach is None else reach


def _each(fn, starts, threads: int, size: int, batched: bool = True) -> None:
    """fn(start) for each band, on the thread pool when there is enough work to share.

    Inline, OpenBLAS is kept to one thread as well for small work or a batch of matrices
    (``batched``): numpy's batched matmul calls BLAS once per matrix, and OpenBLAS wakes its
    threads for each call, which then spin. Measured on the 2-core AMD EPYC, attention on this
    path with h = 8: N = 128 took 93 ms of CPU unpinned (460 ms wall on the shared machine),
    2.4 ms pinned; N = 512 (one band) 125 ms against 25."""
    if threads > 1 and len(starts) > 1 and size >= _THREADED_BYTES:
        on_threads(fn, starts, threads)
        return
    pin = size < _THREADED_BYTES or batched
    with one_blas_thread() if pin else contextlib.nullcontext():
        for r0 in starts:
            fn(r0)


def dense_output(x: Inputs, *, empty_rows: str = "raise", threads: int = 1, lse: bool = False):
    """The output (..., N, d_v) alone, a band of rows at a time: no N x M table is kept.

    empty_rows: "raise" (FullyMaskedRowError) or "zero" (output 0 there, as PyTorch does).
    threads: bands of rows computed at once (numpy's matmul and ufuncs release the GIL).
    lse: also return each row's log-sum-exp, (..., N): (output, lse).
    """
    r = _Rows(x)
    n = x.n
    out = np.empty(np.broadcast_shapes(r.lead, x.v.shape[:-2]) + (n, x.v.shape[-1]), x.q.dtype)
    band = max(1, _OUT_BAND_BYTES // r.row_bytes())
    sub = max(1, _BAND_BYTES // r.row_bytes())
    reach = None if r.compiled is None else r.compiled[2]  # the fast path asks the same rule
    bands = forward_bands(r.compiled is not None, reach, x.q, x.k, r.lead)

    def band_rows(r0: int) -> None:
        rows = (r0, min(n, r0 + band))
        s = r.scores(rows) if bands is None else r.banded_scores(rows, bands)  # (..., band, M)
        if r.compiled is not None:  # one pass per row, each in cache while it is read
            r.softmax_compiled(s, rows, 0)
        else:
            for a in range(0, rows[1] - rows[0], sub):  # numpy's passes, in cache-sized pieces
                b = min(rows[1] - rows[0], a + sub)
                r.softmax(s[..., a:b, :], (rows[0] + a, rows[0] + b))
        if bands is None:
            part = matmul(s, x.v)  # (..., band, d_v)
        else:  # each row on the keys its band reaches (the weights past them are 0)
            part = np.empty(out.shape[:-2] + (rows[1] - rows[0], out.shape[-1]), out.dtype)
            banded_output(s, x.v, part, bands, rows)
        # Divide the small output, not the table; rows with no key: 0, not 0/0.
        t = r.total[..., rows[0] : rows[1], :]
        part /= np.where(t == 0.0, 1.0, t).astype(part.dtype, copy=False)
        out[..., rows[0] : rows[1], :] = part

    size = r.row_max.size * x.m * x.q.dtype.itemsize
    _each(band_rows, range(0, n, band), threads, size, math.prod(out.shape[:-2]) > 1)
    r.check_empty(empty_rows)
    if too_wide(x, r.row_max):  # float32 scores far from 0: see kernels/_precision.py
        return narrow(dense_output(widen(x), empty_rows=empty_rows, threads=threads, lse=lse))
    return (out, r.lse(out.shape[:-1])) if lse else out


def dense_weights(x: Inputs, *, empty_rows: str = "raise", threads: int = 1, lse: bool = False):
    """(output (..., N, d_v), weights (..., N, M)): the table is the answer, so it is kept.
    With lse: (output, weights, lse (..., N))."""
    r = _Rows(x)
    scores = r.scores((0, x.n))  # (..., N, M)
    band = max(1, _BAND_BYTES // r.row_bytes())

    def softmax(r0: int) -> None:
        rows = (r0, min(x.n, r0 + band))
        if r.compiled is not None:
            r.softmax_compiled(scores, rows, r0)
        else:
            r.softmax(scores[..., r0 : r0 + band, :], rows)

    _each(
        softmax,
        range(0, x.n, band),
        threads,
        scores.nbytes,
    )
    if too_wide(x, r.row_max):  # float32 scores far from 0: see kernels/_precision.py
        return narrow(dense_weights(widen(x), empty_rows=empty_rows, threads=threads, lse=lse))
    out, weights = _normalise(r, scores, empty_rows)
    return (out, weights, r.lse(out.shape[:-1])) if lse else (out, weights)


def dense_tables(x: Inputs) -> dict[str, np.ndarray]:
    """Every table of §6.2's diagram: scores, scaled, (capped,) masked, weights, output, lse."""
    tables: dict[str, np.ndarray] = {}
    r = _Rows(x, keep=tables)
    scores = r.scores((0, x.n))  # (..., N, M)
    tables["scores"] = scores.copy()
    r.softmax(scores, (0, x.n))  # the trace keeps every table: one band
    tables["output"], tables["weights"] = _normalise(r, scores, "raise")
    tables["lse"] = r.lse(tables["output"].shape[:-1])
    return tables


def _normalise(r: _Rows, e: np.ndarray, empty_rows: str) -> tuple[np.ndarray, np.ndarray]:
    r.check_empty(empty_rows)
    r.total[r.total == 0.0] = 1.0  # rows with no allowed key are all zeros: 0, not 0/0
    e /= r.total  # (..., N, M) weights, rows sum to 1
    return matmul(e, r.x.v), e  # (..., N, d_v), (..., N, M)
