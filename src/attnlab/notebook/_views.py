"""What each widget shows, computed in the kernel: plain data for the front end, and the same
data as static HTML for front ends with no widget manager (an HTML export, a bare viewer).

Every number comes from the explorer's figure builders (``attnlab.figures``), which call the
core; nothing here re-derives attention.
"""

from __future__ import annotations

from html import escape

from attnlab.core.numbers import format_number

__all__ = ["html_of", "stepper_view", "with_text"]


def with_text(table: dict) -> dict:
    """``table`` with ``text``: each value written by ``format_number``, the one rule the CLI and
    the page follow (a blocked pair as -inf, no value as a dash), so widgets.js only draws it."""
    return table | {"text": [[format_number(x) for x in row] for row in table["values"]]}


def stepper_view(figure: dict, step: int) -> dict:
    """The tables of step ``step`` (counted from 1) of the stepper figure: inputs, then result."""
    steps = figure["steps"]
    s = steps[step - 1]
    names = list(s["inputs"]) + ([s["result"]] if s["result"] else [])
    return {
        "kind": "tables",
        "title": f"Step {step} of {len(steps)}: {s['title']}",
        "formula": s["formula"],
        "explain": s["explain"],
        "tables": [with_text(figure["tables"][name]) for name in names],
        "notes": [
            f"query {i + 1}: {why}" for i, why in enumerate(figure["row_errors"]) if why is not None
        ],
    }


def _table_html(table: dict) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table["cols"])
    body = "".join(
        f"<tr><th>{escape(r)}</th>" + "".join(f"<td>{escape(x)}</td>" for x in row) + "</tr>"
        for r, row in zip(table["rows"], table["text"], strict=True)
    )
    return (
        f"<table class='attnlab-table'><caption>{escape(table['label'])}</caption>"
        f"<thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def html_of(view: dict) -> str:
    """A view as static HTML: what an HTML export shows where no widget can run."""
    parts = [f"<div class='attnlab-widget'><h4>{escape(view['title'])}</h4>"]
    if view.get("formula"):
        parts.append(f"<p><code>{escape(view['formula'])}</code></p>")
    if view.get("explain"):
        parts.append(f"<p>{escape(view['explain'])}</p>")
    for line in view.get("lines", []):
        parts.append(f"<p>{escape(line)}</p>")
    parts += [_table_html(t) for t in view.get("tables", [])]
    parts += [f"<p><i>{escape(n)}</i></p>" for n in view.get("notes", [])]
    return "".join(parts) + "</div>"
