"""Where a failing tensor errs, per head and block of rows: the diagnosis's summary table.

Shape legend: as ``_case.py``; a tensor's heat is (heads, rows), rows packed; nb blocks.

Each cell is the largest error of one head over one block of the tensor's rows, divided by
the tensor's tolerance: above 1 fails. The rows of dk and dv are keys, so their blocks are
key blocks, as a kernel tiles its keys (a dropped key block is one bright column); those of
out, lse and dq are query rows. Blocks are 128 rows, grown by doubling until at most
``MAX_BLOCKS`` cover the tensor, so a 65,536-row case stays a small JSON. The terminal table
pools further, to at most 12 columns and 16 head rows by their maximum, and fits 80 columns.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_BLOCKS", "block_summary", "block_table", "blocks_json"]

MAX_BLOCKS = 64
_COLUMNS, _HEAD_ROWS, _CELL = 12, 16, 6  # the terminal table: 7 + 12 x 6 = 79 columns


def block_summary(report) -> dict:
    """name -> {"rows", "block", "ratio" (heads, nb)} for each failing tensor with a
    tolerance (a statistical dropout verdict has none)."""
    found = {}
    for name, t in report.tensors.items():
        if t.passed or not math.isfinite(t.tolerance) or t.tolerance <= 0:
            continue
        rows = t.heat.shape[1]
        block = 128
        while -(-rows // block) > MAX_BLOCKS:
            block *= 2
        starts = np.arange(0, rows, block)
        cells = np.maximum.reduceat(t.heat, starts, axis=1)  # (heads, nb)
        kind = "key" if name in ("dk", "dv") else "query"
        found[name] = {"rows": kind, "block": block, "ratio": cells / t.tolerance}
    return found


def blocks_json(summary: dict) -> dict:
    """The summary for JSON: infinite ratios as "inf", each rounded to 4 significant digits."""

    def num(x):
        return float(f"{x:.4g}") if math.isfinite(x) else ("inf" if x > 0 else "nan")

    return {
        name: {
            "rows": s["rows"],
            "block": s["block"],
            "error_over_tolerance": [[num(x) for x in row] for row in s["ratio"].tolist()],
        }
        for name, s in summary.items()
    }


def _cell(x: float) -> str:
    """A ratio in at most 5 characters: 0.31, 2.4, 37, 1e+05, inf."""
    if not math.isfinite(x):
        return "inf" if x > 0 else "nan"
    if x < 10:
        return f"{x:.2g}"
    if x < 1e4:
        return f"{x:.0f}"
    return f"{x:.0e}"


def _pool(x: np.ndarray, count: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(first index of each group, x pooled by its maximum to at most ``count`` groups)."""
    size = x.shape[axis]
    width = -(-size // count)
    starts = np.arange(0, size, width)
    return starts, np.maximum.reduceat(x, starts, axis=axis)


def block_table(name: str, s: dict) -> list[str]:
    """The summary of tensor ``name`` as lines of at most 80 characters."""
    ratio = s["ratio"]
    heads, cols = _pool(ratio, _HEAD_ROWS, 0)
    col_starts, pooled = _pool(cols, _COLUMNS, 1)
    rows = s["block"] * (col_starts[1] if len(col_starts) > 1 else 1)  # rows per column
    lines = [
        f"{name}: error / tolerance per head x {rows} {s['rows']} rows (above 1 fails)",
        "head".ljust(7) + "".join(str(int(c * s["block"])).rjust(_CELL) for c in col_starts),
    ]
    for i, h0 in enumerate(heads):
        h1 = heads[i + 1] - 1 if i + 1 < len(heads) else ratio.shape[0] - 1
        label = str(h0) if h1 == h0 else f"{h0}-{h1}"
        lines.append(label.ljust(7) + "".join(_cell(x).rjust(_CELL) for x in pooled[i]))
    return lines
