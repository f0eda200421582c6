"""A verification case: a kernel's inputs, its outputs and its options, checked once.

Shape legend:
    B         sequences (the batch, or FlashAttention's varlen sequences)
    N, M      one sequence's query and key rows
    T_q, T_k  the query and key rows of all sequences together
    h, h_kv   query heads and key/value heads (GQA: h_kv divides h, g = h / h_kv)
    d_k, d_v  query/key width and value width

The kernel's layouts, each with its log-sum-exp laid out as FlashAttention returns it:
    "bshd" (FlashAttention):  q (B, N, h, d_k)   k (B, M, h_kv, d_k)   lse (B, h, N)
    "bhsd" (PyTorch SDPA):    q (B, h, N, d_k)   k (B, h_kv, M, d_k)   lse (B, h, N)
    varlen (cu_seqlens_q/k):  q (T_q, h, d_k)    k (T_k, h_kv, d_k)    lse (h, T_q)
out and dq are laid out as q (with d_v for out), dk and dv as k, do as out.

Inside the package every array is held heads first and packed, q as (h, T_q, d_k): a padded
batch is B sequences of N rows, so both layouts and varlen are one thing to the truth, the
baseline and the report, which walk the sequences through ``cu_q`` and ``cu_k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.verifier._dropout import DROPOUT_NAMES, Dropout, parse_dropout
from attnlab.verifier._options import OPTION_NAMES, CaseError, Options, parse_options

__all__ = ["ARRAY_NAMES", "DTYPES", "LAYOUTS", "Case", "CaseError", "make_case"]

ARRAY_NAMES = ("q", "k", "v", "out", "lse", "do", "dq", "dk", "dv")
REQUIRED = ("q", "k", "v", "out")
GRADS = ("dq", "dk", "dv")
DTYPES = ("float64", "float32", "float16", "bfloat16")
LAYOUTS = ("bshd", "bhsd")

# Each array's axes in each layout (letters of the legend; "x" is d_k or d_v as named).
_AXES = {
    "bshd": {"q": "BNhK", "k": "BMjK", "v": "BMjV", "out": "BNhV", "lse": "BhN"},
    "bhsd": {"q": "BhNK", "k": "BjMK", "v": "BjMV", "out": "BhNV", "lse": "BhN"},
    "varlen": {"q": "QhK", "k": "TjK", "v": "TjV", "out": "QhV", "lse": "hQ"},
}
_SAME_AS = {"do": "out", "dq": "q", "dk": "k", "dv": "v"}
_LETTER = {"B": "B", "N": "N", "M": "M", "h": "h", "j": "h_kv", "K": "d_k", "V": "d_v"}
_LETTER.update({"Q": "T_q", "T": "T_k"})


@dataclass(frozen=True)
class Case:
    """A checked case. Arrays keep the dtype they were stored in, packed heads first:
    q (h, T_q, d_k), k (h_kv, T_k, d_k), v (h_kv, T_k, d_v), out and do (h, T_q, d_v),
    lse (h, T_q), dq as q, dk as k, dv as v."""

    arrays: dict  # name -> packed array, only the arrays the case holds
    cu_q: np.ndarray  # (B + 1,) int64, sequence b's queries are rows cu_q[b]:cu_q[b + 1]
    cu_k: np.ndarray  # (B + 1,) int64
    options: Options
    layout: str  # "bshd", "bhsd", "varlen" or "kvcache"
    dropout: Dropout | None = None  # dropout_p and the kernel's keep mask (B, h, N, M)

    @property
    def heads(self) -> int:
        return self.arrays["q"].shape[0]

    @property
    def kv_heads(self) -> int:
        return self.arrays["k"].shape[0]

    @property
    def group(self) -> tuple[int, int]:
        """(h_kv, g): the query heads as key/value heads times the group each serves."""
        return self.kv_heads, self.heads // self.kv_heads

    @property
    def batch(self) -> int:
        return len(self.cu_q) - 1

    @property
    def dtype(self) -> np.dtype:
        """The kernel's dtype: q's, k's and v's (they share one)."""
        return self.arrays["q"].dtype

    @property
    def backward(self) -> bool:
        return "do" in self.arrays

    def sequences(self):
        """(b, (q0, q1), (k0, k1)) for each sequence with at least one query row."""
        for b in range(self.batch):
            q0, q1, k0, k1 = self.cu_q[b], self.cu_q[b + 1], self.cu_k[b], self.cu_k[b + 1]
            if q1 > q0:
                yield b, (int(q0), int(q1)), (int(k0), int(k1))

    def locate(self, row: int, keys: bool = False) -> tuple[int, int]:
        """(sequence, row within it) of packed row ``row`` of the queries (or keys)."""
        cu = self.cu_k if keys else self.cu_q
        b = int(np.searchsorted(cu, row, side="right")) - 1
        return b, int(row - cu[b])


def _dtype_name(name: str, arr: np.ndarray) -> str:
    kind = arr.dtype.name
    if kind not in DTYPES:
        # One-byte entries are most often float8 stored as bytes (.npz cannot name float8).
        fp8 = " (float8 bytes: add fp8_format)" if arr.dtype.itemsize == 1 else ""
        raise CaseError(
            f"{name}: expected float64, float32, float16 or bfloat16, but got {kind}{fp8} instead"
        )
    return kind


def _shape(name: str, arr: np.ndarray, axes: str, sizes: dict) -> None:
    """Check ``arr`` against ``axes`` (legend letters), filling ``sizes`` with new letters."""
    legend = "(" + ", ".join(_LETTER[a] for a in axes) + ")"
    if arr.ndim != len(axes) or 0 in arr.shape:
        raise CaseError(
            f"{name}: expected shape {legend} with no empty axis, but got shape {arr.shape} instead"
        )
    for a, size in zip(axes, arr.shape, strict=True):
        if sizes.setdefault(a, size) != size:
            want = tuple(sizes.get(x, _LETTER[x]) for x in axes)
            raise CaseError(
                f"{name}: expected shape {legend} = {want} to agree with the arrays before it, "
                f"but got shape {arr.shape} instead"
            )


def _pack(arr: np.ndarray, axes: str) -> np.ndarray:
    """Heads first and sequences packed: (h, T, d) for a table, (h, T) for lse."""
    if axes in ("hQ",):
        return arr
    if len(axes) == 3 and axes[0] in "QT":  # varlen (T, h, d)
        return arr.transpose(1, 0, 2)
    if axes == "BhN":
        return arr.transpose(1, 0, 2).reshape(arr.shape[1], -1)
    head = 2 if axes[2] in "hj" else 1  # bshd: heads on axis 2; bhsd: on axis 1
    moved = np.moveaxis(arr, head, 0)  # (h, B, rows, d)
    return moved.reshape(moved.shape[0], -1, moved.shape[-1])


def _cu(name: str, value, total: int) -> np.ndarray:
    arr = np.asarray(value)
    ok = arr.ndim == 1 and arr.size >= 2 and arr.dtype.kind in "iu"
    if not ok:
        raise CaseError(
            f"{name}: expected a 1-D integer array of B + 1 offsets, "
            f"but got dtype {arr.dtype} and shape {arr.shape} instead"
        )
    arr = arr.astype(np.int64)
    if arr[0] != 0 or arr[-1] != total or (np.diff(arr) < 0).any():
        raise CaseError(
            f"{name}: expected offsets rising from 0 to {total} (the packed rows), "
            f"but got {arr.tolist() if arr.size <= 8 else f'{arr[:8].tolist()}...'} instead"
        )
    return arr


def _varlen_offsets(entries: dict, sizes: dict) -> tuple[np.ndarray, np.ndarray]:
    cu_q = _cu("cu_seqlens_q", entries["cu_seqlens_q"], sizes["Q"])
    cu_k = _cu("cu_seqlens_k", entries["cu_seqlens_k"], sizes["T"])
    if cu_q.size != cu_k.size:
        raise CaseError(
            f"cu_seqlens_k: expected {cu_q.size} offsets, as cu_seqlens_q has, "
            f"but got {cu_k.size} instead"
        )
    empty = np.flatnonzero((np.diff(cu_k) == 0) & (np.diff(cu_q) > 0))
    if empty.size:
        raise CaseError(
            f"cu_seqlens_k: sequence {int(empty[0])} has queries but no key, so its rows have "
            "nothing to attend to"
        )
    return cu_q, cu_k


def _check_entries(entries: dict) -> None:
    unknown = sorted(set(entries) - set(ARRAY_NAMES) - set(OPTION_NAMES) - set(DROPOUT_NAMES))
    if unknown:
        raise CaseError(
            f"{unknown[0]}: unknown entry in the case; expected the arrays "
            f"{', '.join(ARRAY_NAMES)} and the options {', '.join(OPTION_NAMES + DROPOUT_NAMES)}"
        )
    for name in REQUIRED:
        if entries.get(name) is None:
            raise CaseError(f"{name}: missing array; a case needs q, k, v and out")
    grads = [g for g in GRADS if entries.get(g) is not None]
    if grads and entries.get("do") is None:
        raise CaseError(f"do: missing array; {grads[0]} is a gradient, which needs do (dL/dout)")
    if entries.get("do") is not None and not grads:
        raise CaseError("do: given without dq, dk or dv, so there is no gradient to judge")
    if (entries.get("cu_seqlens_q") is None) != (entries.get("cu_seqlens_k") is None):
        given = "cu_seqlens_q" if entries.get("cu_seqlens_q") is not None else "cu_seqlens_k"
        other = "cu_seqlens_k" if given == "cu_seqlens_q" else "cu_seqlens_q"
        raise CaseError(f"{other}: missing; a varlen case needs both cu_seqlens_q and _k")


def make_case(entries: dict, layout: str = "bshd") -> Case:
    """Check a case's entries (arrays and options, by FlashAttention's names) and pack them.

    Raises:
        CaseError naming the array or option: a missing or unknown entry, a dtype other than
        float64/32/16 or bfloat16, shapes that disagree, a bad option value.
    """
    if layout not in LAYOUTS:
        raise CaseError(f"layout: expected one of {LAYOUTS}, but got {layout!r} instead")
    _check_entries(entries)
    varlen = entries.get("cu_seqlens_q") is not None
    if varlen and layout != "bshd":
        raise CaseError("cu_seqlens_q: a varlen case is packed (T, h, d), so its layout is bshd")
    form = "varlen" if varlen else layout
    arrays, sizes, kinds = {}, {}, {}
    for name in ARRAY_NAMES:
        if entries.get(name) is None:
            continue
        arr = np.asarray(entries[name])
        kinds[name] = _dtype_name(name, arr)
        axes = _AXES[form][_SAME_AS.get(name, name)]
        _shape(name, arr, axes, sizes)
        arrays[name] = _pack(arr, axes)
    for name in ("k", "v"):
        if kinds[name] != kinds["q"]:
            raise CaseError(
                f"{name}: expected the dtype of q ({kinds['q']}), as a kernel reads q, k and v "
                f"in one dtype, but got {kinds[name]} instead"
            )
    if sizes["h"] % sizes["j"]:
        raise CaseError(
            f"k: expected key/value heads h_kv that divide the query heads h = {sizes['h']} "
            f"(GQA), but got h_kv = {sizes['j']} instead"
        )
    if varlen:
        cu_q, cu_k = _varlen_offsets(entries, sizes)
    else:
        b = sizes["B"]
        cu_q = np.arange(b + 1, dtype=np.int64) * sizes["N"]
        cu_k = np.arange(b + 1, dtype=np.int64) * sizes["M"]
    options = parse_options(entries, len(cu_q) - 1, sizes["h"])
    dropout = parse_dropout(
        entries, len(cu_q) - 1, sizes["h"], sizes.get("N"), sizes.get("M"), varlen
    )
    if dropout is not None and dropout.keep is None and "do" in arrays:
        raise CaseError(
            "dropout_p: the gradients of a dropout case are judged only under the kernel's "
            "keep mask; add dropout_mask or S_dmask (B, h, N, M)"
        )
    return Case(arrays, cu_q, cu_k, options, form, dropout)
