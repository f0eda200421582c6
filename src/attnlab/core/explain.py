"""A mask in words and as a small grid: which query may see which key, and what blocks the rest.

Shape legend (the chapter's letters):
    N   query rows          M   key rows          ... leading (batch) axes of a batched mask

Each part of a mask gets a letter; a blocked cell shows the letters of every part that blocks
it (the cell-by-cell form of ``Mask.blame``), an allowed cell shows ``·`` as the chapter's
matrices do (§6.4). The result is data: ``str()`` draws it as text, ``_repr_html_`` as a table.

>>> from attnlab.masks import Causal, Padding
>>> print(explain(Causal() + Padding([3, 1]), 3, 4))
Causal() + Padding(lengths=[3, 1]) on N=3 queries x M=4 keys; a pair is allowed only where every part allows it.
  ·  may attend
  c  blocked by Causal(): query i sees keys 0..i
  p  blocked by Padding(lengths=[3, 1]): batch element b sees keys 0..lengths[b]-1
batch element 0:
  key      0  1  2  3
  query 0  ·  c  c  cp  sees key 0
  query 1  ·  ·  c  cp  sees keys 0-1
  query 2  ·  ·  ·  cp  sees keys 0-2
batch element 1:
  key      0  1  2  3
  query 0  ·  cp cp cp  sees key 0
  query 1  ·  p  cp cp  sees key 0
  query 2  ·  p  p  cp  sees key 0
"""

from __future__ import annotations

import html
import string
from dataclasses import dataclass

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.core.chunks import Chunks
from attnlab.core.masks import Causal, Dense, Mask, Padding, SlidingWindow, as_mask
from attnlab.errors import ShapeError

__all__ = ["Explanation", "explain"]

#: A grid of up to LIMIT x LIMIT cells is drawn whole; a larger table shows its top-left corner.
LIMIT = 64
CORNER = 16
#: Batched masks show this many batch elements.
MAX_ELEMENTS = 4


@dataclass(frozen=True, eq=False)
class Explanation:
    """What ``explain`` found: one grid per batch element shown.

    Attributes:
        title: the mask and the table's size in words.
        legend: (letter, words) per part of the mask.
        grids: (leading index, codes) per batch element shown; ``codes`` (rows, cols) holds,
            per cell, a bit per part that blocks it (bit p for part p; 0 = may attend).
        note: what was left out (rows, columns or batch elements), or "".
        cut: True when only a corner of the table is shown.
    """

    title: str
    legend: tuple[tuple[str, str], ...]
    grids: tuple[tuple[tuple[int, ...], np.ndarray], ...]
    note: str = ""
    cut: bool = False

    def _sees(self, codes_row: np.ndarray) -> str:
        if self.cut:  # a corner: the row may see keys further right
            return _sees(codes_row == 0, empty="no key") + " of those shown"
        return _sees(codes_row == 0)

    def _cell(self, code: int) -> str:
        return "".join(l for p, (l, _) in enumerate(self.legend) if code >> p & 1) or "·"

    def __str__(self) -> str:
        lines = [self.title, "  ·  may attend"]
        lines += [f"  {letter}  blocked by {words}" for letter, words in self.legend]
        for lead, codes in self.grids:
            if lead:
                lines.append(f"{_element(lead)}:")
            label = len(f"query {codes.shape[0] - 1}")
            width = max(len(self.legend), len(str(codes.shape[1] - 1)))
            cols = " ".join(f"{j:<{width}}" for j in range(codes.shape[1]))
            lines.append(f"  {'key':<{label}}  {cols}".rstrip())
            for i, row in enumerate(codes):
                cells = " ".join(f"{self._cell(c):<{width}}" for c in row)
                lines.append(f"  {f'query {i}':<{label}}  {cells}  {self._sees(row)}")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [f"<p>{html.escape(self.title)}</p><ul><li>· may attend</li>"]
        parts += [f"<li><b>{l}</b> blocked by {html.escape(w)}</li>" for l, w in self.legend]
        parts.append("</ul>")
        for lead, codes in self.grids:
            if lead:
                parts.append(f"<p>{_element(lead)}</p>")
            head = "".join(f"<th>{j}</th>" for j in range(codes.shape[1]))
            rows = [f"<tr><th>key</th>{head}<th></th></tr>"]
            for i, row in enumerate(codes):
                cells = "".join(
                    f'<td style="background:{"#dff0d8" if c == 0 else "#eee"}">{self._cell(c)}</td>'
                    for c in row
                )
                rows.append(f"<tr><th>query {i}</th>{cells}<td>{self._sees(row)}</td></tr>")
            parts.append(f'<table style="font-family:monospace">{"".join(rows)}</table>')
        if self.note:
            parts.append(f"<p>{html.escape(self.note)}</p>")
        return "".join(parts)


def explain(mask, n: int, m: int | None = None) -> Explanation:
    """Which query may see which key under ``mask`` on an N x M table, and what blocks each cell.

    Args:
        mask: a mask spec, or a bool / additive array as ``attention`` accepts.
        n: query count N.   m: key count M (defaults to N).

    Returns:
        an ``Explanation``: ``print()`` it, or let a notebook draw its HTML table. A table
        larger than 64 x 64 shows its top-left 16 x 16 corner; a batched mask its first
        four batch elements.
    """
    mask = as_mask(mask)
    if mask is None:
        raise ShapeError("expected a mask to explain, but got None instead (None allows all)")
    m = n if m is None else m
    n, m = positive_int("n", n, ShapeError), positive_int("m", m, ShapeError)
    parts = mask.parts()
    legend = tuple(zip(_letters(parts), (_words(p, n, m) for p in parts), strict=True))
    rows, cols = (n, m) if max(n, m) <= LIMIT else (min(n, CORNER), min(m, CORNER))
    lead_ndim = max([1 if mask.batched else 0] + [p.array.ndim - 2 for p in _dense(parts)])
    blocked = [~p.block((0, rows), (0, cols), n, m, lead_ndim) for p in parts]
    shape = np.broadcast_shapes(*(b.shape for b in blocked), (rows, cols))
    codes = np.zeros(shape, dtype=np.int64)  # (..., rows, cols)
    for p, b in enumerate(blocked):
        codes |= b.astype(np.int64) << p
    leads = list(np.ndindex(shape[:-2]))
    grids = tuple((lead, codes[lead]) for lead in leads[:MAX_ELEMENTS])
    notes = []
    if (rows, cols) != (n, m):
        notes.append(f"showing queries 0-{rows - 1} and keys 0-{cols - 1} of {n} x {m}")
    if len(leads) > MAX_ELEMENTS:
        notes.append(f"showing {MAX_ELEMENTS} of {len(leads)} batch elements")
    rule = "; a pair is allowed only where every part allows it" if len(parts) > 1 else ""
    title = f"{mask!r} on N={n} queries x M={m} keys{rule}."
    note = "(" + "; ".join(notes) + ")" if notes else ""
    return Explanation(title, legend, grids, note, cut=(rows, cols) != (n, m))


def _dense(parts):
    return [p for p in parts if isinstance(p, Dense)]


def _letters(parts) -> list[str]:
    """One letter per part: the kind's initial (c, s, p, d) unless taken, then a, b, ..."""
    taken: list[str] = []
    for p in parts:
        first = type(p).__name__[0].lower()
        free = [c for c in first + string.ascii_lowercase if c not in taken]
        taken.append(free[0] if free else "?")
    return taken


def _offset(mask, n: int, m: int) -> str:
    off = 0 if mask.align == "top_left" else m - n
    return "i" if off == 0 else f"i{off:+d}"


def _words(part: Mask, n: int, m: int) -> str:
    """What ``part`` allows, in words."""
    if isinstance(part, Causal):
        return f"{part!r}: query i sees keys 0..{_offset(part, n, m)}"
    if isinstance(part, SlidingWindow):
        off = 0 if part.align == "top_left" else m - n
        left, right = part._reach()
        lo = "0" if left == float("inf") else f"i{off - int(left):+d}"
        hi = str(m - 1) if right == float("inf") else f"i{off + int(right):+d}"
        return f"{part!r}: query i sees keys {lo}..{hi}".replace("i+0", "i")
    if isinstance(part, Padding):
        return f"{part!r}: batch element b sees keys 0..lengths[b]-1"
    if isinstance(part, Chunks):
        where = "i" if part.align == "top_left" else _offset(part, n, m)
        return (
            f"{part!r}: query i sees the keys j with j // {part.size} == ({where}) // {part.size}"
        )
    if isinstance(part, Dense) and part.boolean:
        return f"{part!r}: an explicit table, False blocks"
    if isinstance(part, Dense):
        return f"{part!r}: an explicit additive table, -inf blocks and other values add a bias"
    return repr(part)


def _element(lead: tuple[int, ...]) -> str:
    return f"batch element {lead[0]}" if len(lead) == 1 else f"leading index {lead}"


def _sees(allowed: np.ndarray, empty="no key (attention raises FullyMaskedRowError)") -> str:
    """'sees keys 0-2, 5' for a row of the grid (True where the key may be seen)."""
    keys = np.flatnonzero(allowed)
    if keys.size == 0:
        return f"sees {empty}"
    runs, start = [], keys[0]
    for a, b in zip(keys, list(keys[1:]) + [None], strict=True):
        if b is None or b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return f"sees key{'s' if keys.size > 1 else ''} {', '.join(runs)}"
