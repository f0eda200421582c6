"""The fast path's masks: each spec rendered once per (spec, N, M, axes) and kept.

Shape legend (the chapter's letters):
    ...  leading batch axes          N  query rows          M  key rows

``core/_small.py`` applies a mask as ``dense.apply_mask`` does, from tables drawn here: the
union of the pairs its boolean parts block, its float parts in order, whether some row is
blocked whole, and, where every row's allowed keys end before the table does (a causal mask),
where each row's keys end, so the fast path can leave the blocked tail out of its passes.
Specs are frozen dataclasses, so equal specs share a table.
"""

from __future__ import annotations

import numpy as np

from attnlab.core.masks import Causal, Mask, Padding, SlidingWindow, as_mask

__all__ = ["PREFIX_BAND", "PREFIX_ROWS", "PREFIX_SPLIT", "broadcast", "mask_tables"]

#: Mask kinds whose rendered tables are kept (hashable, frozen specs).
_KEPT = (Causal, SlidingWindow, Padding)
_kept: dict = {}
_KEEP_AT_MOST = 256
#: numpy's passes skip a mask's blocked tails from this many query rows (below, a call is all
#: overhead), in bands of N / PREFIX_SPLIT rows, at least PREFIX_BAND; the compiled pass skips
#: them at any N, a row at a time.
PREFIX_ROWS, PREFIX_SPLIT, PREFIX_BAND = 64, 8, 16


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
    Past it a row's scores are -inf, its weights exactly 0 (``core/_small_exp.py``)."""
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
