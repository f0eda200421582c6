"""What makes the explorer's cold page ready fast, checked in a real browser (times are measured
in test_browser_class.py and docs/bench.md, never asserted here):

- the first screen (the stepper's tables, the equation) is filled before plotly.js is asked for,
  and the page asks the API nothing before ready, nor later for what the server inlined in the
  HTML (the config, the stepper's trace, the figures' data);
- plotly.js comes when a chart nears the viewport, when the browser is idle after ready, or when
  an export needs the picture, and the charts signal (body[data-charts]) follows every chart;
- a link to a figure (#figure-multi-head) makes that figure part of the first screen.

Fixtures as in test_browser.py: uvicorn on a free 127.0.0.1 port, Debian's Chromium, every other
request blocked.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from test_browser import Offline, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

# What the page holds at the moment it says it is ready, kept for the test to read afterwards.
AT_READY = """
new MutationObserver((_, seen) => {
  if (!document.body?.hasAttribute('data-ready')) return;
  seen.disconnect();
  window.atReady = {
    stepperTables: document.querySelectorAll('#stepper-tables table').length,
    equationSymbols: document.querySelectorAll('#equation .sym').length,
    multiHeads: document.querySelectorAll('#mh-heads article.head').length,
    plotly: typeof window.Plotly,
    plotlyScript: document.querySelectorAll('script[src*="plotly"]').length,
  };
}).observe(document, { attributes: true, subtree: true, attributeFilter: ['data-ready'] });
"""
# A browser that is never idle: plotly.js then loads only for a chart in view or an export.
NEVER_IDLE = "window.requestIdleCallback = () => 0;"


@pytest.fixture
def cold(browser, server):  # noqa: F811
    """open(path, width, height, scripts) -> (page, paths asked); a fresh context each time."""
    made = []

    def open_cold(path="/", width=1280, height=900, scripts=()):
        context = browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=True
        )
        offline = Offline(server)
        context.route("**/*", offline)
        for script in (AT_READY, *scripts):
            context.add_init_script(script)
        page = context.new_page()
        page.set_default_timeout(30_000)
        problems, asked = [], []
        page.on("pageerror", lambda err: problems.append(str(err)))
        page.on("request", lambda r: asked.append(urlparse(r.url).path))
        made.append((context, offline, problems))
        page.goto(server + path)
        page.wait_for_selector("body[data-ready='true']", state="attached")
        return page, asked

    yield open_cold
    for context, offline, problems in made:
        context.close()
        assert offline.blocked == [] and problems == [], (offline.blocked, problems)


def _marks(page) -> dict:
    return page.evaluate(
        """() => Object.fromEntries(['attnlab-ready', 'attnlab-charts'].map(name =>
        [name, performance.getEntriesByName(name)[0]?.startTime ?? null]))"""
    )


def test_the_first_screen_is_ready_before_plotly_with_no_api_request(cold):
    page, asked = cold()
    at = page.evaluate("window.atReady")
    assert at["stepperTables"] == 3 and at["equationSymbols"] > 5  # usable: its tables filled
    assert at["plotly"] == "undefined" and at["plotlyScript"] == 0  # not even asked for yet
    page.wait_for_selector("body[data-charts='drawn']", state="attached")
    marks = _marks(page)
    assert marks["attnlab-charts"] >= marks["attnlab-ready"] > 0
    plotly = page.evaluate(
        """performance.getEntriesByType('resource').filter(e => e.name.includes('/vendor/plotly'))
        .map(e => e.startTime)"""
    )
    assert len(plotly) == 1 and plotly[0] > marks["attnlab-ready"]
    # Every chart drawn once the signal is up, and every figure filled from the inlined data.
    for chart in ("#hist-plot", "#hist-curve", "#mh-tensor"):
        assert page.locator(f"{chart} .main-svg").count() > 0, chart
    assert page.locator("#perm-table tbody tr").count() == 5
    # Nothing from the API before ready, and nothing after it that came with the page.
    early = page.evaluate(
        """performance.getEntriesByType('resource').filter(e => e.name.includes('/api/')
        && e.startTime < performance.getEntriesByName('attnlab-ready')[0].startTime).map(e => e.name)"""
    )
    assert early == []
    inlined = page.evaluate(
        "JSON.parse(document.getElementById('attnlab-first').textContent).map(a => a.path)"
    )
    assert {"/api/config", "/api/trace", "/api/equation"} <= {p.split("?")[0] for p in inlined}
    assert not {p.split("?")[0] for p in inlined} & {p for p in asked if p.startswith("/api/")}
    # A request the page did not inline still goes to the server.
    with page.expect_request("**/api/trace"):
        page.locator("#stepper-causal").uncheck()


def test_plotly_waits_for_a_chart_to_come_into_view(cold):
    page, asked = cold(scripts=[NEVER_IDLE])
    page.wait_for_selector("#perm-table tbody tr")  # every section has started by now
    page.wait_for_selector("#mh-heads article.head")
    assert page.evaluate("typeof window.Plotly") == "undefined"
    assert not any("plotly" in p for p in asked)
    assert page.get_attribute("body", "data-charts") is None  # charts asked for, not drawn
    page.locator("#hist-plot").scroll_into_view_if_needed()
    page.wait_for_selector("#hist-plot .main-svg")
    page.wait_for_selector("body[data-charts='drawn']", state="attached")
    assert page.locator("#mh-tensor .main-svg").count() > 0  # one load draws every chart


def test_an_export_before_plotly_loads_it_and_keeps_the_chart(cold):
    page, _ = cold(scripts=[NEVER_IDLE])
    page.wait_for_selector("#mh-heads article.head")
    assert page.evaluate("typeof window.Plotly") == "undefined"
    # Pressed by script, so the figure is not scrolled into view first.
    with page.expect_download() as got:
        page.evaluate(
            "document.querySelector('#figure-sqrt-dk-histogram [data-export=\"svg\"]').click()"
        )
    svg = Path(got.value.path()).read_text(encoding="utf-8")
    assert page.evaluate("typeof window.Plotly") == "object"
    assert svg.count("<image ") == 2  # both of the histogram's charts are in the picture


def test_a_link_to_a_figure_makes_it_the_first_screen(cold):
    page, _ = cold("/#figure-multi-head", 1280, 720)
    assert page.evaluate("window.atReady")["multiHeads"] == 4  # started before ready
    page.wait_for_selector("body[data-charts='drawn']", state="attached")
    assert page.locator("#mh-tensor .main-svg").count() > 0
    top = page.locator("#figure-multi-head").evaluate("e => e.getBoundingClientRect().top")
    assert abs(top) < 40  # the page still opens on the figure the link names


def test_a_malformed_fragment_still_opens_the_page(cold):
    page, _ = cold("/#%E0")  # not valid percent-encoding: decoding it throws
    assert page.evaluate("window.atReady")["stepperTables"] == 3


# Holds back by 1.2 s the requests to a path whose body contains a text, so that a later
# request (answered from the page's own inlined answers, or quickly) overtakes an earlier one.
SLOW_PATH = """
window.slowPath = (path, text) => {
  const plain = window.fetch;
  window.fetch = (url, options) => String(url).startsWith(path) && String(options?.body).includes(text)
    ? new Promise((done) => setTimeout(done, 1200)).then(() => plain(url, options))
    : plain(url, options);
};
"""

TOKENS = (
    "() => [...document.querySelectorAll('#perm-table tbody tr')].map(r => r.dataset.token).join()"
)


def test_a_slow_earlier_answer_never_overwrites_a_later_one(cold):
    # "Swap" asks the server (held back), "As written" is answered at once: the page must end
    # on the sentence as written, not on the swap whose answer arrived last.
    page, _ = cold("/#figure-permutation-demo", scripts=(SLOW_PATH,))
    page.wait_for_selector("body[data-charts='drawn']", state="attached")  # controls live
    page.wait_for_function(f"{TOKENS} === '0,1,2,3,4'")
    page.evaluate("""window.slowPath('/api/permutation', '"order":[')""")
    page.click("#perm-swap")
    page.wait_for_timeout(200)  # the swap's request is with the server (held back)
    page.click("#perm-reset")
    page.wait_for_timeout(2000)  # the held-back swap has been answered by now
    assert page.evaluate(TOKENS) == "0,1,2,3,4"
    assert "perm.order" not in page.url
