"""The four widgets in a real JupyterLab, driven in Debian's Chromium.

A JupyterLab server runs on a free 127.0.0.1 port (no token, a temporary root folder and
Jupyter folders, no browser of its own), started within a bounded time and stopped at teardown,
kernels included. Chromium opens a notebook there with every request off this machine refused,
runs its cells one at a time as a person would, and checks both directions: a trait set from a
cell changes the view (the checkbox follows ``w.causal = False``), and a click in the view
changes the trait a cell then reads. Values typed out of range, and values the kernel refuses,
show a message in the widget's error line. Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from attnlab.core.numbers import format_number
from conftest import require_or_skip

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SRC = Path(__file__).resolve().parents[2] / "src"
START_S = 90  # JupyterLab starts in a few seconds here; a busy machine gets this long
RAN = re.compile(r"\[\d+\]")
KERNEL_S = 90_000  # ms for a cell's first output: the kernel starts and imports attnlab

# One cell per action; the test runs them in this order, acting on the views in between.
CELLS = [
    "import attnlab as al\nw = al.notebook.stepper()\nw",  # 0: the stepper, step 1
    "w.causal = False\nw.step = 5",  # 1: traits set from a cell
    "print('step', w.step, 'causal', w.causal)",  # 2: read after clicks in the view
    "try:\n    w.q = [[1] * 100] * 100\nexcept al.AttnlabError as err:\n    print('refused')",  # 3
    "h = al.notebook.histogram(64)\nh",  # 4
    "h.d_k = 256",  # 5
    "p = al.notebook.permutation()\np.order = [0, 4, 2, 3, 1]\np",  # 6
    "m = al.notebook.multihead(3)\nm",  # 7
    "print('query', m.query)",  # 8
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    require_or_skip("jupyterlab", "ATTNLAB_REQUIRE_BROWSER", "the widgets run in JupyterLab")
    return api


@pytest.fixture(scope="module")
def lab(sync_api, tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with the test's notebook in its root; yields its URL."""
    nbformat = pytest.importorskip("nbformat")
    root = tmp_path_factory.mktemp("lab")
    book = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        cells=[nbformat.v4.new_code_cell(source) for source in CELLS],
    )
    nbformat.write(book, root / "widgets.ipynb")
    home = tmp_path_factory.mktemp("jupyter")
    # No "get notified about Jupyter news?" toast over the cells (and no news fetched).
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "IPYTHONDIR": str(home / "ipython"),
           # the kernel imports this checkout's attnlab, whatever is installed
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}",
        "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
        "--ServerApp.password=", f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={home / 'settings'}",
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
        # Nothing that would reach off this machine (PyPI, the news feed), no terminals; root
        # is allowed, as CI containers often run as root.
        "--LabApp.extension_manager=readonly", "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.terminals_enabled=False", "--allow-root",
    ]  # fmt: skip
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited ({server.returncode}): {_tail(home)}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as answer:
                    if answer.status == 200:
                        break
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer within {START_S} s: {_tail(home)}")
            time.sleep(0.25)
        yield url
    finally:
        # The server shuts its kernels down on SIGTERM; anything left of its group is killed.
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        log.close()


def _tail(home: Path) -> str:
    return (home / "server.log").read_text()[-2000:]


class Offline:
    """Refuses every request not for the JupyterLab server, and remembers it."""

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


@pytest.fixture
def notebook(sync_api, lab):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        offline = Offline(lab)
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(60_000)
        problems: list[str] = []
        page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        page.goto(f"{lab}/lab/tree/widgets.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-CodeCell")
        # Keys pressed before the kernel is up are lost: wait for the status bar's "Idle".
        page.locator(".jp-StatusBar-Widget").get_by_text("Idle").first.wait_for(timeout=KERNEL_S)
        try:
            yield page
        finally:  # what the page showed last, when a step failed or not
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-last.png"))
            browser.close()
        assert not problems, problems
        # JupyterLab and the widgets' code come from the server: nothing was asked of the net.
        assert offline.blocked == []


def _run(page, index: int, shows: str | None = None) -> str:
    """Runs code cell ``index`` (click into it, Shift+Enter) and returns its output's text."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    from playwright.sync_api import expect  # importable: the fixtures skipped otherwise

    # "[n]:" once the kernel has run it (the locator is looked up again until then).
    expect(cell.locator(".jp-InputArea-prompt")).to_have_text(RAN, timeout=KERNEL_S)
    out = cell.locator(".jp-OutputArea")
    if shows is not None:
        out.get_by_text(shows).first.wait_for(timeout=KERNEL_S)
    return out.inner_text()


def _shot(page, locator, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))


def test_the_widgets_render_and_respond_both_ways_in_jupyterlab(notebook):
    page = notebook
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    stepper = cells.nth(0).locator(".attnlab-widget")
    heading = stepper.locator("h4")
    causal = stepper.get_by_label("causal mask")
    box = stepper.locator("input[name=step]")
    error = stepper.locator(".attnlab-error")

    _run(page, 0)
    heading.get_by_text("Step 1 of 11").wait_for(timeout=KERNEL_S)
    assert causal.is_checked() and box.input_value() == "1"
    assert stepper.get_by_role("button", name="previous step").is_disabled()
    _shot(page, stepper, "jupyterlab-stepper-step1.png")

    # A cell sets traits: the heading, the step box and the checkbox follow.
    _run(page, 1)
    heading.get_by_text("Step 5 of 11: Softmax").wait_for()
    page.wait_for_function("el => !el.checked", arg=causal.element_handle())
    assert box.input_value() == "5"
    # e^s / (1 + e^s), s = -18/√2 = -12.728: key 1, no mask, written by the one number rule.
    weight = math.exp(-18 / math.sqrt(2)) / (1 + math.exp(-18 / math.sqrt(2)))
    assert format_number(weight) in stepper.inner_text()

    # A click in the view changes the trait a cell reads.
    stepper.get_by_role("button", name="next step").click()
    heading.get_by_text("Step 6 of 11").wait_for()
    causal.check()
    assert "step 6 causal True" in _run(page, 2, shows="step 6")

    # Typing out of range is refused in words; the trait keeps its value.
    box.fill("99")
    box.press("Enter")
    error.get_by_text("must be a whole number from 1 to 11").wait_for()
    assert box.input_value() == "6"
    _shot(page, stepper, "jupyterlab-stepper-refused-typing.png")

    # A value the kernel refuses: the widget keeps its state and shows the kernel's reason.
    assert "refused" in _run(page, 3, shows="refused")
    error.get_by_text("1 to 32 rows").wait_for()
    assert heading.inner_text().startswith("Step 6 of 11")
    _shot(page, stepper, "jupyterlab-stepper-refused-q.png")
    stepper.get_by_role("button", name="previous step").click()  # and it still works
    heading.get_by_text("Step 5 of 11").wait_for()
    page.wait_for_function("el => !el.textContent", arg=error.element_handle())

    # The other three render and follow their traits too.
    _run(page, 4)
    histogram = cells.nth(4).locator(".attnlab-widget")
    histogram.get_by_text("d_k = 64, unscaled").wait_for(timeout=KERNEL_S)
    assert histogram.locator("svg rect").count() > 10
    _run(page, 5)
    histogram.get_by_text("d_k = 256, unscaled").wait_for()
    assert histogram.locator("input[name=d_k]").input_value() == "256"
    _shot(page, histogram, "jupyterlab-histogram.png")

    _run(page, 6)
    permutation = cells.nth(6).locator(".attnlab-widget")
    permutation.get_by_text("The man bit the dog").wait_for(timeout=KERNEL_S)
    _shot(page, permutation, "jupyterlab-permutation.png")

    _run(page, 7)
    multihead = cells.nth(7).locator(".attnlab-widget")
    multihead.get_by_text("What 'cross' attends to").wait_for(timeout=KERNEL_S)
    multihead.get_by_label("query word").select_option(label="7: it")
    multihead.get_by_text("What 'it' attends to").wait_for()
    assert "query 7" in _run(page, 8, shows="query 7")
    _shot(page, multihead, "jupyterlab-multihead.png")
    page.screenshot(path=str(ARTIFACTS / "jupyterlab-notebook.png"))
    assert page.locator(".attnlab-widget").count() == 4
