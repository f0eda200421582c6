"""What to plot for each lab of ``attnlab.labs``: the lab spec's own plot, and it as Plotly data.

Each lab declares one plot builder in its spec (``attnlab.labs.LABS[name].plot``); it returns a
``LabPlot`` (x values, named y series, axis titles) read from the lab's result, nothing
recomputed. The explorer's page draws that data with plotly.js; ``attnlab lab NAME --plot
FILE.html`` hands ``plotly_figure(plot)``, the same data as a Plotly figure dict, to plotly's
HTML writer. Nothing here imports plotly.
"""

from __future__ import annotations

from attnlab.labs import LABS, LabPlot, Series

__all__ = ["LabPlot", "Series", "lab_plot", "plotly_figure"]


def lab_plot(result) -> LabPlot:
    """The plot for a lab result (its ``lab`` attribute names the spec), with its summary."""
    return LABS[result.lab].figure(result)


def plotly_figure(plot: LabPlot) -> dict:
    """A Plotly figure ``{"data": [...], "layout": {...}}`` drawing ``plot``, JSON-ready.

    The page's labs.js draws a plot the same way: bars or lines and markers, one trace per
    series, ± error bars where the lab measured them, references dashed, log axes as asked.
    """
    data = plot.as_dict()
    traces = []
    for s in data["series"]:
        # A log axis cannot show 0 or less: such points are left out, not drawn at the floor.
        y = [None if plot.log_y and v is not None and v <= 0 else v for v in s["y"]]
        trace = {"type": "bar" if plot.kind == "bar" else "scatter", "name": s["name"],
                 "x": data["x"], "y": y}  # fmt: skip
        if plot.kind != "bar":
            trace["mode"] = "lines+markers"
        if s["error"] is not None:
            errors = [0 if e is None else e for e in s["error"]]
            trace["error_y"] = {"type": "data", "array": errors, "visible": True}
        if s["dash"]:
            trace["line"] = {"dash": "dash"}
        traces.append(trace)
    axis = {True: "log", False: "linear"}
    words = "<br>".join(data["words"][:1])
    layout = {
        "title": {"text": f"{data['title']}<br><sup>{words}</sup>" if words else data["title"]},
        "xaxis": {"title": {"text": data["x_label"]},
                  "type": "category" if plot.kind == "bar" else axis[plot.log_x]},
        "yaxis": {"title": {"text": data["y_label"]}, "type": axis[plot.log_y]},
        "legend": {"orientation": "h", "y": -0.2},
    }  # fmt: skip
    return {"data": traces, "layout": layout}
