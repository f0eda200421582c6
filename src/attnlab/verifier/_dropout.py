"""Dropout cases: ``dropout_p`` with the kernel's keep mask, or a statistical check without it.

Shape legend: as ``_case.py``; a keep mask is (B, h, N, M) booleans (padded cases only).

With the mask the kernel drew (``dropout_mask``, True = kept, or FlashAttention's
``S_dmask``, whose negative entries are the dropped ones), the answer is exact:
``out = (softmax weights * keep / (1 - p)) @ V``, as FlashAttention's ``attention_ref`` writes
it, and the gradients by the chain rule through the same steps. Without a mask, only the
output can be judged, and only statistically (``_dropout_stats.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.verifier._options import CaseError

__all__ = ["DROPOUT_NAMES", "Dropout", "parse_dropout"]

DROPOUT_NAMES = ("dropout_p", "dropout_mask", "S_dmask")


@dataclass(frozen=True)
class Dropout:
    p: float
    keep: np.ndarray | None  # (B, h, N, M) bool, or None: judged statistically


def parse_dropout(entries: dict, batch: int, heads: int, n: int, m: int, varlen: bool):
    """The case's dropout, checked, or None for none."""
    masks = [name for name in ("dropout_mask", "S_dmask") if entries.get(name) is not None]
    if entries.get("dropout_p") is None:
        if masks:
            raise CaseError(f"dropout_p: missing; {masks[0]} is a keep mask, which needs it")
        return None
    p = np.asarray(entries["dropout_p"])
    if p.size != 1 or p.dtype.kind not in "fiu" or not 0 <= float(p.reshape(())) < 1:
        raise CaseError(f"dropout_p: expected one number in [0, 1), but got {p.tolist()!r}")
    p = float(p.reshape(()))
    if len(masks) > 1:
        raise CaseError("S_dmask: given with dropout_mask; the keep mask is one or the other")
    if p == 0 and not masks:
        return None
    if varlen:
        raise CaseError("dropout_p: a varlen case with dropout is not judged; pad it to (B, N)")
    if not masks:
        return Dropout(p, None)
    arr = np.asarray(entries[masks[0]])
    want = (batch, heads, n, m)
    if arr.shape != want:
        raise CaseError(f"{masks[0]}: expected shape (B, h, N, M) = {want}, but got {arr.shape}")
    if masks[0] == "dropout_mask":
        if arr.dtype != bool:
            raise CaseError(f"dropout_mask: expected booleans (True = kept), but got {arr.dtype}")
        return Dropout(p, arr)
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise CaseError(f"S_dmask: expected floats (negative = dropped), but got {arr.dtype}")
    return Dropout(p, ~np.signbit(arr.astype(np.float32)))
