"""Where a kernel errs, drawn: per tensor, the error per (head, row) and per query tile.

Shape legend: as ``_case.py``; a tensor's heat map is (heads, rows), rows packed.

The figure is plain data (Plotly's JSON: ``data`` and ``layout`` dicts), built without
importing plotly; ``write_plot`` alone imports it, to write an offline page with plotly.js
embedded from the installed package, as the labs' ``--plot`` does (``cli/labs.py``).

- The heat map's colour is log10 of the largest error in a row (over its columns), so an
  error 10^6 times the others stands out and a wrong mask diagonal draws a line. More than
  ``MAX_COLUMNS`` rows are pooled by their maximum, so a 65,536-row case stays a small page.
- The tiles are ``tile`` rows from each sequence's start (128, FlashAttention's usual query
  tile), each bar the largest error of its tile over every head, with the tolerance drawn
  across: one tall bar is a wrong tile, bars that rise at every tile edge a wrong edge.
- A failed case adds, per failing tensor, its per-head x block summary (``_blocks.py``): log10
  of each block's largest error over the tolerance, red above 0 (failing), blue below; for dk
  and dv the blocks are key blocks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab._atomic import write_atomic
from attnlab.errors import AttnlabError

__all__ = ["DEFAULT_TILE", "MAX_COLUMNS", "figure", "write_plot"]

DEFAULT_TILE = 128
MAX_COLUMNS = 2048
_FLOOR, _CEIL = 1e-20, 1e10  # log10 colour range: exact zeros and infinities clipped to it


def _pool(heat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each column, (heads, columns) maxima) with at most MAX_COLUMNS columns."""
    rows = heat.shape[1]
    width = -(-rows // MAX_COLUMNS)  # rows per column, rounded up
    starts = np.arange(0, rows, width)
    return starts, np.maximum.reduceat(heat, starts, axis=1)


def _tiles(heat: np.ndarray, cu: np.ndarray, tile: int) -> tuple[list, list, list]:
    """(first packed row, rows, largest error over heads) of each tile of each sequence."""
    per_row = heat.max(axis=0)  # (rows,)
    starts, widths, errors = [], [], []
    for b in range(len(cu) - 1):
        for r0 in range(int(cu[b]), int(cu[b + 1]), tile):
            r1 = min(r0 + tile, int(cu[b + 1]))
            starts.append(r0)
            widths.append(r1 - r0)
            errors.append(float(per_row[r0:r1].max()))
    return starts, widths, errors


def _colour_range(heat: np.ndarray) -> tuple[float, float]:
    """log10 bounds of the colours: the largest error, and at most 8 decades below it."""
    positive = heat[heat > 0]
    if positive.size == 0:
        return -1.0, 0.0
    top = float(_log(positive.max()))
    return max(float(_log(positive.min())), top - 8), top


def _axis(i: int) -> str:
    return "" if i == 1 else str(i)  # Plotly names its first axes x and y, then x2, y2, ...


def _log(x: np.ndarray) -> np.ndarray:
    return np.log10(np.clip(x, _FLOOR, _CEIL))


def _heat_trace(t, axis: str, colorbar: dict) -> dict:
    """The heat map of log10 error per (head, row), rows pooled past MAX_COLUMNS."""
    starts, pooled = _pool(t.heat)
    zmin, zmax = _colour_range(t.heat)
    return {
        "type": "heatmap",
        "x": starts.tolist(),
        "y": list(range(t.heat.shape[0])),
        "z": _log(pooled).tolist(),
        "customdata": pooled.tolist(),
        "colorscale": "Viridis",
        "zmin": zmin,
        "zmax": zmax,
        "colorbar": {"title": {"text": "log10 error"}, **colorbar},
        "hovertemplate": "head %{y}, row %{x}: error %{customdata:.3g}<extra></extra>",
        "xaxis": f"x{axis}",
        "yaxis": f"y{axis}",
    }


def _tile_trace(t, cu: np.ndarray, tile: int, axis: str) -> dict:
    """One bar per query tile: its largest error, red past the tolerance."""
    starts, widths, errors = _tiles(t.heat, cu, tile)
    return {
        "type": "bar",
        "x": starts,
        "y": [e if np.isfinite(e) else _CEIL for e in errors],
        "width": widths,
        "offset": 0,
        "marker": {"color": ["#cf222e" if e > t.tolerance else "#1f6feb" for e in errors]},
        "hovertemplate": "tile from row %{x}: error %{y:.3g}<extra></extra>",
        "xaxis": f"x{axis}",
        "yaxis": f"y{axis}",
    }


def _line(xref: str, yref: str, x: tuple, y: tuple, colour: str, dash: str) -> dict:
    return {"type": "line", "xref": xref, "yref": yref, "x0": x[0], "x1": x[1], "y0": y[0],
            "y1": y[1], "line": {"color": colour, "dash": dash}}  # fmt: skip


def figure(report, tile: int = DEFAULT_TILE) -> dict:
    """The report's figure as Plotly JSON: for each tensor a heat map and a bar chart of tiles."""
    names = list(report.tensors)
    blocks = report.blocks or {}
    panels = 2 * len(names) + len(blocks)
    gap = 0.08 / max(panels - 1, 1)
    height = (1.0 - gap * (panels - 1)) / panels
    title = {"text": f"attnlab verify: {report.summary()}"}
    data, shapes = [], []
    layout = {"title": title, "height": 360 * panels, "showlegend": False, "shapes": shapes}
    for i, name in enumerate(names):
        t = report.tensors[name]
        cu = t.rows_cu if t.rows_cu is not None else report.cu_q  # a cache's own rows too
        top = 1.0 - 2 * i * (height + gap)
        heat, bars = _axis(2 * i + 1), _axis(2 * i + 2)
        data.append(_heat_trace(t, heat, {"len": height, "y": top - height / 2}))
        data.append(_tile_trace(t, cu, tile, bars))
        rows = "key row (packed)" if name in ("dk", "dv") else "query row (packed)"
        for axis, lo in ((heat, top - height), (bars, top - 2 * height - gap)):
            layout[f"xaxis{axis}"] = {
                "domain": [0, 0.92],
                "anchor": f"y{axis}",
                "range": [0, int(cu[-1])],
                "title": {"text": rows},
            }
            layout[f"yaxis{axis}"] = {"domain": [max(lo, 0), max(lo + height, 0)],
                                      "anchor": f"x{axis}"}  # fmt: skip
        layout[f"yaxis{heat}"]["title"] = {"text": f"{name}: head"}
        layout[f"yaxis{bars}"].update(
            type="log", title={"text": f"{name}: max error per {tile}-row tile"}
        )
        tol = (t.tolerance, t.tolerance)
        shapes.append(_line(f"x{bars} domain", f"y{bars}", (0, 1), tol, "#cf222e", "dash"))
        for edge in cu[1:-1]:  # where one sequence (batch element) ends and the next begins
            for axis in (heat, bars):
                x = (int(edge), int(edge))
                shapes.append(_line(f"x{axis}", f"y{axis} domain", x, (0, 1), "#57606a", "dot"))
    for i, name in enumerate(blocks):  # below the tensors: a failed case's block summary
        panel = 2 * len(names) + i
        top = 1.0 - panel * (height + gap)
        axis = _axis(panel + 1)
        data.append(_block_trace(name, blocks[name], axis, {"len": height, "y": top - height / 2}))
        layout[f"xaxis{axis}"] = {"domain": [0, 0.92], "anchor": f"y{axis}",
                                  "title": {"text": f"first {blocks[name]['rows']} row of the block"}}  # fmt: skip
        layout[f"yaxis{axis}"] = {"domain": [max(top - height, 0), max(top, 0)],
                                  "anchor": f"x{axis}", "title": {"text": f"{name}: head"}}  # fmt: skip
    return {"data": data, "layout": layout}


def _block_trace(name: str, summary: dict, axis: str, colorbar: dict) -> dict:
    """The per-head x block summary: log10 of error / tolerance, above 0 failing."""
    ratio = summary["ratio"]  # (heads, blocks)
    starts = (np.arange(ratio.shape[1]) * summary["block"]).tolist()
    z = np.log10(np.clip(ratio, _FLOOR, _CEIL))
    return {
        "type": "heatmap",
        "x": starts,
        "y": list(range(ratio.shape[0])),
        "z": z.tolist(),
        "customdata": np.where(np.isfinite(ratio), ratio, _CEIL).tolist(),
        "colorscale": "RdBu",
        "reversescale": True,
        "zmid": 0.0,
        "colorbar": {"title": {"text": f"{name}: log10 error / tolerance"}, **colorbar},
        "hovertemplate": (
            f"head %{{y}}, {summary['rows']} rows from %{{x}}: error / tolerance "
            "%{customdata:.3g}<extra></extra>"
        ),
        "xaxis": f"x{axis}",
        "yaxis": f"y{axis}",
    }


def write_plot(report, path, *, force: bool = False, tile: int = DEFAULT_TILE) -> Path:
    """Write the figure as an offline HTML page (plotly.js embedded) at ``path``, atomically.

    The page is written beside ``path`` under a temporary name and moved into place, so a
    reader never sees half a page. An existing file is kept unless ``force``.
    """
    import plotly.io  # here: only a plot pays for importing plotly

    path = Path(path)
    if path.exists() and not force:
        raise AttnlabError(
            f"plot: {str(path)!r} already exists; pass force=True (--force) to overwrite it"
        )
    try:  # a temporary name mkstemp chose: a symlink planted in the folder is never followed
        write_atomic(path, lambda out: plotly.io.write_html(figure(report, tile), out,
                     include_plotlyjs=True, full_html=True), force=force, text=True)  # fmt: skip
    except FileExistsError:
        raise AttnlabError(
            f"plot: {str(path)!r} already exists; pass force=True (--force) to overwrite it"
        ) from None
    except OSError as exc:
        raise AttnlabError(f"plot: cannot write {str(path)!r} ({exc.strerror or exc})") from None
    return path
