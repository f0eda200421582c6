"""A lab's plot as a Plotly figure: the one drawing of it, wherever it is drawn.

``plotly_figure(plot)`` turns a ``LabPlot`` (the spec's plot of a result, ``labs/_spec.py``) into
``{"data": [...], "layout": {...}}``. The explorer's lab route returns exactly this and the page
hands it to ``Plotly.react``; ``attnlab lab NAME --plot FILE.html`` gives it to plotly's HTML
writer; a result's rich display in Jupyter draws it too (``labs/_display.py``). So markers,
dashes, ticks, height and legend are decided here, once.

Plain data only: plotly is never imported here, and nothing at the top imports attnlab, so
``LabResult`` reaches it without loading the labs package.
"""

from __future__ import annotations

__all__ = ["HEIGHT", "lab_figure", "plotly_figure"]

HEIGHT = 400  # pixels: room for the title, the plot and a legend below it
# Each series its own marker and dash, later ones drawn thinner and smaller on top, so one that
# coincides with another still shows.
_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x", "cross")
_DASHES = ("solid", "dot", "dash", "dashdot", "longdash", "longdashdot")


def plotly_figure(plot) -> dict:
    """A Plotly figure drawing a ``LabPlot``, JSON-ready: bars, or lines and markers, one trace
    per series, ± error bars where the lab measured them, references dashed, log axes as asked
    with ticks at the values measured."""
    data = plot.as_dict()
    traces = [_trace(plot, data["x"], s, n) for n, s in enumerate(data["series"])]
    words = data["words"][:1]
    layout = {
        "title": {"text": f"{data['title']}<br><sup>{words[0]}</sup>" if words else data["title"]},
        "xaxis": {"title": {"text": data["x_label"]}, **_x_axis(plot, data["x"])},
        "yaxis": {"title": {"text": data["y_label"]}, "type": "log" if plot.log_y else "linear"},
        "legend": {"orientation": "h", "y": -0.25},
        "height": HEIGHT,
    }
    return {"data": traces, "layout": layout}


def lab_figure(result) -> dict:
    """The Plotly figure of a lab result: its spec's plot (``LABS[result.lab].figure``)."""
    from attnlab.labs import LABS  # the package, loaded by the time a result exists

    return plotly_figure(LABS[result.lab].figure(result))


def _trace(plot, x: list, series: dict, n: int) -> dict:
    # A log axis cannot show 0 or less: such points are left out, not drawn at the floor.
    y = [None if plot.log_y and v is not None and v <= 0 else v for v in series["y"]]
    trace = {"type": "bar" if plot.kind == "bar" else "scatter", "name": series["name"],
             "x": x, "y": y}  # fmt: skip
    if plot.kind != "bar":
        trace["mode"] = "lines+markers"
        trace["marker"] = {"symbol": _SYMBOLS[n % len(_SYMBOLS)], "size": max(5, 11 - 2 * n)}
        dash = "dash" if series["dash"] else _DASHES[n % len(_DASHES)]
        trace["line"] = {"dash": dash, "width": max(1.5, 3 - 0.5 * n)}
    if series["error"] is not None:
        errors = [0 if e is None else e for e in series["error"]]
        trace["error_y"] = {"type": "data", "array": errors, "visible": True}
    return trace


def _x_axis(plot, x: list) -> dict:
    if plot.kind == "bar":
        return {"type": "category"}
    if not plot.log_x:
        return {"type": "linear"}
    # Log axes name the numbers measured (32, 64, 128, 256), not Plotly's 2-3-5 minor ticks.
    ticks = [v for v in x if isinstance(v, int | float) and v > 0]
    return {"type": "log", "tickvals": ticks, "ticktext": [f"{v:g}" for v in ticks]}
