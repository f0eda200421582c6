"""What to plot for each lab of ``attnlab.labs``: the lab spec's own plot, and it as Plotly data.

Each lab declares one plot builder in its spec (``attnlab.labs.LABS[name].plot``); it returns a
``LabPlot`` (x values, named y series, axis titles) read from the lab's result, nothing
recomputed. The explorer's page draws that data with plotly.js; ``attnlab lab NAME --plot
FILE.html`` hands ``plotly_figure(plot)``, the same data as a Plotly figure dict, to plotly's
HTML writer, and a result's rich display in Jupyter draws the same figure. ``plotly_figure``
lives beside that display (``labs._display``, which ``LabResult`` reaches without importing
this package) and is re-exported here. Nothing here imports plotly.
"""

from __future__ import annotations

from attnlab.labs import LABS, LabPlot, Series
from attnlab.labs._display import plotly_figure

__all__ = ["LabPlot", "Series", "lab_plot", "plotly_figure"]


def lab_plot(result) -> LabPlot:
    """The plot for a lab result (its ``lab`` attribute names the spec), with its summary."""
    return LABS[result.lab].figure(result)
