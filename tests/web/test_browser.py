"""The explorer in a real browser: Debian's Chromium driven by Playwright's Python API.

A uvicorn server runs the app on a free 127.0.0.1 port in a background thread; every page loads
with all other network access blocked, and each test works a figure as a person would (mouse
and keyboard) and reads what the page shows. Screenshots land in test-artifacts/.

Skips when playwright or /usr/bin/chromium is missing, unless ATTNLAB_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from attnlab.web import create_app
from conftest import require_or_skip

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def sync_api():
    api = require_or_skip(
        "playwright.sync_api", "ATTNLAB_REQUIRE_BROWSER", "the browser tests drive Chromium with it"
    )
    if not Path(CHROMIUM).exists():
        why = f"Debian's Chromium is not at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("ATTNLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{why}, but ATTNLAB_REQUIRE_BROWSER=1")
        pytest.skip(why)
    return api


@pytest.fixture(scope="module")
def server(sync_api):
    """The explorer on a free 127.0.0.1 port, served by uvicorn in a background thread."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # the OS picks a free port; uvicorn serves on this very socket
    host, port = sock.getsockname()
    config = uvicorn.Config(create_app(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the explorer did not start"
    yield f"http://{host}:{port}"
    server.should_exit = True
    thread.join(timeout=20)
    sock.close()


@pytest.fixture(scope="module")
def browser(sync_api):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()


class Offline:
    """Blocks every request that is not for the explorer's own server, and remembers it."""

    def __init__(self, origin: str):
        self.origin = urlparse(origin)
        self.blocked: list[str] = []

    def __call__(self, route):
        url = urlparse(route.request.url)
        if url.scheme in ("data", "blob") or (
            url.hostname == self.origin.hostname and url.port == self.origin.port
        ):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()


class Pages:
    """Pages of the explorer, each in its own context with every outside request blocked, opened
    and waited for (``open``); ``close`` closes them and checks that nothing outside was asked
    for and that no script error (``keep(err)``: the errors that count) was raised."""

    def __init__(self, browser, server: str, keep=lambda err: True):
        self.browser, self.server, self.keep = browser, server, keep
        self.contexts, self.offlines, self.problems = [], [], []

    def open(self, width: int = 1280, height: int = 720, requests: list | None = None):
        context = self.browser.new_context(viewport={"width": width, "height": height})
        offline = Offline(self.server)
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.on("pageerror", lambda err: self.keep(err) and self.problems.append(str(err)))
        if requests is not None:
            page.on("request", lambda r: requests.append(urlparse(r.url)))
        page.goto(self.server + "/")
        page.wait_for_selector("body[data-charts='drawn']", state="attached")
        self.contexts.append(context)
        self.offlines.append(offline)
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()
        assert all(o.blocked == [] for o in self.offlines), [o.blocked for o in self.offlines]
        assert self.problems == [], self.problems


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    offline = Offline(server)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    # A 422 is an answer the page shows in words (a test provokes one); anything else is not.
    page.on(
        "console",
        lambda msg: (
            msg.type == "error"
            and "status of 422" not in msg.text
            and problems.append(f"console: {msg.text}")
        ),
    )
    page.goto(server + "/")
    page.wait_for_selector("body[data-charts='drawn']")
    yield page
    context.close()
    assert offline.blocked == [], f"the page tried to reach the network: {offline.blocked}"
    assert problems == [], problems


def shot(page, figure_id: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.wait_for_function("() => document.getAnimations().every(a => a.playState !== 'running')")
    page.locator(f"#{figure_id}").screenshot(path=str(ARTIFACTS / f"{figure_id}.png"))


def values(page, selector: str) -> list[float]:
    return [
        float(x)
        for x in page.locator(selector).evaluate_all("els => els.map(e => e.dataset.value)")
    ]


def test_page_loads_with_the_network_blocked(page):
    # Every asset came from the app (checked by the fixture) and every figure is drawn.
    assert page.locator("#stepper-tables table").count() == 3
    assert page.locator("#hist-plot .main-svg").count() > 0
    assert page.locator("#perm-table tbody tr").count() == 5
    assert page.locator("#mh-heads article.head").count() == 4
    assert page.locator("#mh-tensor .main-svg").count() > 0
    assert page.locator("#exercise-list article").count() == 7
    for words in page.locator("details.in-words p").all_text_contents()[:5]:
        assert len(words) > 100
    assert page.evaluate("typeof window.Plotly") == "object"


def test_stepper_by_keyboard(page):
    stepper = page.locator("#figure-attention-stepper")
    page.locator("#stepper-next").focus()
    for _ in range(4):  # inputs -> scores -> scaled -> masked -> softmax
        page.keyboard.press("Enter")
    assert "Softmax" in page.locator("#stepper-title").inner_text()
    weights = "#stepper-tables .step-result td[data-col]"
    assert values(page, weights) == pytest.approx([1, 0, 0.196, 0.804], abs=5e-4)
    cells = page.locator(weights).all_inner_texts()
    assert cells[2] == "0.1956" and cells[3] == "0.8044"  # 4 significant digits
    shot(page, "figure-attention-stepper")

    # The arrow keys move the picked entry; the explanation follows it.
    page.locator(f"{weights}[tabindex='0']").focus()
    page.keyboard.press("ArrowUp")
    assert page.locator("#stepper-detail").inner_text().startswith("softmax of row 1")

    page.keyboard.press("Tab")  # out of the grid, on to the Next button
    page.locator("#stepper-next").focus()
    page.keyboard.press("Enter")  # -> output
    output = values(page, "#stepper-tables .step-result td[data-col]")
    assert output == pytest.approx([0, -1, 0.804, 1.413], abs=5e-4)

    # Switching the causal mask off (Space on the checkbox) recomputes every later step.
    page.locator("#stepper-back").focus()
    page.keyboard.press("Enter")  # back to softmax
    page.locator("#stepper-causal").focus()
    page.keyboard.press("Space")
    page.wait_for_function("() => !document.querySelector('#stepper-causal').checked")
    page.wait_for_function(
        "() => document.querySelector('#stepper-tables .step-result td[data-col]')"
        ".dataset.value !== '1'"
    )
    row1 = page.locator(weights).all_inner_texts()[:2]
    assert row1 == ["2.967e-6", "1"]  # 1 / (1 + e^(18/√2)) and its complement, to 4 digits
    assert values(page, weights)[:2] == pytest.approx([0.000003, 0.999997], abs=5e-7)
    assert "NaN" not in stepper.inner_text()


def test_stepper_shows_a_fully_masked_row_as_an_error(page):
    page.locator("#figure-attention-stepper details.edit summary").click()
    page.fill("#stepper-edit-q", "1 0\n0 1\n1 1")
    page.fill("#stepper-edit-k", "1 0\n0 1\n1 1")
    page.fill("#stepper-edit-v", "1\n2\n3")
    page.click("#stepper-form button[type=submit]")
    page.click("#stepper-steps li:nth-child(4) button")  # "Mask added"
    page.click("table[data-table='mask'] td[data-row='0'][data-col='0'] button")
    page.wait_for_selector("#stepper-rows:has-text('Query 1')")
    page.click("#stepper-next")  # softmax
    error = page.locator("#stepper-tables .step-result tr.row-error")
    assert error.count() == 1 and "may attend to no key" in error.inner_text()
    # Query 2 is untouched: scores [0, 1] / √2 over keys 1 and 2, key 3 in its future.
    first = 1 / (1 + math.exp(1 / math.sqrt(2)))
    row2 = values(page, "#stepper-tables .step-result td[data-col]")[:3]
    assert row2 == pytest.approx([first, 1 - first, 0], abs=1e-9)
    cells = page.locator("#stepper-tables td").all_inner_texts()
    assert not any("NaN" in c for c in cells if "0/0" not in c)


def _histogram_at(page, key: str, d_k: int) -> float:
    page.locator("#hist-dk").focus()
    page.keyboard.press(key)
    page.wait_for_function(
        f"() => document.querySelector('#figure-sqrt-dk-histogram').dataset.dk === '{d_k}'"
        " && !document.querySelector('#figure-sqrt-dk-histogram').hasAttribute('aria-busy')"
    )
    return float(page.locator("#hist-std").get_attribute("data-value"))


def test_histogram_widens_like_sqrt_dk_until_scaled(page):
    narrow = _histogram_at(page, "Home", 16)  # the slider's keyboard keys: Home = 16, End = 256
    wide = _histogram_at(page, "End", 256)
    assert wide / narrow == pytest.approx(4.0, rel=0.1)
    assert (
        float(page.locator("#hist-saturation tr.shown td.share").get_attribute("data-value")) > 0.3
    )
    shot(page, "figure-sqrt-dk-histogram")

    page.locator("#hist-scaled").check()
    page.wait_for_function(
        "() => document.querySelector('#figure-sqrt-dk-histogram').dataset.scaled === 'true'"
    )
    assert float(page.locator("#hist-std").get_attribute("data-value")) == pytest.approx(
        1, abs=0.05
    )
    assert page.locator("#hist-saturation tr.shown").inner_text().startswith("with scaling")
    assert page.locator("#hist-saturation tr.shown td.share").get_attribute("data-value") == "0"


def _outputs(page) -> dict[str, list[str]]:
    rows = page.locator("#perm-table tbody tr")
    return {
        rows.nth(i).get_attribute("data-token"): rows.nth(i).locator("td.num").all_inner_texts()
        for i in range(rows.count())
    }


def _order(page) -> list[str]:
    return page.locator("#perm-table tbody tr").evaluate_all("rs => rs.map(r => r.dataset.token)")


def test_shuffling_moves_outputs_but_keeps_their_values(page):
    before, order = _outputs(page), _order(page)
    page.click("#perm-shuffle")
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#perm-table tbody tr')].map(r => r.dataset.token)"
        f".join() !== '{','.join(order)}'"
    )
    assert _outputs(page) == before  # every token keeps its values to the last digit shown
    assert page.locator("#perm-table td.same").count() == 5
    shot(page, "figure-permutation-demo")

    page.locator("#perm-positions").check()
    page.wait_for_selector("#perm-table caption:has-text('with position vectors')")
    page.click("#perm-shuffle")
    page.wait_for_selector("#perm-table td.changed")
    assert _outputs(page) != before


def test_picking_it_sends_the_pronoun_head_to_animal(page):
    page.locator("#mh-words input[value='7']").check()  # "it"
    page.wait_for_function(
        "() => document.querySelector('#figure-multi-head').dataset.query === '7'"
    )
    pronoun = page.locator("#mh-heads article.head").nth(1)
    assert "pronoun" in pronoun.locator("h3").inner_text()
    assert pronoun.locator(".top-word").inner_text() == "“animal”"
    top = pronoun.locator("li.top")
    assert top.locator(".word").inner_text() == "animal"
    weights = values(page, "#mh-heads article.head >> nth=1 >> li")
    assert max(weights) == weights[1]
    assert "(4, 10, 10)" in page.locator("#mh-shape").inner_text()
    shot(page, "figure-multi-head")


def test_equation_symbols_explain_themselves_and_link_to_the_stepper(page):
    info = page.locator("#symbol-info")
    page.locator(".sym[data-symbol='mask']").focus()  # by keyboard focus
    assert "the mask" in info.inner_text() and "N × M" in info.inner_text()
    info.locator("a").focus()
    page.keyboard.press("Enter")
    assert "Mask added" in page.locator("#stepper-title").inner_text()
    page.locator(".sym[data-symbol='sqrt-dk']").hover()  # and by mouse
    assert "the width shared by queries and keys" in info.inner_text()
    shot(page, "equation")


def test_labs_run_and_exercises_are_checked(page):
    page.click("#lab-tabs [data-lab='saturation']")
    page.fill("#lab-param-trials", "100")
    page.fill("#lab-param-seed", "2")
    page.click("#lab-run")
    page.wait_for_selector("#lab-table tbody tr")
    assert page.locator("#lab-table thead th").first.get_attribute("data-column") == "case"
    assert page.locator("#lab-plot .main-svg").count() > 0
    href = page.locator("#lab-csv").get_attribute("href")
    assert "download=csv" in href and "seed=2" in href and "trials=100" in href

    page.fill("#lab-param-trials", "999999")
    page.click("#lab-run")
    page.wait_for_selector("#lab-error:not([hidden])")
    assert "trials" in page.locator("#lab-error").inner_text()
    shot(page, "labs")

    exercise = page.locator("#exercise-2")
    exercise.locator("input").fill("1.96")
    exercise.locator("button").click()
    exercise.locator(".verdict.correct").wait_for()
    assert "Correct" in exercise.locator(".verdict").inner_text()
    assert exercise.locator(".solution").is_visible()
    shot(page, "exercises")


def test_page_constants_come_from_the_server(page):
    config = page.evaluate("fetch('/api/config').then(r => r.json())")
    h, s, p = config["histogram"], config["stepper"], config["permutation"]
    slider = page.locator("#hist-dk")
    bounds = [slider.get_attribute(a) for a in ("min", "max", "step")]
    assert bounds == [str(h["d_k_min"]), str(h["d_k_max"]), str(h["d_k_step"])]
    assert page.locator("#hist-dk-value").inner_text() == str(h["d_k_default"])
    assert page.locator("#figure-sqrt-dk-histogram").get_attribute("data-dk") == str(
        h["d_k_default"]
    )
    header = page.locator("#hist-saturation thead").inner_text()
    assert f"> {h['threshold']:g}" in header
    assert page.locator("#stepper-edit-q").input_value() == "\n".join(
        " ".join(f"{x:g}" for x in row) for row in s["example"]["q"]
    )
    assert page.locator("#stepper-random").text_content() == f"Random {s['random_tokens']} tokens"
    swapped = " ".join(p["sentence"][i] for i in p["swap"])
    assert page.locator("#perm-swap").inner_text() == f"“{swapped}”"
    page.click("#perm-swap")
    page.wait_for_function(
        "order => [...document.querySelectorAll('#perm-table tbody tr')]"
        ".map(r => r.dataset.token).join() === order",
        arg=",".join(map(str, p["swap"])),
    )
    assert not page.locator("[data-config]:empty").count()  # every quoted constant was filled


def test_a_page_on_another_site_cannot_run_labs(browser, server):
    # http://localhost:PORT and http://127.0.0.1:PORT are different sites to the browser.
    other = server.replace("127.0.0.1", "localhost")
    context = browser.new_context()
    blocked: list[str] = []

    def loopback_only(route):
        if urlparse(route.request.url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", loopback_only)
    page = context.new_page()
    try:
        page.goto(other + "/api/config")  # any page of the other site
        lab = f"{server}/api/labs/saturation?trials=1&keys=2&d_k=1"
        with page.expect_response(lambda r: "/api/labs/" in r.url) as answer:
            page.evaluate("url => fetch(url, {mode: 'no-cors'}).catch(() => null)", lab)
        assert answer.value.status == 403
        page.goto(server + "/")  # the explorer's own page still runs them
        same = page.evaluate("url => fetch(url).then(r => r.status)", lab)
        assert same == 200
    finally:
        context.close()
    assert blocked == []
