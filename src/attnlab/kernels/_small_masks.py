"""The fast path's masks: each spec rendered once per (spec, N, M, axes) and kept.

Shape legend (the chapter's letters):
    ...  leading batch axes          N  query rows          M  key rows

``kernels/_small.py`` applies a mask as ``dense.apply_mask`` does, from tables drawn here: the
union of the pairs its boolean parts block, its float parts in order, whether some row is
blocked whole, and, where every row's allowed keys end before the table does (a causal mask),
where each row's keys end, so the fast path can leave the blocked tail out of its passes.
Specs are frozen dataclasses, so equal specs share a table.
"""

from __future__ import annotations

import numpy as np

from attnlab.core.masks import Causal, Mask, Padding, SlidingWindow, as_mask
from attnlab.kernels._precision import matmul

__all__ = [
    "BANDED_ROWS",
    "PREFIX_BAND",
    "PREFIX_ROWS",
    "PREFIX_SPLIT",
    "banded_output",
    "banded_scores",
    "broadcast",
    "forward_bands",
    "gemm_bands",
    "mask_tables",
]

#: Mask kinds whose rendered tables are kept (hashable, frozen specs).
_KEPT = (Causal, SlidingWindow, Padding)
_kept: dict = {}
_KEEP_AT_MOST = 256
#: numpy's passes skip a mask's blocked tails from this many query rows (below, a call is all
#: overhead), in bands of N / PREFIX_SPLIT rows, at least PREFIX_BAND; the compiled pass skips
#: them at any N, a row at a time.
PREFIX_ROWS, PREFIX_SPLIT, PREFIX_BAND = 64, 8, 16


#: From this many query rows the dense forwards' two products skip a causal-like mask's blocked
#: keys (``gemm_bands``); below, the extra matmul calls cost more than the keys they skip. At
#: (8, 8, 128, 64) causal, bands of 16 rows made the fast path's forward 10.3 -> 12.0-12.8 ms;
#: at (1, 8, 512, 64) bands of 64 rows made it 14.7 -> 12.1-12.9 ms (bench small, 2-core AMD
#: EPYC).
BANDED_ROWS = 256


def mask_tables(mask, n: int, m: int, lead: tuple[int, ...], dtype):
    """(table shape, blocked pairs or None, float biases, whether a row is blocked whole, each
    row's reach (see ``_reach``) or None) of the mask, or None at any doubt."""
    if mask is None:
        return (n, m), None, (), False, None
    if not isinstance(mask, np.ndarray | Mask):
        return None  # lists and other tensors: the general path converts them
    try:
        mask = as_mask(mask).for_dtype(dtype)  # as validate reads it
        drawn = _kept_render(mask, n, m, len(lead))
    except (ValueError, TypeError):  # the general path raises its own error
        return None
    table = lead + (n, m)
    if drawn[0] != table[len(table) - len(drawn[0]) :] and broadcast(table, drawn[0]) != table:
        return None
    return drawn


def _kept_render(mask, n: int, m: int, lead_ndim: int):
    parts = mask.parts()
    if not all(type(p) in _KEPT for p in parts):
        return _render(mask, n, m, lead_ndim)
    key = (parts, n, m, lead_ndim)
    drawn = _kept.get(key)
    if drawn is None:
        drawn = _render(mask, n, m, lead_ndim)
        if drawn[1] is not None:
            drawn[1].flags.writeable = False  # shared by every later call
        if len(_kept) >= _KEEP_AT_MOST:
            _kept.clear()
        _kept[key] = drawn
    return drawn


def _render(mask, n: int, m: int, lead_ndim: int):
    """The mask as ``dense.apply_mask`` applies it: the union of the pairs its boolean parts
    block (each set to -inf, so one union does the same), its float parts, added in order,
    and whether the union blocks some row whole."""
    shape = mask.table_shape(n, m, lead_ndim)
    blocked, biases = None, []
    for part in mask.parts():
        if part.boolean:
            b = ~part.block((0, n), (0, m), n, m, lead_ndim)  # broadcastable to (..., N, M)
            blocked = b if blocked is None else blocked | b
        else:
            biases.append(part.bias((0, n), (0, m), n, m, lead_ndim))
    hollow = blocked is not None and bool(blocked.all(axis=-1).any())
    return tuple(shape), blocked, tuple(biases), hollow, _reach(blocked, biases, n, m)


def _reach(blocked, biases, n: int, m: int):
    """(N,) each row's last allowed key + 1 where the mask is boolean, the same for every
    batch element and blocks a tail of some rows (a causal mask's upper triangle); else None.
    Past it a row's scores are -inf, its weights exactly 0 (``kernels/_small_exp.py``)."""
    if blocked is None or biases or any(s != 1 for s in blocked.shape[:-2]):
        return None
    open_ = ~blocked.reshape(blocked.shape[-2:])  # (N or 1, M)
    last = m - np.argmax(open_[:, ::-1], axis=-1)  # (N or 1,); a row with no key gives m
    if last.shape[0] != n or int(last.min()) > m // 2:
        return None  # nothing worth skipping
    last.flags.writeable = False
    return last


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """``np.broadcast_shapes`` in plain Python (several times faster on a few short shapes), or
    None where the shapes do not broadcast."""
    first = shapes[0]
    for shape in shapes:
        if shape != first:
            break
    else:  # the common case, and the one a call of a few microseconds cannot spend loops on
        return first
    out = list(max(shapes, key=len))
    width = len(out)
    for shape in shapes:
        for i, size in enumerate(shape, width - len(shape)):
            if size != out[i]:
                if out[i] == 1:
                    out[i] = size
                elif size != 1:
                    return None
    return tuple(out)


def gemm_bands(reach: np.ndarray, n: int, most: int | None = None) -> list[tuple[int, int, int]]:
    """[(first row, end row, keys)]: the rows of a mask that ends each row's keys early (each
    row's ``_reach``) in bands of max(PREFIX_BAND, ⌈N / PREFIX_SPLIT⌉) rows (at most ``most``,
    at least 1, where given), each with the keys its rows reach. The dense forwards
    (``kernels/_small.py``, ``kernels/dense.py``) compute q kᵀ and P V band by band on these keys
    only: a causal mask's blocked triangle costs 1/16 of the table instead of half. Without
    ``most`` the plan depends on the reach and N alone, so both paths make the same products,
    and OpenBLAS, which rounds a product cut at another key otherwise, rounds them alike."""
    band = max(PREFIX_BAND, -(-n // PREFIX_SPLIT))
    if most is not None:
        band = max(1, min(most, band))
    return [(a, min(n, a + band), int(reach[a : a + band].max())) for a in range(0, n, band)]


def forward_bands(compiled: bool, reach, q, k, lead: tuple[int, ...]):
    """``gemm_bands`` where a dense forward's q kᵀ and P V skip a causal-like mask's blocked
    keys, else None: the compiled softmax runs (``compiled``: it writes each row's tail past
    its reach as 0), the mask has a ``reach``, N >= BANDED_ROWS, and q and k carry the score
    table's lead axes ``lead``. The one rule both dense paths ask, so they make the same
    products."""
    n = q.shape[-2]
    if not compiled or reach is None or reach.size == 0 or n < BANDED_ROWS:
        return None
    if q.shape[:-2] != lead or k.shape[:-2] != lead:
        return None
    return gemm_bands(reach, n)


def banded_scores(q, k, s, bands, rows: tuple[int, int]) -> None:
    """s[..., i − r0, :c] ← q[..., i, :] k[..., :c, :]ᵀ for the rows i in rows = [r0, r1), each
    with its band's keys c (``gemm_bands``); s (..., r1 − r0, M), the keys past c untouched."""
    r0, r1 = rows
    for a, b, c in bands:
        lo, hi = max(a, r0), min(b, r1)
        if lo < hi:
            matmul(q[..., lo:hi, :], k[..., :c, :].mT, out=s[..., lo - r0 : hi - r0, :c])


def banded_output(p, v, out, bands, rows: tuple[int, int]) -> None:
    """out[..., i − r0, :] ← p[..., i − r0, :c] v[..., :c, :] for the rows i in rows = [r0, r1),
    each with its band's keys c: the weights past a row's reach are 0 and left out."""
    r0, r1 = rows
    for a, b, c in bands:
        lo, hi = max(a, r0), min(b, r1)
        if lo < hi:
            matmul(p[..., lo - r0 : hi - r0, :c], v[..., :c, :], out=out[..., lo - r0 : hi - r0, :])
