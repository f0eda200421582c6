"""``attnlab snapshot`` and the page's "Save as one file": one self-contained HTML file of the
explorer at a state. Opened from disk (file://) in Chromium with every request blocked, every
figure is drawn from the inlined answers at the saved state, nothing is asked of any server, and
a control that needs the server says so beside itself. The CLI refuses an existing file without
--force."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import ARGS, CHROMIUM, server, sync_api  # noqa: F401
from typer.testing import CliRunner

from attnlab.cli import app

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-class")
STATE = "stepper.step=weights&stepper.causal=0&hist.dk=128&mh.word=8&perm.pos=1"
LEARNED = "mh.mode=learned&stepper.learned=1,1,7&stepper.tokens=5,9,12,40,7,5,9,12,40,7"


def _write(path: Path, state: str) -> None:
    done = CliRunner().invoke(app, ["snapshot", "--state", state, "-o", str(path)])
    assert done.exit_code == 0, done.output


def _open_offline(sync_api, path: Path, check):  # noqa: F811
    asked: list[str] = []
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)

        def block(route):
            url = route.request.url
            if url == path.as_uri() or url.startswith("data:"):
                route.continue_()
            else:
                asked.append(url)
                route.abort()

        page.route("**/*", block)
        page.on("request", lambda r: r.url.startswith(("http", "ws")) and asked.append(r.url))
        page.on("pageerror", lambda err: problems.append(str(err)))
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-charts='drawn']")
        check(page)
        browser.close()
    assert asked == [], asked
    assert problems == [], problems


def test_a_snapshot_opens_from_disk_with_every_figure_drawn(sync_api, tmp_path):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    path = tmp_path / "class.html"
    _write(path, STATE)
    refused = CliRunner().invoke(app, ["snapshot", "--state", STATE, "-o", str(path)])
    assert refused.exit_code == 2 and "--force" in refused.output

    def check(page):
        # The saved state, not the defaults: the softmax step with the mask off, d_k = 128.
        assert page.locator("#figure-attention-stepper").get_attribute("data-step") == "weights"
        assert not page.locator("#stepper-causal").is_checked()
        assert page.locator("#stepper-tables .step-result td[data-col]").count() >= 4
        assert page.locator("#hist-plot .main-svg").count() >= 1
        assert page.locator("#figure-sqrt-dk-histogram").get_attribute("data-dk") == "128"
        assert page.locator("#perm-table tbody tr").count() == 5
        assert page.locator("#mh-heads .head").count() == 4
        assert page.locator("#mh-tensor .main-svg").count() >= 1
        assert page.locator("#snapshot-note").is_visible()
        # A control that needs the server says so beside itself.
        page.locator("#stepper-scaled").click()  # a new input: not in the file
        page.wait_for_function(
            "[...document.querySelectorAll('#figure-attention-stepper .error')]"
            ".some((e) => !e.hidden && e.textContent.includes('attnlab serve'))"
        )
        page.screenshot(path=str(SHOTS / "snapshot-file-1280.png"))

    _open_offline(sync_api, path, check)


def test_a_learned_snapshot_draws_the_learned_heads_and_the_head(sync_api, tmp_path):  # noqa: F811
    path = tmp_path / "learned.html"
    _write(path, LEARNED)

    def check(page):
        page.wait_for_function(
            "document.querySelector('#figure-multi-head').dataset.learned === 'ready'"
        )
        assert page.locator("#mh-learned .learned-head canvas").count() == 8
        page.wait_for_selector("#stepper-learned:not([hidden])")
        page.locator("#figure-multi-head").screenshot(path=str(SHOTS / "snapshot-learned.png"))

    _open_offline(sync_api, path, check)


def test_the_save_button_downloads_the_same_kind_of_file(sync_api, server, tmp_path):  # noqa: F811
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(accept_downloads=True)
        page.goto(server + "/?hist.dk=64")
        page.wait_for_selector("body[data-ready='true']")
        with page.expect_download() as caught:
            page.click("#save-one-file")
        saved = tmp_path / "saved.html"
        caught.value.save_as(saved)
        browser.close()
    text = saved.read_text()
    assert "window.attnlabSnapshot = true" in text and "hist.dk=64" in text
    assert "/static/" not in text.split('<script type="importmap">')[0]  # no link to the server
