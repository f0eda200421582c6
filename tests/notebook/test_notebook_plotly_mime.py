"""Lab plots in Jupyter: each display's plot div has an id no other kernel's display has (two
notebooks open in one JupyterLab page share one document), and a lab result displays its plot as
Plotly's notebook mimetype, so an executed lab notebook holds the figures' JSON, not plotly.js:
it stays under 1.5 MB, and the saved outputs (which JupyterLab draws again on reload) are
complete figures. Notebook 11 draws one attention map per training checkpoint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnlab as al
from attnlab.labs import LABS
from attnlab.labs._display import plotly_figure
from attnlab.transformer import checkpoints

NOTEBOOKS = Path(__file__).resolve().parents[2] / "docs" / "notebooks"
MIME = "application/vnd.plotly.v1+json"
LIMIT = 1_500_000  # bytes of an executed lab notebook
FIRST_DISPLAY = """
import re, attnlab as al
html = al.labs.permutation(seed=0, d_model=8)._repr_html_()
print(re.search(r'id="(attnlab-plot-[^"]+)"', html)[1])
"""


def test_two_kernels_name_their_first_plots_apart():
    ids = [
        subprocess.run([sys.executable, "-c", FIRST_DISPLAY], capture_output=True, text=True,
                       check=True, timeout=120).stdout.strip()
        for _ in range(2)
    ]  # fmt: skip
    assert all(i.startswith("attnlab-plot-") for i in ids), ids
    assert ids[0] != ids[1], ids


@pytest.fixture(autouse=True)
def _kernel_imports_this_attnlab(monkeypatch):
    """The kernel runs in tmp_path: give it this checkout's attnlab, not whichever is installed."""
    root = str(Path(al.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))


def _execute(source_cells: list[str] | None = None, path: Path | None = None, tmp_path=None):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if path is not None:
        book = nbformat.read(str(path), as_version=4)
    else:
        book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in source_cells])
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": tmp_path}}).execute()  # fmt: skip
    return book, len(nbformat.writes(book).encode())


def _outputs(book, mime: str) -> list:
    return [out["data"][mime] for cell in book.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if mime in out.get("data", {})]  # fmt: skip


def test_a_lab_result_shows_its_plot_as_plotly_json(tmp_path):
    book, size = _execute(["import attnlab as al\nal.labs.permutation(seed=0, d_model=8)"],
                          tmp_path=tmp_path)  # fmt: skip
    (figure,) = _outputs(book, MIME)
    expected = plotly_figure(LABS["permutation"].figure(al.labs.permutation(seed=0, d_model=8)))
    assert figure == json.loads(json.dumps(expected))  # the whole figure, data and layout
    (table,) = _outputs(book, "text/html")[:1]
    assert "<table>" in table and "plotly" not in table.lower()
    assert size < 100_000, size  # no plotly.js in the notebook


@pytest.mark.parametrize("name", ["02-variance", "11-training"])
def test_an_executed_lab_notebook_is_small_and_keeps_its_plots(name, tmp_path):
    book, size = _execute(path=NOTEBOOKS / f"{name}.ipynb", tmp_path=tmp_path)
    assert size < LIMIT, size
    figures = _outputs(book, MIME)
    assert figures and all(f["data"] and "layout" in f for f in figures)
    # No output carries plotly.js's bundle.
    text = json.dumps([c.get("outputs", []) for c in book.cells if c.cell_type == "code"])
    assert not re.search(r"plotly\.js v\d|Plotly\.newPlot", text)
    if name == "11-training":
        maps = [t for f in figures for t in f["data"] if t.get("type") == "heatmap"]
        assert len(maps) == len(checkpoints("induction"))  # one attention map per checkpoint
        n = len(maps[0]["z"])
        assert all(abs(sum(row) - 1) < 0.01 for m in maps for row in m["z"][:n])  # softmax rows
