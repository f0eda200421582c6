"""The named score_mods and mask_mods: the variants a flex backward knows the derivative of.

Shape legend (torch's FlexAttention letters):
    B   batch           H   query heads         L   query rows      S   key rows
    b (B, 1, 1, 1), h (1, H, 1, 1), q_idx (1, 1, L', 1), kv_idx (1, 1, 1, S'): the integer
    index arrays every mod receives; they broadcast to the (B, H, L', S') tile being scored.

Each constructor returns a frozen dataclass that is itself the mod (call it as torch calls
one), so ``flex_attention`` can read what it is: a ``Softcap`` becomes attention's ``softcap=``,
an ``ALiBi`` or a ``RelativeBias`` an additive bias per tile, a mask_mod a boolean rule. An
arbitrary callable is run as given (forward only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError, ShapeError

__all__ = [
    "ALiBi",
    "Causal",
    "Document",
    "RelativeBias",
    "SlidingWindow",
    "Softcap",
    "alibi",
    "and_masks",
    "causal",
    "document",
    "or_masks",
    "relative_bias",
    "sliding_window",
    "softcap",
]


def _real_array(name: str, value, ndims: tuple[int, ...]) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AttnlabError(
            f"expected {name} to be an array of real numbers, but got {value!r} instead"
        ) from None
    if arr.ndim not in ndims or arr.size == 0:
        raise ShapeError(f"expected {name} with {ndims} axes, but got shape {arr.shape} instead")
    if not np.isfinite(arr).all():
        raise AttnlabError(f"expected finite {name}, but got {arr.tolist()!r} instead")
    return arr


def _whole(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise AttnlabError(f"expected {name} to be an integer >= {low}, but got {value!r} instead")
    return int(value)


def _per_head(table: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A (H, ...) table's row for each head index, or the one row a 1-D table has."""
    if table.ndim == 1:
        return table
    if h.max(initial=0) >= table.shape[0]:
        raise ShapeError(
            f"expected one row per query head, at least {int(h.max()) + 1}, but got a table "
            f"of shape {table.shape} instead"
        )
    return table[h.reshape(-1)].reshape(h.shape + table.shape[1:])  # (1, H, 1, 1, ...)


# -- score_mods -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Softcap:
    """score -> cap · tanh(score / cap) (Gemma 2's soft cap), on the scaled score."""

    cap: float

    def __call__(self, score, b, h, q_idx, kv_idx):
        return self.cap * np.tanh(score / self.cap)


@dataclass(frozen=True, eq=False)
class ALiBi:
    """score -> score − slopes[h] · |q_idx − kv_idx| (attnlab's ALiBi, one slope per head)."""

    slopes: np.ndarray

    def bias(self, h, q_idx, kv_idx) -> np.ndarray:
        slope = self.slopes[h]  # (1, H, 1, 1)
        return -slope * np.abs(q_idx - kv_idx)  # (1, H, L', S')

    def __call__(self, score, b, h, q_idx, kv_idx):
        return score + self.bias(h, q_idx, kv_idx)

    def __repr__(self) -> str:
        return f"ALiBi(slopes={self.slopes.tolist()})"


@dataclass(frozen=True, eq=False)
class RelativeBias:
    """score -> score + table[h, clip(kv_idx − q_idx, −R, R) + R], a learned bias per clipped
    relative distance (a 1-D table of 2R + 1 entries is shared by every head)."""

    table: np.ndarray

    def bias(self, h, q_idx, kv_idx) -> np.ndarray:
        reach = (self.table.shape[-1] - 1) // 2
        dist = np.clip(kv_idx - q_idx, -reach, reach) + reach  # (1, 1, L', S')
        rows = _per_head(self.table, h)  # (2R+1,) or (1, H, 1, 1, 2R+1)
        if rows.ndim == 1:
            return rows[dist]  # (1, 1, L', S')
        return np.take_along_axis(rows, dist[..., None], axis=-1)[..., 0]  # (1, H, L', S')

    def __call__(self, score, b, h, q_idx, kv_idx):
        return score + self.bias(h, q_idx, kv_idx)

    def __repr__(self) -> str:
        return f"RelativeBias(table of shape {self.table.shape})"


def softcap(cap) -> Softcap:
    """The soft cap as a score_mod: cap · tanh(score / cap), cap > 0."""
    if isinstance(cap, bool) or not isinstance(cap, int | float | np.number) or not cap > 0:
        raise AttnlabError(f"expected cap to be a number > 0, but got {cap!r} instead")
    if not np.isfinite(cap):
        raise AttnlabError(f"expected a finite cap, but got {cap!r} instead")
    return Softcap(float(cap))


def alibi(slopes) -> ALiBi:
    """ALiBi as a score_mod: slopes of shape (H,), one per query head."""
    return ALiBi(_real_array("slopes", slopes, (1,)))


def relative_bias(table) -> RelativeBias:
    """A clipped relative-position bias as a score_mod: table of shape (2R + 1,) or
    (H, 2R + 1); entry R is distance 0, entry R + d a key d places after the query."""
    arr = _real_array("table", table, (1, 2))
    if arr.shape[-1] % 2 == 0:
        raise ShapeError(
            f"expected table's last axis to hold 2R + 1 distances (an odd count), but got "
            f"shape {arr.shape} instead"
        )
    return RelativeBias(arr)


# -- mask_mods --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Causal:
    """kv_idx <= q_idx + offset (offset = S − L aligns the last query with the last key)."""

    offset: int = 0

    def __call__(self, b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + self.offset


@dataclass(frozen=True)
class SlidingWindow:
    """q_idx − left <= kv_idx <= q_idx + right: attnlab's ``SlidingWindow(left=, right=)``."""

    left: int
    right: int = 0

    def __call__(self, b, h, q_idx, kv_idx):
        return (kv_idx >= q_idx - self.left) & (kv_idx <= q_idx + self.right)


@dataclass(frozen=True, eq=False)
class Document:
    """q_idx and kv_idx lie in the same document: packed sequences (varlen) as one mask.
    ``q_docs``/``kv_docs``: the document id of every position, (L,) / (S,) or per batch
    element (B, L) / (B, S)."""

    q_docs: np.ndarray
    kv_docs: np.ndarray

    def __call__(self, b, h, q_idx, kv_idx):
        qd = self.q_docs[q_idx] if self.q_docs.ndim == 1 else self.q_docs[b, q_idx]
        kd = self.kv_docs[kv_idx] if self.kv_docs.ndim == 1 else self.kv_docs[b, kv_idx]
        return qd == kd  # (B or 1, 1, L', S')

    def __repr__(self) -> str:
        return (
            f"Document(q_docs of shape {self.q_docs.shape}, kv_docs of shape {self.kv_docs.shape})"
        )


def causal(offset=0) -> Causal:
    """The causal mask_mod: key j is allowed for query i when j <= i + offset."""
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise AttnlabError(f"expected offset to be an integer, but got {offset!r} instead")
    return Causal(int(offset))


def sliding_window(left, right=0) -> SlidingWindow:
    """The two-sided window mask_mod: keys from q_idx − left to q_idx + right."""
    return SlidingWindow(_whole("left", left, 0), _whole("right", right, 0))


def document(q_docs, kv_docs=None) -> Document:
    """The document mask_mod: attention stays inside each packed sequence. ``q_docs`` gives each
    query position's document id, (L,) or (B, L); ``kv_docs`` the keys' (default: q_docs)."""
    arrays = []
    for name, ids in (("q_docs", q_docs), ("kv_docs", q_docs if kv_docs is None else kv_docs)):
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu" or arr.ndim not in (1, 2) or arr.size == 0:
            raise AttnlabError(
                f"expected {name} to be integer document ids of shape (L,) or (B, L), but got "
                f"dtype {arr.dtype} and shape {arr.shape} instead"
            )
        arrays.append(arr)
    return Document(*arrays)


@dataclass(frozen=True)
class _Combine:
    """mask_mods joined by & (every one allows) or | (any one allows), as torch's and_masks /
    or_masks; ``mods`` keeps the parts readable."""

    op: str
    mods: tuple

    def __call__(self, b, h, q_idx, kv_idx):
        out = np.asarray(self.op == "and")  # the identity of the join: True for &, False for |
        for mod in self.mods:
            out = (
                (out & mod(b, h, q_idx, kv_idx))
                if self.op == "and"
                else (out | mod(b, h, q_idx, kv_idx))
            )
        return out


def _joined(op: str, mask_mods: tuple) -> _Combine:
    for i, mod in enumerate(mask_mods):
        if not callable(mod):
            raise AttnlabError(
                f"expected every mask_mod given to {op}_masks to be callable, but got {mod!r} "
                f"at position {i} instead"
            )
    return _Combine(op, tuple(mask_mods))


def and_masks(*mask_mods) -> _Combine:
    """The mask_mod allowing a pair only where every one of ``mask_mods`` does (torch's
    ``and_masks``): ``and_masks(causal(), document(ids))`` is causal attention within documents."""
    return _joined("and", mask_mods)


def or_masks(*mask_mods) -> _Combine:
    """The mask_mod allowing a pair where any one of ``mask_mods`` does (torch's ``or_masks``)."""
    return _joined("or", mask_mods)
