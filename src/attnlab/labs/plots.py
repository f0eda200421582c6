"""Plotly figure specs for the labs, as plain dicts: ``{"data": [...], "layout": {...}}``.

Figures are data (STYLE 12): nothing here imports plotly. The CLI's ``--plot FILE.html`` hands
a spec to ``plotly.io.write_html``; a web page can pass the same dict to ``Plotly.newPlot``.
"""

from __future__ import annotations

import itertools

from attnlab.labs._common import LabResult

__all__ = ["figure"]

# Line at a fixed y across one panel (or x, with the refs swapped).
_DASH = {"dash": "dash", "width": 1, "color": "#888"}


def _panels(titles: list[str], gap: float = 0.08) -> dict:
    """A layout with len(titles) panels side by side, each titled above."""
    width = (1 - gap * (len(titles) - 1)) / len(titles)
    layout: dict = {"annotations": [], "shapes": [], "margin": {"t": 110}}
    for i, title in enumerate(titles):
        s = "" if i == 0 else str(i + 1)
        lo = i * (width + gap)
        layout[f"xaxis{s}"] = {"domain": [lo, lo + width], "anchor": f"y{s}"}
        layout[f"yaxis{s}"] = {"anchor": f"x{s}"}
        layout["annotations"].append(
            {"text": f"<b>{title}</b>", "x": lo + width / 2, "y": 1.08, "xref": "paper",
             "yref": "paper", "showarrow": False, "xanchor": "center"}
        )  # fmt: skip
    return layout


def _on(panel: int, trace: dict) -> dict:
    s = "" if panel == 1 else str(panel)
    return {**trace, "xaxis": f"x{s}", "yaxis": f"y{s}"}


def _hline(panel: int, y: float) -> dict:
    s = "" if panel == 1 else str(panel)
    return {"type": "line", "xref": f"x{s} domain", "x0": 0, "x1": 1, "yref": f"y{s}",
            "y0": y, "y1": y, "line": _DASH}  # fmt: skip


def _vline(panel: int, x: float) -> dict:
    s = "" if panel == 1 else str(panel)
    return {"type": "line", "yref": f"y{s} domain", "y0": 0, "y1": 1, "xref": f"x{s}",
            "x0": x, "x1": x, "line": _DASH}  # fmt: skip


def _line(name: str, x, y, **extra) -> dict:
    return {"type": "scatter", "mode": "lines+markers", "name": name, "x": list(x), "y": list(y),
            **extra}  # fmt: skip


def _variance(r) -> dict:
    widths = [row.width for row in r.rows]
    layout = _panels(["Var(q·k) / d_k (±2 SE)", "Var(q·k) against d_k"])
    ratio = [row.var_ratio for row in r.rows]
    err = {"type": "data", "array": [2 * row.var_ratio_se for row in r.rows]}
    data = [
        _on(1, _line("Var(q·k)/d_k", widths, ratio, error_y=err)),
        _on(1, _line("Var(q·k/√d_k)", widths, [row.scaled_var for row in r.rows])),
        _on(2, _line("Var(q·k)", widths, [row.raw_var for row in r.rows])),
        _on(2, _line("d_k (§6.3)", widths, widths, line={"dash": "dot"})),
    ]
    layout["shapes"].append(_hline(1, 1.0))
    for axis in ("xaxis", "xaxis2", "yaxis2"):
        layout[axis]["type"] = "log"
    for axis in ("xaxis", "xaxis2"):
        layout[axis].update(title="d_k", tickvals=widths)
    return {"data": data, "layout": layout}


def _saturation(r) -> dict:
    layout = _panels([f"Largest softmax weight p_max, d_k = {r.d_k}, {r.keys} keys"])
    bins = {"start": 0.0, "end": 1.0, "size": 0.02}
    data = [
        {"type": "histogram", "name": name, "x": list(values), "xbins": bins, "opacity": 0.6}
        for name, values in (("unscaled", r.unscaled_p_max), ("scaled", r.scaled_p_max))
    ]
    layout.update(barmode="overlay")
    layout["xaxis"]["title"] = "p_max"
    layout["yaxis"]["title"] = "trials"
    layout["shapes"].append(_vline(1, r.threshold))
    return {"data": data, "layout": layout}


def _centres(edges) -> list[float]:
    return [(a + b) / 2 for a, b in itertools.pairwise(edges)]


def _sweep(r) -> dict:
    widths = [row.width for row in r.rows]
    layout = _panels(["Saturated share", "Unscaled scores q·k", "Scaled scores q·k/√d_k"])
    data = [
        _on(1, _line("unscaled", widths, [row.unscaled_share for row in r.rows])),
        _on(1, _line("scaled", widths, [row.scaled_share for row in r.rows])),
    ]
    for panel, attr in ((2, "unscaled_histogram"), (3, "scaled_histogram")):
        for row in r.rows:
            h = getattr(row, attr)
            data.append(_on(panel, {"type": "scatter", "mode": "lines", "name": f"d_k={h.d_k}",
                                    "x": _centres(h.edges), "y": list(h.counts),
                                    "line": {"shape": "hvh"}, "legendgroup": attr}))  # fmt: skip
    layout["xaxis"].update(type="log", title="d_k", tickvals=widths)
    layout["xaxis2"]["title"] = layout["xaxis3"]["title"] = "score"
    return {"data": data, "layout": layout}


def _permutation(r) -> dict:
    titles = ["sentence", "reordered", "sentence + positions", "reordered + positions"]
    layout = _panels(titles, gap=0.06)
    tables = (r.outputs, r.shuffled_outputs, r.outputs_with_positions,
              r.shuffled_outputs_with_positions)  # fmt: skip
    data = []
    for panel, (table, tokens) in enumerate(
        zip(tables, (r.tokens, r.shuffled_tokens) * 2, strict=True), start=1
    ):
        labels = [f"{i + 1} {t}" for i, t in enumerate(tokens)]  # unique even if words repeat
        data.append(_on(panel, {"type": "heatmap", "z": [list(row) for row in table],
                                "y": labels, "coloraxis": "coloraxis"}))  # fmt: skip
        layout["yaxis" + ("" if panel == 1 else str(panel))]["autorange"] = "reversed"
    layout["coloraxis"] = {"colorscale": "RdBu"}
    return {"data": data, "layout": layout}


def _cost(r) -> dict:
    n = [row.n for row in r.rows]
    layout = _panels([f"Seconds, d_model = {r.d_model}, {r.heads} heads", "Share in the N² part"])
    data = [
        _on(1, _line(name, n, [getattr(row, attr) for row in r.rows]))
        for name, attr in (("projections", "projection_s"), ("attention core", "core_s"),
                           ("QKᵀ and AV only", "matmul_s"), ("total", "total_s"))
    ]  # fmt: skip
    data += [
        _on(2, _line(name, n, [getattr(row, attr) for row in r.rows]))
        for name, attr in (("measured (core)", "measured_share"),
                           ("measured (products)", "matmul_share"), ("model", "model_share"))
    ]  # fmt: skip
    for axis in ("xaxis", "yaxis", "xaxis2"):
        layout[axis].update(type="log")
    for axis in ("xaxis", "xaxis2"):
        layout[axis].update(title="N", tickvals=n)
    layout["shapes"] += [_hline(2, 0.5), _vline(2, r.model_crossover)]
    return {"data": data, "layout": layout}


_BUILDERS = {
    "variance": _variance,
    "saturation": _saturation,
    "sweep": _sweep,
    "permutation": _permutation,
    "cost": _cost,
}


def figure(result: LabResult) -> dict:
    """The Plotly spec for any lab's result (keyed by ``result.lab``)."""
    spec = _BUILDERS[result.lab](result)
    spec["layout"].setdefault("title", {"text": " ".join(result.summary()[:1])})
    return spec
