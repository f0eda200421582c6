"""A lab's result as the page shows it: its summary, table, plot and claim, built in one place.

The lab route (``web/labs.py``) answers with it, and a training run (``web/runs.py``) keeps it
once done, so the Labs panel draws a lab the same way whether it ran as a request or as a job.
The claim (``LabResult.claim()``) is the chapter's sentence the lab tests with this run's
verdict on it: a training run too short to show its claim says so beside the result.
"""

from __future__ import annotations

from attnlab.labs import LabSpec, jsonable
from attnlab.labs._plotly import plotly_figure

__all__ = ["shown"]


def shown(spec: LabSpec, result) -> dict:
    """{"summary", "table", "plot", "claim"} of ``result``, JSON-ready; claim may be None."""
    columns, rows = result.table()
    claim = result.claim()
    return {
        "summary": list(result.summary()),
        "table": {"columns": columns, "titles": spec.titles(columns), "rows": jsonable(rows)},
        "plot": plotly_figure(spec.figure(result)),
        "claim": None if claim is None else jsonable(claim),
    }
