"""The fast path's softmax of the scores (``kernels/_small.py``): q kᵀ scaled and masked, shifted
by each row's max and exponentiated, in place, with each row's sum and max.

Shape legend (the chapter's letters):
    ...  leading batch axes          N  query rows          M  key rows

Three roads, each the dense kernel's roundings (so the fast and general paths agree bit for
bit): numpy's passes over cache-sized bands of rows; the same passes cut at the keys a
causal-like mask lets each band reach (``_exp_prefix``); and, where ``_fused.rows_softmax``
picks it, the compiled pass that does scale, mask, max, shift and exp in two reads of each row
(``_exp_compiled``). ``x`` is ``_small_plan.prepare``'s ``Prepared`` throughout.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from attnlab.kernels import _small_masks
from attnlab.kernels._fused import NO_REACH, kernel_mask
from attnlab.kernels._precision import WIDE, matmul
from attnlab.kernels._small_masks import banded_scores, gemm_bands

__all__ = ["SCRATCH_BYTES", "exp_compiled", "exp_scores", "product", "scores", "scratch"]

#: The largest table kept for reuse per thread and slot: the fast path's whole reach
#: (``_small.SMALL_BYTES``). Two slots hold (..., N, M) tables (scores, dS) and two
#: (..., N, d_v) ones, so a thread keeps at most about 16 MiB, and only after calls that
#: large. Measured at (1, 8, 512, 64), 4 MiB tables: backward 31.4 -> 23.6 ms against a
#: 2 MiB cap (interleaved, 2-core AMD EPYC); the forward, one table, is unchanged.
SCRATCH_BYTES = 2**23
#: Smaller tables are allocated fresh: numpy and malloc serve them without page faults, and a
#: lookup would cost a few microseconds of a call of a few dozen (the worked example).
KEEP_FROM = 2**16
_local = threading.local()

#: Rows of the softmax per pass: about 1 MiB of scores, as the dense kernel's bands.
_BAND_BYTES = 2**20
_LOWEST = {c: np.finfo(np.dtype(c)).min for c in "fd"}
_max, _sum, _all = np.maximum.reduce, np.add.reduce, np.logical_and.reduce


def scratch(slot: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised (shape) array for a table that never leaves the call: kept per thread
    and ``slot`` and handed to the next call of the same shape, up to ``SCRATCH_BYTES``. A
    fresh table costs its page faults on first touch: at (64, 4, 32, 16) each 0.5-1 MiB
    matmul result took 0.5-0.9 ms in the backward's sequence, against 0.2 ms into a buffer
    already mapped (measured on the 2-core AMD EPYC, one thread)."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if not KEEP_FROM <= nbytes <= SCRATCH_BYTES:
        return np.empty(shape, dtype)
    kept = getattr(_local, "kept", None)
    if kept is None:
        kept = _local.kept = {}
    a = kept.get(slot)
    if a is None or a.shape != shape or a.dtype != dtype:
        a = kept[slot] = np.empty(shape, dtype)
    return a


def product(x, fresh: bool = False) -> np.ndarray:
    """q kᵀ (..., N, M) with the score table's lead axes, in the "scores" scratch buffer
    unless ``fresh`` (the table is returned to the caller: the weights)."""
    q, k, tlead = x.q, x.k, x.table_lead
    shape = tlead + (q.shape[-2], k.shape[-2])
    if fresh or q.shape[:-2] != tlead or k.shape[:-2] != tlead or _small(shape, q):
        s = matmul(q, k.mT)  # numpy's own result (broadcast, returned, or too small to keep)
        return s if s.shape == shape else np.array(np.broadcast_to(s, shape))
    return matmul(q, k.mT, out=scratch("scores", shape, q.dtype))


def _small(shape: tuple[int, ...], like: np.ndarray) -> bool:
    """Whether a table of ``shape`` and ``like``'s dtype is below ``KEEP_FROM``."""
    return math.prod(shape) * like.itemsize < KEEP_FROM


def scores(x, fresh: bool = False) -> np.ndarray:
    """q kᵀ · scale + mask, (..., N, M) with the score table's lead axes (blocked pairs -inf);
    a scratch table unless ``fresh`` (see ``product``)."""
    sc, blocked, biases = x.scale, x.blocked, x.biases
    s = product(x, fresh)  # (..., N, M)
    s *= s.dtype.type(sc)
    if blocked is not None:
        np.copyto(s, -np.inf, where=blocked)
    for b in biases:
        s += b
    return s


def exp_scores(x, fresh: bool = False, bands=None):
    """exp(masked scores − row max) in place (..., N, M), its row sums and row maxima (each
    (..., N, 1)), or None when a row has no allowed key (the general path raises that error)
    or float32 scores lie far from 0. The table is scratch unless ``fresh`` (``product``)."""
    if x.kernel is not None:
        return exp_compiled(x, fresh=fresh, bands=bands)
    if x.reach is not None and x.q.shape[-2] >= _small_masks.PREFIX_ROWS:
        return _exp_prefix(x, fresh)
    s = scores(x, fresh)
    n, sure = s.shape[-2], x.sure
    band = _BAND_BYTES // (s.size // n * s.itemsize) or 1
    if band >= n:
        return _softmax_rows(s, sure)
    parts = []
    for a in range(0, n, band):  # cache-sized bands, as the dense kernel's softmax
        part = _softmax_rows(s[..., a : a + band, :], sure)
        if part is None:
            return None
        parts.append(part[1:])
    totals, tops = zip(*parts, strict=True)
    return s, np.concatenate(totals, axis=-2), np.concatenate(tops, axis=-2)


def exp_compiled(x, lse=None, fresh: bool = False, bands=None):
    """``exp_scores`` by the compiled pass (``_fused.rows_softmax``): q kᵀ in one matmul,
    then each row scaled, masked, shifted and exponentiated in two reads, the keys past its
    reach left as 0.
    With ``lse`` (..., N, 1) the rows are shifted by it (the weights come out; no max, no sum:
    (weights, None, None)). With ``bands`` (``_small_masks.gemm_bands``) q kᵀ is computed
    band by band on the keys each band reaches, the rest left for the pass to write as 0."""
    sc, blocked, sure, reach, kernel = x.scale, x.blocked, x.sure, x.reach, x.kernel
    if bands is None:
        s = product(x, fresh)  # (..., N, M)
    else:  # q, k carry the table's lead axes (``_small_masks.forward_bands``); s is never returned
        q, k = x.q, x.k
        s = scratch("scores", x.table_lead + (q.shape[-2], k.shape[-2]), q.dtype)
        banded_scores(q, k, s, bands, (0, q.shape[-2]))
    n, m = s.shape[-2:]
    s3 = s.reshape(-1, n, m)  # (P, N, M), a view
    top = np.empty(s3.shape[:2], s.dtype) if lse is None else lse.reshape(s3.shape[:2])
    total = np.empty(s3.shape[:2], s.dtype)  # (P, N)
    shut = kernel_mask(blocked, n, m)
    kernel(s3, 0, n, sc, shut, NO_REACH if reach is None else reach, top, total, lse is not None)
    if lse is not None:
        return s, None, None
    top = top.reshape(s.shape[:-1] + (1,))  # (..., N, 1)
    if not sure:
        if s.dtype == np.float32 and _max(np.abs(top), axis=None) > WIDE:
            return None  # far from 0, or a row with no key (-inf): the general path answers
    return s, total.reshape(top.shape), top


def _exp_prefix(x, fresh: bool):
    """``exp_scores`` for a mask that blocks each row's tail (``_reach``), a band of rows at a
    time, computing only the keys some row of the band allows: scores, scale, mask, max and
    exp on (..., band, reach), and the exact 0 that exp(-inf) gives written past it. The row
    sums still run over whole rows, so numpy adds the same numbers in the same order."""
    q, k, sc, lead, blocked, sure = x.q, x.k, x.scale, x.lead, x.blocked, x.sure
    reach = x.reach  # (N,)
    n, m = q.shape[-2], k.shape[-2]
    # One matmul for the whole table: OpenBLAS rounds a product cut at another column otherwise.
    s = product(x, fresh)  # (..., N, M)
    totals = np.empty(s.shape[:-1] + (1,), q.dtype)  # (..., N, 1)
    tops = np.empty_like(totals)
    blocked, scale = blocked.reshape(n, m), q.dtype.type(sc)
    # bands of an eighth of the rows, each at most _BAND_BYTES of scores
    for a, b, c in gemm_bands(reach, n, _BAND_BYTES // (math.prod(lead) * m * q.itemsize)):
        head = s[..., a:b, :c]  # (..., band, reach)
        head *= scale
        np.copyto(head, -np.inf, where=blocked[a:b, :c])
        s[..., a:b, c:] = 0.0
        part = _softmax_rows(s[..., a:b, :], sure, c)
        if part is None:
            return None
        totals[..., a:b, :], tops[..., a:b, :] = part[1], part[2]
    return s, totals, tops


def _softmax_rows(s, sure: bool, keys: int | None = None):
    """(exp(s − row max) in place, row sums, row maxima) of masked scores s; None at doubt.
    ``sure``: ``_prepare`` proved every row keeps a key and the scores lie within ±WIDE.
    ``keys``: only s[..., :keys] is exponentiated, the rest already holds its weights (0)."""
    head = s if keys is None else s[..., :keys]  # (..., rows, keys)
    top = _max(head, -1, keepdims=True)  # (..., rows, 1)
    if not sure:
        if s.dtype == np.float32 and _max(np.abs(top), axis=None) > WIDE:
            return None  # scores far from 0: the general path computes these in float64
        # A row with no allowed key has max -inf; raise it to the lowest finite number so
        # that -inf - max stays -inf (not NaN) and its sum is 0: the general path's case.
        np.maximum(top, _LOWEST[s.dtype.char], out=top)
    head -= top
    np.exp(head, out=head)  # unnormalised weights
    total = _sum(s, -1, keepdims=True)  # (..., rows, 1)
    if not sure and not _all(total, axis=None):
        return None
    return s, total, top
