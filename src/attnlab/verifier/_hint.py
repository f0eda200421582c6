"""Layout hints for a failing verdict: the case read in the other layout, or one tensor
written in it.

Shape legend: as ``_case.py``; a packed tensor is (heads, B * rows, d).

A kernel's arrays read in the wrong layout are still arrays of the right size: q (B, h, N, d)
read as (B, N, h, d) is a case of N heads of h rows, and its verdict names a head that is
really a row. Two patterns are cheap to recognise once a case has failed:

- every array read in the other layout (``--layout``) makes a case that passes;
- one tensor fails as stored but is right when its memory is read in the other layout (the
  kernel wrote it (B, h, N, d) while its inputs are (B, N, h, d), or the other way round).
"""

from __future__ import annotations

import numpy as np

__all__ = ["OTHER", "layout_hint", "reinterpreted", "transposed_hint"]

OTHER = {"bshd": "bhsd", "bhsd": "bshd"}


def reinterpreted(packed: np.ndarray, layout: str, batch: int) -> np.ndarray:
    """``packed`` (h, B * R, d) as it would pack had its memory been written in the other
    layout: the same bytes, read with heads and rows swapped."""
    h, total, d = packed.shape
    rows = total // batch
    grid = packed.reshape(h, batch, rows, d)  # (h, B, R, d)
    if layout == "bshd":
        raw = np.ascontiguousarray(grid.transpose(1, 2, 0, 3))  # (B, R, h, d): as stored
        other = raw.reshape(batch, h, rows, d).transpose(1, 0, 2, 3)  # memory as (B, h, R, d)
    else:
        raw = np.ascontiguousarray(grid.transpose(1, 0, 2, 3))  # (B, h, R, d): as stored
        other = raw.reshape(batch, rows, h, d).transpose(0, 2, 1, 3)  # memory as (B, R, h, d)
        other = other.transpose(1, 0, 2, 3)  # (h, B, R, d)
    return other.reshape(h, total, d)


def transposed_hint(name: str, layout: str, within: bool) -> str | None:
    """The sentence for a tensor that is right once read in the other layout."""
    if not within:
        return None
    other = OTHER[layout]
    return (
        f"{name} is right read as {other}: the kernel wrote it in the other layout from its "
        f"inputs' {layout}"
    )


def layout_hint(layout: str, report, other_report) -> str | None:
    """The sentence for a case that passes read in the other layout."""
    if other_report is None or not other_report.passed:
        return None
    other = OTHER[layout]
    s, o = report.shape, other_report.shape
    return (
        f"read as --layout {other} the case passes ({o['heads']} heads of {o['seqlen_q']} rows, "
        f"where {layout} read {s['heads']} heads of {s['seqlen_q']} rows): pass --layout {other}"
    )
