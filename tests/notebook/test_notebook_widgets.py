"""The figures as notebook widgets: state in traitlets, numbers from the figure builders, and a
static fallback that an HTML export shows in a real browser with the network blocked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("anywidget")

import anywidget
import traitlets

import attnlab as al
import attnlab.notebook as anb
from attnlab.figures.histogram import build_histogram
from conftest import require_or_skip
from tolerances import CHAPTER, F64

CHROMIUM = "/usr/bin/chromium"


def _table(view, name_or_label):
    return next(t for t in view["tables"] if name_or_label in (t.get("name"), t["label"]))


def test_stepper_is_an_anywidget_whose_step_changes_the_tables_it_sends():
    w = anb.stepper()
    assert isinstance(w, anywidget.AnyWidget)
    assert [t["name"] for t in w.view["tables"]] == ["q", "k", "v"]
    w.step = 5  # softmax: steps count from 1, as the heading does
    assert w.view["title"].startswith("Step 5 of 11")
    weights = np.array(_table(w.view, "weights")["values"], dtype=float)
    np.testing.assert_allclose(weights, [[1.0, 0.0], [0.196, 0.804]], **CHAPTER)
    w.causal = False  # the mask traitlet: token 1 now looks at token 2 too
    weights = np.array(_table(w.view, "weights")["values"], dtype=float)
    np.testing.assert_allclose(weights[0], [0.000003, 0.999997], **CHAPTER)
    # The backward steps follow: step 9 is dS, whose rows add up to 0 (dO all ones).
    w.step = 9
    ds = np.array(_table(w.view, "grad_scores")["values"], dtype=float)
    np.testing.assert_allclose(ds.sum(axis=1), 0, **F64)
    assert ds[1, 1] > 0.0  # key 2 of query 2 (the larger weight) gains
    with pytest.raises(traitlets.TraitError, match="step"):
        w.step = 12


def test_stepper_takes_inputs_and_a_bool_mask():
    q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    table = np.array([[True, False, True], [True, True, False], [False, True, True]])
    w = anb.stepper(q, q, q, mask=table)
    w.step = 6
    out = np.array(_table(w.view, "output")["values"], dtype=float)
    np.testing.assert_allclose(out, al.attention(q, q, q, mask=table), **F64)
    with pytest.raises(al.AttnlabError, match="bool table"):
        anb.stepper(q, q, q, mask=np.ones((2, 2), bool))


def test_stepper_takes_an_upstream_gradient_for_its_backward_steps():
    q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    g = np.array([[1.0, -2.0], [0.5, 0.0], [3.0, 1.0]])
    w = anb.stepper(q, q, q, mask="none", grad_output=g)
    w.step = 11  # dK
    _, dk, dv = al.attention_backward(q, q, q, g)
    np.testing.assert_allclose(_table(w.view, "grad_k")["values"], dk, **F64)
    w.step = 7  # dV; a new dO recomputes the view
    w.grad_output = (2 * g).tolist()
    np.testing.assert_allclose(_table(w.view, "grad_v")["values"], 2 * dv, **F64)
    with pytest.raises(al.AttnlabError, match=r"\(N, d_v\) = \(3, 2\)"):
        anb.stepper(q, q, q, grad_output=[[1.0, 2.0]])


def test_histogram_traitlets_recompute_from_the_figure_builder():
    w = anb.histogram(64)
    w.d_k = 256
    fig = build_histogram(256, scaled=False)
    assert w.view["histogram"]["counts"] == fig.counts
    assert f"{fig.std:.3f}" in w.view["lines"][0]
    w.scaled = True
    assert w.view["histogram"]["counts"] == build_histogram(256, scaled=True).counts


def test_permutation_outputs_only_move_without_positions():
    w = anb.permutation()
    base = np.array(_table(w.view, "each word's attention output")["values"])
    w.order = [0, 4, 2, 3, 1]
    moved = np.array(_table(w.view, "each word's attention output")["values"])
    np.testing.assert_allclose(moved, base[[0, 4, 2, 3, 1]], atol=1e-6)
    w.positions = True
    assert "positions on" in w.view["lines"][0]
    change = float(w.view["lines"][0].split(": ")[1].split(" ")[0])
    assert change > 1e-3  # with positions the outputs themselves change
    with pytest.raises(al.AttnlabError, match="words"):
        anb.permutation("one")


def test_multihead_query_it_finds_animal():
    w = anb.multihead(7)
    assert any("→ noun" in line and "'animal'" in line for line in w.view["lines"])
    w.query = 3
    assert "'cross'" in w.view["title"]


def test_static_fallback_has_the_tables_and_no_network_url():
    bundle = anb.stepper()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert "<table" in html and "Queries Q" in html and "http" not in html


@pytest.mark.browser
def test_an_exported_notebook_shows_the_stepper_tables_offline(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    sync_api = require_or_skip(
        "playwright.sync_api", "ATTNLAB_REQUIRE_BROWSER", "the browser tests drive Chromium"
    )
    if not Path(CHROMIUM).exists():
        if os.environ.get("ATTNLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(f"Debian's Chromium is not at {CHROMIUM}")
        pytest.skip("no Chromium")
    book = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )
    book.cells = [
        nbformat.v4.new_code_cell(
            "import attnlab.notebook as anb\nw = anb.stepper()\nw.step = 5\nw"
        )
    ]
    # JupyterLab saves no widget state unless asked to, and without it an export has no live
    # widget to draw: the static fallback is then what a reader sees, offline.
    nbclient.NotebookClient(
        book, timeout=120, kernel_name="python3", store_widget_state=False
    ).execute()
    html, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(book)
    page = tmp_path / "stepper.html"
    page.write_text(html)
    off_machine = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        tab = browser.new_page()

        def guard(route):
            if route.request.url.startswith("file://"):
                return route.continue_()
            off_machine.append(route.request.url)
            return route.abort()

        tab.route("**/*", guard)
        tab.goto(page.as_uri())
        tables = tab.locator("table.attnlab-table")
        assert tables.count() >= 2
        text = tab.locator(".attnlab-widget").first.inner_text()
        browser.close()
    assert "Softmax" in text and "0.8044" in text  # the worked example's weight, shown
    # The export template's own CDN links (require.js, MathJax) were refused, not loaded.
    assert all("attnlab" not in url for url in off_machine)


def test_masked_steps_render_with_the_one_number_rule():
    """A causal step shows its blocked pair as -inf and every value as format_number writes it,
    in the view the front end draws and in the static HTML alike."""
    from attnlab.core.numbers import format_number
    from attnlab.notebook._views import html_of

    w = al.notebook.stepper()
    w.causal = True
    w.step = 4  # the mask added: query 1 may not see key 2
    masked = w.view["tables"][-1]
    assert masked["text"][0][1] == "-inf"
    assert masked["text"] == [[format_number(x) for x in row] for row in masked["values"]]
    assert "<td>-inf</td>" in html_of(w.view)
