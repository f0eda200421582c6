"""Reading a rule out of a bool table: the mask spec, if any, that renders exactly this table.

Shape legend (the chapter's letters):
    N   query rows          M   key rows          B   batch elements

Other frameworks hand over tables; attnlab's specs are rules. A table that is a causal band, a
sliding window or a per-batch padding prefix becomes that spec, so the blockwise path decides
its tiles by arithmetic and ``explain`` can name the rule. Every candidate is checked by
rendering it and comparing the whole table, so a match is exact, never a guess; a table with
no rule stays a ``Dense`` table.
"""

from __future__ import annotations

import numpy as np

from attnlab.core.masks import Causal, Dense, Mask, Padding, SlidingWindow

__all__ = ["band_of", "spec_of"]


def spec_of(allowed: np.ndarray, *, batch_first: bool) -> Mask:
    """The simplest spec whose table is ``allowed``, else ``Dense(allowed)``.

    Args:
        allowed: bool, (..., N, M); True where query i may attend to key j.
        batch_first: whether the table's first leading axis is the batch (then a table that
            varies along it may become ``Padding``, which indexes q's first leading axis).

    A table that is the same for every leading index becomes one (N, M) rule: its leading
    axes of size 1 add nothing once q has that many leading axes.
    """
    n, m = allowed.shape[-2:]
    lead = allowed.shape[:-2]
    flat = allowed.reshape((-1, n, m))  # (prod(lead), N, M)
    if (flat == flat[0]).all():
        table = flat[0]  # (N, M): one rule for every batch element
        if n > 1 and not table.all():
            band = band_of(table)
            if band is not None:
                return band
        return Dense(table)
    if not batch_first or m == 1:
        return Dense(allowed)
    per_batch = allowed.reshape((lead[0], -1, n, m))  # (B, rest, N, M)
    if not (per_batch == per_batch[:, :1]).all():  # varies along a head axis: no spec for it
        return Dense(allowed)
    per_batch = per_batch[:, 0]  # (B, N, M)
    seen = per_batch.any(axis=-2)  # (B, M): keys some query of element b sees
    lengths = np.where(seen.any(-1), m - np.argmax(seen[:, ::-1], axis=-1), 0)  # (B,)
    padding = Padding(lengths)
    widest = per_batch[int(np.argmax(lengths))]  # (N, M): the element padding cuts least
    bases: list[Mask | None] = [None]
    if n > 1:
        bases += list(_band_candidates(widest))
    for base in bases:
        spec = padding if base is None else base + padding
        rendered = spec.allowed(n, m, lead_ndim=len(lead))  # (B, 1, ..., N, M)
        if np.array_equal(np.broadcast_to(rendered, allowed.shape), allowed):
            return spec
    return Dense(allowed)


def band_of(table: np.ndarray) -> Mask | None:
    """``Causal`` or ``SlidingWindow`` (either alignment) rendering exactly ``table`` (N, M)."""
    n, m = table.shape
    for spec in _band_candidates(table):
        if np.array_equal(spec.allowed(n, m), table):
            return spec
    return None


def _band_candidates(table: np.ndarray):
    """Band specs that could render ``table`` (N, M); the window size is read off the first
    row whose lowest allowed key is past key 0 (a band cuts there), per alignment."""
    n, m = table.shape
    rows = np.flatnonzero(table.any(axis=-1))
    lo = np.argmax(table[rows], axis=-1)  # first allowed key of each row that has one
    for align in ("top_left", "bottom_right"):
        yield Causal(align)
        cut = np.flatnonzero(lo > 0)
        if cut.size:
            i = int(rows[cut[0]])
            hi = i + (0 if align == "top_left" else m - n)  # the last key row i may see
            size = hi - int(lo[cut[0]]) + 1
            if size >= 1:
                yield SlidingWindow(size, align)
