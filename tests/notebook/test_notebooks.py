"""Every notebook under docs/notebooks runs top to bottom without an error (nbclient), within a
bounded time each, so the notebooks cannot rot while the library changes."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "docs" / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 120  # per cell; the slowest notebook runs in a few seconds here


def test_there_are_notebooks_for_the_labs():
    names = {p.stem for p in NOTEBOOKS}
    for lab in (
        "worked-example",
        "variance",
        "saturation",
        "permutation",
        "cost",
        "multihead",
        "widgets",
    ):
        assert any(lab in name for name in names), f"no notebook for {lab}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_clean(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [
        out
        for cell in book.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    # Every code cell ran, and the notebooks say things in prose too.
    assert all(c.get("execution_count") for c in book.cells if c.cell_type == "code")
    assert any(c.cell_type == "markdown" for c in book.cells)
    if "widgets" in path.stem:
        assert sorted(_widgets_shown(book)) == WIDGETS


WIDGETS = ["HistogramWidget", "MultiHeadWidget", "PermutationWidget", "StepperWidget"]


def _widgets_shown(book) -> list[str]:
    """The class of each live widget the executed notebook displays (one output each)."""
    shown = []
    for cell in book.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                plain = data["text/plain"]
                shown += [name for name in WIDGETS if f".{name} object" in plain]
    return shown


def test_the_widgets_notebook_states_the_steppers_own_limits():
    # Its words said "32 rows of width 16" while the refusal it prints says 256 columns.
    import json

    from attnlab.figures import stepper

    book = json.loads((NOTEBOOKS[0].parent / "10-widgets.ipynb").read_text())
    words = " ".join("".join(c["source"]) for c in book["cells"] if c["cell_type"] == "markdown")
    words = " ".join(words.split())
    assert f"at most {stepper.MAX_TOKENS} rows, each at most {stepper.MAX_WIDTH} wide" in words
