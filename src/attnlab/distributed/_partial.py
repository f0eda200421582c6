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

Numpy only: nothing here imports Dask. The kernel is ``attnlab.kernels.blockwise.run`` itself,
asked for each row's logsumexp and to keep rows the chunk allows no key (lse = -inf, o = 0).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from attnlab.core._validate import Inputs, refuse_non_finite
from attnlab.core.masks import Combined, Dense, Mask, raise_fully_masked
from attnlab.errors import NonFiniteInputError
from attnlab.kernels import blockwise

BLOCK = 512  # query rows x keys per tile: blockwise's measured default (kernels/blockwise.py)


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


# -- the kernel: the blockwise path's, on one chunk -----------------------------------------------


def partial(q, k, v, mask: Mask | None, scale: float, block: int = BLOCK):
    """(lse (..., n), o (..., n, d_v)) of q (..., n, d_k) against k (..., m, d_k), v (..., m, d_v).

    ``mask`` is in the chunk's coordinates (see ``chunk_mask``); inputs are validated. The
    single-process blockwise kernel does the work (same tiles, same skipping, same exact pass
    for huge scores); a row the chunk allows no key keeps lse = -inf and o = 0 for the merge.
    """
    lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    n, m = q.shape[-2], k.shape[-2]
    x = Inputs(q, k, v, mask, float(scale), lead, n, m)
    lse = np.empty(lead + (n,), q.dtype)  # (..., n)
    out = blockwise.run(x, block, block, threads=1, lse=lse, empty_rows="zero")  # (..., n, d_v)
    return lse, out


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
    with own_advice():
        for name, arr in zip(names, arrays, strict=True):
            refuse_non_finite(name, arr)


@contextmanager
def own_advice():
    """NaN or inf refused with advice this function can take: ``distributed.attention`` has
    no check_finite to pass, so the words that name it become a fix that works here."""
    try:
        yield
    except NonFiniteInputError as exc:
        text = str(exc).replace(
            "pass check_finite=False to skip this check",
            "replace them before the call (np.nan_to_num, or drop the rows); "
            "attnlab.distributed.attention always checks",
        )
        raise NonFiniteInputError(text) from None


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
