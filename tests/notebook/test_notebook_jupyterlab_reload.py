"""A lab plot survives a reload of the JupyterLab tab: an executed lab notebook, opened in a real
JupyterLab in Debian's Chromium (every request off this machine refused), draws its plot from the
saved output alone, and draws it again after the page reloads, without running a cell. That works
because the output carries the figure as Plotly's notebook mimetype
(``application/vnd.plotly.v1+json``), which JupyterLab's plotly renderer draws from the saved JSON;
beside it, a cell whose output is only an HTML and script blob (what needs a live, trusted page)
shows nothing drawn, before or after the reload. The executed notebook stays under 1.5 MB."""

from __future__ import annotations

import http.cookiejar
import json
import urllib.request

import pytest
from test_notebook_jupyterlab import ARGS, ARTIFACTS, CHROMIUM, Offline, lab, sync_api  # noqa: F401

import attnlab as al
from attnlab.labs import LABS

pytestmark = pytest.mark.browser

MIME = "application/vnd.plotly.v1+json"
LIMIT = 1_500_000  # bytes of the executed notebook
CELLS = [
    "import attnlab as al\nal.labs.permutation(seed=0, d_model=8)",
    # An HTML blob whose script would draw: only a live, trusted page runs it.
    "from IPython.display import display\n"
    "display({'text/html': '<div class=\"blob\"></div><script>'"
    '\'document.querySelector(".blob").textContent = "drawn by a script"</script>\'}, raw=True)',
]


@pytest.fixture(scope="module")
def saved(lab, tmp_path_factory):  # noqa: F811
    """The executed notebook, saved into JupyterLab's root through its contents API."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        cells=[nbformat.v4.new_code_cell(source) for source in CELLS],
    )
    with pytest.MonkeyPatch.context() as patch:  # the kernel imports this checkout's attnlab
        patch.syspath_prepend(str(ARTIFACTS.parent / "src"))
        patch.setenv("PYTHONPATH", str(ARTIFACTS.parent / "src"))
        nbclient.NotebookClient(book, timeout=120, kernel_name="python3", resources={
            "metadata": {"path": str(tmp_path_factory.mktemp("run"))}}).execute()  # fmt: skip
    text = nbformat.writes(book)
    body = json.dumps({"type": "notebook", "format": "json", "content": json.loads(text)})
    # The server asks a writing request for the XSRF token its pages set as a cookie.
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{lab}/lab", timeout=30).close()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    request = urllib.request.Request(f"{lab}/api/contents/plots.ipynb", data=body.encode(),
                                     method="PUT", headers={"Content-Type": "application/json",
                                                            "X-XSRFToken": xsrf})  # fmt: skip
    with opener.open(request, timeout=30) as answer:
        assert answer.status in (200, 201)
    return book, len(text.encode())


def test_the_executed_notebook_carries_the_plot_as_plotly_json(saved):
    book, size = saved
    assert size < LIMIT, size
    outputs = [out for out in book.cells[0].outputs if MIME in out.get("data", {})]
    assert len(outputs) == 1
    figure = outputs[0]["data"][MIME]
    assert figure["data"] and "layout" in figure  # a whole figure, not a script to run
    lab_figure = LABS["permutation"].figure(al.labs.permutation(seed=0, d_model=8))
    assert len(figure["data"]) == len(lab_figure.series)


def _drawn(page):
    """(traces drawn in the lab cell's plot, text of the blob cell's output)."""
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    plot = cells.nth(0).locator(".jp-OutputArea .js-plotly-plot")
    plot.locator(".main-svg").first.wait_for(timeout=60_000)
    traces = plot.locator(".scatterlayer .trace, .barlayer .trace, .heatmaplayer .hm").count()
    return traces, cells.nth(1).locator(".jp-OutputArea").inner_text()


def test_jupyterlab_draws_the_saved_plot_and_again_after_a_reload(sync_api, lab, saved):  # noqa: F811
    book, _ = saved
    (figure,) = [o["data"][MIME] for o in book.cells[0].outputs if MIME in o.get("data", {})]
    expected = len(figure["data"])  # traces saved
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        offline = Offline(lab)
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(60_000)
        problems: list[str] = []
        page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        try:
            page.goto(f"{lab}/lab/tree/plots.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-CodeCell")
            before = _drawn(page)
            page.reload()
            page.wait_for_selector(".jp-Notebook .jp-CodeCell")
            after = _drawn(page)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-reloaded-plot.png"))
            # No cell ran in the browser: the prompts are still the saved run's.
            prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        finally:
            browser.close()
    assert before[0] == after[0] == expected, (before, after, expected)
    assert "drawn by a script" not in before[1] + after[1]  # the blob needs a live page
    assert [t.strip() for t in prompts] == ["[1]:", "[2]:"], prompts
    assert not problems, problems
    assert offline.blocked == []
