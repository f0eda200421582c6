"""One task's share of distributed attention: the softmax over one chunk of keys, and the merge.

Shape legend (the chapter's letters, for one chunk):
    ...  leading batch axes, broadcast between q, k and v (for example (h,) or (B, h))
    n    query rows of the chunk      m    keys of the chunk
    d_k  query and key width          d_v  value width

A partial is a pair (lse, o) for a chunk of query rows against a chunk of keys:

    lse  (..., n)       log Σ_j exp(score_ij) over the chunk's allowed keys; -inf for a row
                        the chunk allows no key at all
    o    (..., n, d_v)  the attention output over those keys alone (0 where lse is -inf)

Two partials over disjoint key sets merge exactly, and the merge is associative and
commutative, so any tree of merges gives the attention output over all keys (§6.2):

    lse = logaddexp(lse_a, lse_b);  o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

Numpy only: nothing here imports Dask. The kernel follows the fast path of
``attnlab.core.blockwise`` (scale · log2 e folded into q, exp2, a base of 0, row sums as a
matrix-vector product, blocked pairs multiplied by 0); the rows whose sums leave the safe range
(huge scores, or no allowed key in the chunk) are redone exactly with their row maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.core._validate import refuse_non_finite
from attnlab.core.masks import Combined, Dense, Mask, TileState, raise_fully_masked, tile_at
from attnlab.errors import NonFiniteInputError

LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2 e)
LN2 = 0.6931471805599453
BLOCK = 512  # query rows x keys per tile: blockwise's measured default (core/blockwise.py)


# -- a mask seen from inside a chunk --------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class Shifted(Mask):
    """A mask rule read at an offset: the chunk's (i, j) is the whole table's (r0 + i, c0 + j).

    Causal, SlidingWindow and Padding depend on absolute positions, so a chunk cannot use the
    same spec with its own N and M; this wrapper hands the inner rule absolute spans instead.
    """

    inner: Mask
    r0: int
    c0: int
    n: int  # the whole table's N and M
    m: int

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.inner.boolean

    @property
    def batched(self) -> bool:  # type: ignore[override]
        return self.inner.batched

    def __repr__(self) -> str:
        return f"{self.inner!r} at rows {self.r0}+, keys {self.c0}+"

    def _at(self, rows, cols):
        return (self.r0 + rows[0], self.r0 + rows[1]), (self.c0 + cols[0], self.c0 + cols[1])

    def block(self, rows, cols, n, m, lead_ndim):
        return self.inner.block(*self._at(rows, cols), self.n, self.m, lead_ndim)

    def bias(self, rows, cols, n, m, lead_ndim):
        return self.inner.bias(*self._at(rows, cols), self.n, self.m, lead_ndim)

    def tile_state(self, rows, cols, n, m, lead_ndim=None):
        return self.inner.tile_state(*self._at(rows, cols), self.n, self.m, lead_ndim)


def chunk_mask(mask: Mask | None, rows, cols, n: int, m: int) -> Mask | None:
    """``mask`` as the chunk rows x cols sees it, in the chunk's own coordinates.

    A Dense part is sliced (only its chunk travels with the task); every other part is shifted.
    """
    if mask is None:
        return None
    parts = []
    for part in mask.parts():
        if isinstance(part, Dense):
            a = part.array  # (..., N or 1, M or 1)
            r = slice(None) if a.shape[-2] == 1 else slice(*rows)
            c = slice(None) if a.shape[-1] == 1 else slice(*cols)
            parts.append(Dense(np.ascontiguousarray(a[..., r, c])))  # (..., n, m)
        else:
            parts.append(Shifted(part, rows[0], cols[0], n, m))
    return parts[0] if len(parts) == 1 else Combined(tuple(parts))


def _render(mask: Mask, rows, cols, n: int, m: int, lead_ndim: int, dtype):
    """(allowed bool, bias in log2 units or None), each broadcastable to (..., rows, cols)."""
    allowed, bias = None, None
    for part in mask.parts():
        if part.boolean:
            ok = part.block(rows, cols, n, m, lead_ndim)
        else:
            b = np.asarray(part.bias(rows, cols, n, m, lead_ndim), dtype=dtype)
            ok = ~np.isneginf(b)
            # Blocked pairs get 0 here and a weight of 0 from ``allowed``: numpy's float32 exp2
            # takes a slow path for -inf (see core/_tiles.TileMask).
            b = np.where(ok, b * dtype.type(LOG2E), dtype.type(0.0))
            bias = b if bias is None else bias + b
        allowed = ok if allowed is None else allowed & ok
    return allowed, bias


# -- the kernel -----------------------------------------------------------------------------------


def partial(q, k, v, mask: Mask | None, scale: float, block: int = BLOCK):
    """(lse (..., n), o (..., n, d_v)) of q (..., n, d_k) against k (..., m, d_k), v (..., m, d_v).

    ``mask`` is in the chunk's coordinates (see ``chunk_mask``); inputs are validated.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n, m, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype = q.dtype
    c = dtype.type(scale * LOG2E)
    tiny = dtype.type(2.0 ** -(np.finfo(dtype).maxexp // 2))  # f32: 2^-64, as blockwise
    out = np.empty(lead + (n, dv), dtype)  # (..., n, d_v)
    lse = np.empty(lead + (n,), dtype)  # (..., n)
    keys: dict[tuple, np.ndarray] = {}
    bufs: dict[tuple, np.ndarray] = {}
    ones = np.ones(block, dtype)  # (Bk,)
    with np.errstate(all="ignore"):  # overflow and underflow are detected and redone
        for r0 in range(0, n, block):
            rows = (r0, min(n, r0 + block))
            tiles = _tiles(mask, rows, n, m, block, len(lead), dtype)
            for idx in np.ndindex(lead):
                qs = tile_at(q, idx)[rows[0] : rows[1]] * c  # (rows, d_k), log2 units
                own = _own(k, idx)
                if own not in keys:
                    keys[own] = np.ascontiguousarray(k[own].T)  # (d_k, m)
                vv = tile_at(v, idx)  # (m, d_v)
                acc, l = _fast(qs, keys[own], vv, tiles, idx, ones, bufs)
                lse2 = np.log2(l)  # (rows,)
                bad = ~(l >= tiny) | ~np.isfinite(acc).all(axis=1)
                if bad.any():
                    _exact(qs, keys[own], vv, mask, rows, n, m, idx, len(lead), bad, acc, l, lse2)
                np.divide(acc, l[:, None], out=out[idx][rows[0] : rows[1]])  # (rows, d_v)
                lse[idx][rows[0] : rows[1]] = lse2 * dtype.type(LN2)
    return lse, out


def _own(arr: np.ndarray, idx: tuple) -> tuple:
    """The index of ``arr``'s own leading axes at broadcast index ``idx`` (size 1 broadcasts)."""
    extra = arr.ndim - 2
    own = idx[len(idx) - extra :] if extra else ()
    return tuple(i if s != 1 else 0 for i, s in zip(own, arr.shape[:extra], strict=True))


def _tiles(mask, rows, n, m, bk, lead_ndim, dtype):
    """(c0, c1, keep or None, bias or None) for each key tile the mask does not block whole."""
    out = []
    for c0 in range(0, m, bk):
        cols = (c0, min(m, c0 + bk))
        state = TileState.OPEN if mask is None else mask.tile_state(rows, cols, n, m, lead_ndim)
        if state is TileState.BLOCKED:
            continue
        if state is TileState.OPEN and (mask is None or mask.boolean):
            out.append((*cols, None, None))
            continue
        allowed, bias = _render(mask, rows, cols, n, m, lead_ndim, dtype)
        out.append((*cols, allowed.astype(dtype), bias))
    return out


def _fast(qs, kT, v, tiles, idx, ones, bufs):
    """Σ exp2(score) v and Σ exp2(score) with every base at 0: two matmuls, an exp2 and a
    matrix-vector product per tile. Returns (acc (rows, d_v), l (rows,)), checked by the caller."""
    rows, dv = qs.shape[0], v.shape[1]
    acc = np.zeros((rows, dv), qs.dtype)  # (rows, d_v)
    l = np.zeros(rows, qs.dtype)  # (rows,)
    for c0, c1, keep, bias in tiles:
        shape = (rows, c1 - c0)
        if shape not in bufs:  # a fresh tile each step costs page faults (see core/_tiles.py)
            bufs[shape] = (np.empty(shape, qs.dtype), np.empty((rows, dv), qs.dtype))
        s, pv = bufs[shape]
        np.matmul(qs, kT[:, c0:c1], out=s)  # (rows, cols): score, in log2 units
        if bias is not None:
            s += tile_at(bias, idx)
        np.exp2(s, out=s)
        if keep is not None:
            s *= tile_at(keep, idx)  # blocked pairs weigh exactly 0
        l += s @ ones[: c1 - c0]  # (rows,)
        acc += np.matmul(s, v[c0:c1], out=pv)  # (rows, d_v)
    return acc, l


def _exact(qs, kT, v, mask, rows, n, m, idx, lead_ndim, bad, acc, l, lse2) -> None:
    """Redo the ``bad`` rows with their maximum over allowed keys as the base, in place."""
    sel = np.flatnonzero(bad)
    s = qs[sel] @ kT  # (bad, m), log2 units
    allowed = np.ones(s.shape, bool)
    if mask is not None:
        ok, bias = _render(mask, rows, (0, m), n, m, lead_ndim, s.dtype)
        allowed = np.broadcast_to(tile_at(ok, idx), (rows[1] - rows[0], m))[sel]  # (bad, m)
        if bias is not None:
            s += np.broadcast_to(tile_at(bias, idx), (rows[1] - rows[0], m))[sel]
    if not np.isfinite(s[allowed]).all():
        where = np.argwhere(allowed & ~np.isfinite(s))[0]
        raise NonFiniteInputError(
            f"expected finite scores, but q·kᵀ·scale overflowed in query row {idx} "
            f"{rows[0] + int(sel[where[0]])} of this chunk (q and k are finite, but "
            f"{s.dtype} tops out near {np.finfo(s.dtype).max:.3g}); rescale q or k"
        )
    top = np.max(s, axis=1, where=allowed, initial=-np.inf)  # (bad,), -inf: nothing allowed
    base = np.where(np.isneginf(top), 0.0, top).astype(s.dtype)
    p = np.exp2(s - base[:, None]) * allowed  # (bad, m), each <= 1
    total = p.sum(axis=1)  # (bad,), 0 where nothing is allowed
    acc[sel] = p @ v  # (bad, d_v), 0 for an empty row
    l[sel] = np.where(total == 0, 1.0, total)  # an empty row divides 0 by 1
    lse2[sel] = top + np.log2(total)  # -inf + -inf = -inf for an empty row


# -- merging, and the end of a query chunk --------------------------------------------------------


def merge(a, b):
    """The partial over the union of two disjoint key sets: exact, associative, commutative."""
    lse_a, o_a = a
    lse_b, o_b = b
    lse = np.logaddexp(lse_a, lse_b)  # (..., n): -inf only where both are
    # Rows that no key of either chunk allows stay (−inf, 0): exp(-inf - 0) = 0, never the
    # NaN of exp(-inf - -inf).
    ref = np.where(np.isneginf(lse), 0.0, lse).astype(lse.dtype)
    w_a = np.exp(lse_a - ref)[..., None]  # (..., n, 1)
    w_b = np.exp(lse_b - ref)[..., None]
    return lse, w_a * o_a + w_b * o_b  # (..., n), (..., n, d_v)


def check_inputs(names, *arrays) -> None:
    """The finite-input check of ``validate``, run inside a task on lazily loaded chunks."""
    for name, arr in zip(names, arrays, strict=True):
        refuse_non_finite(name, arr)


def empty_rows(lse: np.ndarray, row0: int, table_lead: tuple[int, ...]) -> list[tuple]:
    """Rows (indices into the score table's (..., N)) whose lse is -inf: no allowed key at all.

    The dense path names rows of its score table, whose leading axes can be fewer than the
    output's (when only v carries a batch axis); the same indices are named here.
    """
    keep = len(table_lead)
    found = set()
    for r in np.argwhere(np.isneginf(lse)):
        lead = tuple(int(i) for i in r[:-1])[len(r) - 1 - keep :] if keep else ()
        lead = tuple(i if s != 1 else 0 for i, s in zip(lead, table_lead, strict=True))
        found.add(lead + (row0 + int(r[-1]),))
    return sorted(found)


def raise_empty(mask: Mask | None, n: int, m: int, rows: list[tuple]) -> None:
    """FullyMaskedRowError naming ``rows`` and the part of ``mask`` that emptied the first."""
    if mask is None:
        raise_fully_masked(rows, "non-finite scores: q or k hold -inf")
    raise_fully_masked(rows, mask.blame(n, m, len(rows[0]) - 1, rows[0]))


def finish(part, row0: int, mask, n: int, m: int, table_lead: tuple[int, ...]) -> np.ndarray:
    """The output of one query chunk from its merged partial, or FullyMaskedRowError."""
    lse, o = part
    rows = empty_rows(lse, row0, table_lead)
    if rows:
        raise_empty(mask, n, m, rows)
    return o
