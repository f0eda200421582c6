"""Rich display in Jupyter: every lab result, exercise, verdict and cost breakdown as HTML.

A lab result shows its table, its summary and its plot; plotly.js comes inline from the
installed plotly package with the first display of the process only, no URL anywhere, and
``import attnlab`` still leaves plotly unloaded. A real browser (Chromium, when present) draws
two results on one page, the second relying on the first's plotly.js, under a RequireJS-like
loader as the classic Notebook has.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest

from attnlab import cost, exercises
from attnlab.labs import LABS, reset_display
from conftest import SMALL_LABS

SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc\s*=", re.IGNORECASE)


@pytest.fixture(scope="module")
def plotly_js() -> str:
    offline = pytest.importorskip("plotly.offline")
    return offline.get_plotlyjs()


@pytest.fixture(scope="module")
def results():
    return {name: LABS[name](**SMALL_LABS[name]) for name in LABS}


def _without_plotly(html: str, plotly_js: str) -> str:
    return html.replace(plotly_js, "")


def test_every_lab_is_covered():
    assert set(SMALL_LABS) == set(LABS)


@pytest.mark.parametrize("name", list(SMALL_LABS))
def test_first_display_has_table_summary_and_inline_plotly(results, plotly_js, name):
    reset_display()  # as in a fresh kernel: this display is the first
    result = results[name]
    html = result._repr_html_()
    assert "<table>" in html and "</table>" in html
    for title in LABS[name].titles(result.table()[0]):
        assert f"<th>{escape(title)}</th>" in html
    for line in result.summary():
        assert escape(line) in html
    assert html.count(plotly_js) == 1  # plotly.js, inline, from the installed package
    assert "Plotly.newPlot" in html
    assert not SCRIPT_SRC.search(html)  # no script is fetched from anywhere
    rest = _without_plotly(html, plotly_js)
    assert "http://" not in rest and "https://" not in rest


def test_later_displays_do_not_embed_plotly_again(results, plotly_js):
    reset_display()
    first = results["variance"]._repr_html_()
    second = results["proof"]._repr_html_()
    third = results["variance"]._repr_html_()
    assert plotly_js in first
    assert plotly_js not in second and plotly_js not in third
    assert "window.Plotly" in second and len(second) < 100_000
    # Each plot draws into its own element.
    ids = [re.search(r'id="(attnlab-plot-[0-9a-f]+)"', h).group(1) for h in (first, second, third)]
    assert len(set(ids)) == 3


def test_the_test_above_can_fail(results, plotly_js):
    # Without the once-only rule every display would carry plotly.js: reset shows the difference.
    reset_display()
    results["variance"]._repr_html_()
    reset_display()
    assert plotly_js in results["proof"]._repr_html_()


def test_the_plot_is_the_specs_plot_as_a_plotly_figure(results):
    from attnlab.labs._plotly import lab_figure

    reset_display()
    results["variance"]._repr_html_()  # plotly.js goes with this one
    html = results["gradient"]._repr_html_()
    drawn = re.search(r"var figure = (\{.*\}), tries = 0;", html).group(1)
    assert json.loads(drawn.replace("<\\/", "</")) == lab_figure(results["gradient"])


@pytest.mark.parametrize("name", list(SMALL_LABS))
def test_each_labs_figure_is_one_plotly_accepts(results, name):
    go = pytest.importorskip("plotly.graph_objects")
    from attnlab.labs._plotly import lab_figure

    go.Figure(lab_figure(results[name]))  # raises on a property plotly lacks


def test_plain_text_display_is_unchanged(results):
    r = results["proof"]
    assert repr(r).startswith("ProofResult(d_k=16, draws=2000")
    # In IPython the result displays itself (table, then plot): a terminal shows its repr.
    shell = pytest.importorskip("IPython.core.interactiveshell").InteractiveShell.instance()
    from IPython.display import display
    from IPython.utils.capture import capture_output

    assert shell is not None
    with capture_output() as shown:
        display(r)
    table = shown.outputs[0].data
    assert table["text/plain"].startswith("ProofResult(") and "<table>" in table["text/html"]


def test_exercises_and_verdicts_render_as_tables():
    ex = exercises.get(2)
    html = ex._repr_html_()
    assert "<table>" in html and escape(ex.question) in html and "<details>" in html
    right, wrong = exercises.check(5, "8192"), exercises.check(5, "8000")
    assert "right" in right._repr_html_() and "wrong" in wrong._repr_html_()
    assert escape(wrong.message) in wrong._repr_html_()
    written = exercises.check(4, "anything")._repr_html_()
    assert "compare with the solution" in written
    for h in (html, right._repr_html_(), written):
        assert "<script" not in h and "http" not in h


def test_the_cost_breakdown_renders_its_terms_summary_and_bar():
    b = cost.breakdown(1024, 512)
    html = b._repr_html_()
    assert "<table>" in html and f"{b.total:,}" in html and f"{b.scores:,}" in html
    for line in b.summary():
        assert escape(line) in html
    assert "50.0%" in b.summary()[0]  # N = 2·d_model / 2: N / (N + 2d) = 1/2
    assert html.count("width:") >= 4  # one segment of the bar per term
    assert "<script" not in html and "http" not in html


def test_import_attnlab_does_not_import_plotly_until_a_result_is_displayed():
    code = (
        "import sys, attnlab, attnlab.labs, attnlab.exercises;"
        "assert 'plotly' not in sys.modules;"
        "r = attnlab.labs.proof(d_k=4, draws=10); repr(r);"
        "attnlab.exercises.get(1)._repr_html_(); attnlab.cost.breakdown(8, 4)._repr_html_();"
        "assert 'plotly' not in sys.modules;"
        "r._repr_html_(); assert 'plotly' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)  # killed at 120 s


# -- in a browser ------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
# What the classic Notebook's RequireJS leaves on the page: an AMD define.
AMD = "<script>window.define = function () {}; window.define.amd = {};</script>"


def test_two_results_draw_in_a_browser_offline(results, tmp_path):
    from conftest import require_or_skip

    api = require_or_skip("playwright.sync_api", "ATTNLAB_REQUIRE_BROWSER", "it drives Chromium")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Debian's Chromium is not at {CHROMIUM}")
    reset_display()
    body = results["variance"]._repr_html_() + results["gradient"]._repr_html_()
    page_file = tmp_path / "notebook.html"
    page_file.write_text(f"<!doctype html><html><body>{AMD}{body}</body></html>")
    with api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            fetched = []
            page.route("**/*", lambda route: (fetched.append(route.request.url),
                                              route.continue_() if route.request.url.startswith(
                                                  "file:") else route.abort()))  # fmt: skip
            page.goto(page_file.as_uri())
            page.wait_for_function(
                "document.querySelectorAll('.main-svg').length >= 2", timeout=20_000
            )
            assert page.evaluate("typeof window.Plotly.newPlot") == "function"
            for div in re.findall(r'id="(attnlab-plot-[0-9a-f]+)"', body):  # each drew in its place
                assert page.locator(f"#{div} .main-svg").count() >= 1, div
            assert all(url.startswith("file:") for url in fetched), fetched
        finally:
            browser.close()
