"""Jupyter's rich display of attnlab's results: an HTML table, the summary and the plot inline.

``LabResult._repr_html_`` (every lab's result) and the exercises' ``_repr_html_`` call in here;
the plain-text display stays the dataclass's own repr. A lab's plot is its spec's ``LabPlot``
(``LABS[result.lab].figure(result)``) turned into a Plotly figure by ``labs/_plotly.py`` (the
same figure the explorer and ``--plot`` draw) and drawn by plotly.js in the page. Cells are
written by ``core/numbers.py``'s ``format_cell``, as on the terminal and the page.

In Jupyter (IPython calls ``LabResult._ipython_display_``, so ``result_html`` is then not used)
a result is two outputs: the table and summary as HTML, then the plot as Plotly's own notebook
mimetype, ``application/vnd.plotly.v1+json`` (the figure's JSON only), which JupyterLab,
Notebook 7 and VS Code draw with the plotly.js they ship. The saved notebook stays small (no
plotly.js in it), and a reloaded tab draws every plot again from that JSON.

``result_html`` (an HTML page or a frontend without that renderer), offline everywhere:
- plotly.js comes from the installed plotly package, never a CDN. It is large (~5 MB), so the
  first display of a kernel carries it inline, once, as a <script> that defines the page's
  global ``Plotly``; every later display only calls ``Plotly.newPlot`` (waiting a moment for
  the global if its output is drawn first). ``reset()`` makes the next display carry it again,
  for a notebook whose first output was cleared.
- plotly.js is wrapped so that it sets ``window.Plotly`` whatever module loader the page runs
  (the classic Notebook's RequireJS would otherwise take it as an AMD module).
- plotly is imported here, inside the functions, never on ``import attnlab``.

At the top this module imports only numpy-free core helpers: ``labs._common`` reaches it from
inside a method, and the lab names come from the ``attnlab.labs`` package when a result is drawn.
"""

from __future__ import annotations

import json
import uuid
from html import escape

from attnlab.core.numbers import format_cell
from attnlab.labs._plotly import plotly_figure

__all__ = ["exercise_html", "plot_bundle", "reset", "result_html", "show", "verdict_html"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
_embedded = False  # plotly.js already sent to this kernel's page


def _plot_id() -> str:
    """A div id no other display has: two kernels' outputs can share one JupyterLab page, and a
    per-kernel counter would give both "attnlab-plot-0"."""
    return f"attnlab-plot-{uuid.uuid4().hex[:16]}"


def reset() -> None:
    """Make the next display carry plotly.js again (after its first output was cleared)."""
    global _embedded
    _embedded = False


# -- lab results --------------------------------------------------------------------------------


def _text_html(spec, result) -> str:
    """Heading, table (the spec's column titles) and summary of a lab result, as HTML."""
    from attnlab.labs import jsonable  # the package, loaded by the time a result exists

    columns, rows = result.table()
    titles = spec.titles(columns) if spec is not None else columns
    parts = [f"<p><strong>{escape(_heading(spec, result))}</strong></p>",
             _table(titles, jsonable(rows))]  # fmt: skip
    return "".join(parts + [f"<p>{escape(line)}</p>" for line in result.summary()])


def result_html(result) -> str:
    """A lab result as HTML: heading, table (the spec's column titles), summary, plot."""
    from attnlab.labs import LABS

    spec = LABS.get(result.lab)
    plot = _plot_html(plotly_figure(spec.figure(result))) if spec is not None else ""
    return f'<div class="attnlab-result">{_text_html(spec, result)}{plot}</div>'


def plot_bundle(figure: dict) -> dict:
    """One output's mime bundle for a Plotly figure (``{"data", "layout"}``): Plotly's notebook
    mimetype, with a line of HTML and text for a frontend that has no renderer for it."""
    note = "A Plotly figure: JupyterLab, Notebook 7 and VS Code draw it."
    return {PLOTLY_MIME: json.loads(json.dumps(figure, allow_nan=False)), "text/html":
            f"<p><em>{escape(note)}</em></p>", "text/plain": note}  # fmt: skip


def show(result) -> None:
    """Display a lab result in Jupyter: its table and summary, then its plot (Plotly's mimetype)."""
    from IPython.display import display

    from attnlab.labs import LABS

    spec = LABS.get(result.lab)
    html = f'<div class="attnlab-result">{_text_html(spec, result)}</div>'
    display({"text/html": html, "text/plain": repr(result)}, raw=True)  # a terminal: the repr
    if spec is not None:
        display(plot_bundle(plotly_figure(spec.figure(result))), raw=True)


def _heading(spec, result) -> str:
    if spec is None:
        return result.lab
    # The heading names the run's parameters; the result carries them (defaults otherwise).
    return spec.heading.format(**{p.name: getattr(result, p.name, p.default) for p in spec.params})


def _cell(x) -> str:
    return escape(format_cell(x))


def _table(titles: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(t)}</th>" for t in titles)
    body = "".join("<tr>" + "".join(f"<td>{_cell(x)}</td>" for x in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plotly_script() -> str:
    """plotly.js as an inline <script>, the first time in this kernel; later, nothing."""
    global _embedded
    if _embedded:
        return ""
    import plotly  # here: only a rich display pays for importing plotly
    from plotly.offline import get_plotlyjs

    _embedded = True
    # Inside this function ``module``, ``exports`` and ``define`` are undefined, so the bundle
    # takes its browser branch and sets window.Plotly under any module loader.
    return (
        f'<script type="text/javascript">/* plotly.js from the installed plotly {plotly.__version__}'
        f" */\n(function (module, exports, define) {{\n{get_plotlyjs()}\n}}).call(window);</script>"
    )


def _plot_html(figure: dict) -> str:
    """A div and the script that draws ``figure`` into it once ``window.Plotly`` exists."""
    div = _plot_id()
    data = json.dumps(figure, allow_nan=False).replace("</", "<\\/")  # safe inside <script>
    missing = (
        "The plot needs plotly.js, which the first attnlab display of this kernel carried; "
        "run attnlab.labs.reset_display() and display this result again."
    )
    return (
        _plotly_script()
        + f'<div id="{div}" style="width:100%;max-width:900px;height:440px;"></div>'
        + '<script type="text/javascript">(function () {'
        + f"var figure = {data}, tries = 0;"
        + "function draw() {"
        + f'var el = document.getElementById("{div}");'
        + "if (el && window.Plotly) {"
        + "window.Plotly.newPlot(el, figure.data, figure.layout,"
        + " {responsive: true, displaylogo: false}); return; }"
        + "if (++tries < 100) { setTimeout(draw, 100); return; }"
        + f"if (el) {{ el.style.height = 'auto'; el.textContent = {json.dumps(missing)}; }}"
        + "}"
        + "draw(); })();</script>"
    )


# -- exercises ----------------------------------------------------------------------------------


def _fields_table(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f"<table>{rows}</table>"


def _solution(text: str) -> str:
    return f"<details><summary>worked solution</summary><pre>{escape(text)}</pre></details>"


def exercise_html(ex) -> str:
    """An exercise: number, kind, question, how it is graded; the solution folded away."""
    graded = (
        f"numeric: {_cell(ex.answer)} ± {_cell(ex.tolerance)}"
        if ex.answer is not None
        else "written: compare with the worked solution"
    )
    pairs = [("exercise", str(ex.number)), ("kind", escape(ex.kind)),
             ("question", escape(ex.question)), ("answer", escape(graded))]  # fmt: skip
    return f'<div class="attnlab-exercise">{_fields_table(pairs)}{_solution(ex.solution)}</div>'


def verdict_html(verdict) -> str:
    """A graded answer: right (green), wrong (red) or written (compare yourself)."""
    word, colour = {True: ("right", "green"), False: ("wrong", "#c00"),
                    None: ("written: compare with the solution", "#a60")}[verdict.correct]  # fmt: skip
    pairs = [("exercise", str(verdict.number)),
             ("verdict", f'<strong style="color:{colour}">{escape(word)}</strong>'),
             ("message", escape(verdict.message))]  # fmt: skip
    if verdict.expected is not None:
        pairs.append(("expected", f"{_cell(verdict.expected)} ± {_cell(verdict.tolerance)}"))
    return f'<div class="attnlab-verdict">{_fields_table(pairs)}{_solution(verdict.solution)}</div>'
