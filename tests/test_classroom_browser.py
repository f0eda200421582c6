"""The explorer as a class uses it: presented on a 1280x720 and a 1920x1080 projector, by
keyboard from the page's top, exported for a handout, predicted first, and checked by axe-core.

One page load serves several checks (browser tests are slow). Fixtures as in test_browser.py:
uvicorn on a free 127.0.0.1 port, Debian's Chromium, every other request blocked. Screenshots of
each figure presented at 1280x720 and of the 375 px layout land in test-artifacts/.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from test_browser import ARTIFACTS, Offline, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

# Each figure, and the part of it that is "the figure itself" when presenting.
SHOWN = {
    "figure-attention-stepper": "#stepper-tables",
    "figure-sqrt-dk-histogram": "#hist-plot",
    "figure-permutation-demo": "#perm-table",
    "figure-multi-head": "#mh-heads .head.shown",
}


@pytest.fixture
def opened(browser, server):  # noqa: F811
    contexts, offlines, problems = [], [], []

    def open_at(width: int = 1280, height: int = 720):
        context = browser.new_context(viewport={"width": width, "height": height})
        offline = Offline(server)
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.on("pageerror", lambda err: problems.append(str(err)))
        page.goto(server + "/")
        page.wait_for_selector("body[data-ready='true']")
        contexts.append(context)
        offlines.append(offline)
        return page

    yield open_at
    for context in contexts:
        context.close()
    assert all(o.blocked == [] for o in offlines), [o.blocked for o in offlines]
    assert problems == [], problems


def _inside(page, selector: str, width: int, height: int) -> dict:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not shown"
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, (selector, box, height)
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box, width)
    return box


def test_each_figure_presented_fits_the_first_screen(opened):
    page = opened()
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in [(1280, 720), (1920, 1080)]:
        page.set_viewport_size({"width": width, "height": height})
        for figure, shown in SHOWN.items():
            page.click(f"#{figure} .present-button")
            page.wait_for_selector(f"#{figure}.presenting")
            page.wait_for_timeout(400)  # the charts redraw at the presenting size
            # Prose and tools hidden: no hint, no "In words", no export button on screen.
            for hidden in (".hint", "details", "[data-export]"):
                assert page.locator(f"#{figure} {hidden}:visible").count() == 0, (figure, hidden)
            _inside(page, shown, width, height)
            if figure == "figure-attention-stepper":
                tops = page.locator("#stepper-steps button").evaluate_all(
                    "bs => bs.map(b => Math.round(b.getBoundingClientRect().top))"
                )
                assert len(tops) >= 11 and max(tops) - min(tops) < 8, tops  # one line
                _inside(page, "#stepper-steps li:last-child button", width, height)
                page.keyboard.press("ArrowRight")
                page.wait_for_function(
                    "() => document.querySelector('#figure-attention-stepper')"
                    ".dataset.step === 'scores'"
                )
                _inside(page, shown, width, height)
                page.keyboard.press("ArrowLeft")  # back to the first step
                page.wait_for_function(
                    "() => document.querySelector('#figure-attention-stepper')"
                    ".dataset.step !== 'scores'"
                )
            if figure == "figure-multi-head":
                assert page.locator("#mh-heads .head:visible").count() == 1
                page.keyboard.press("3")
                assert page.locator("#mh-heads .head:visible").get_attribute("data-head") == "2"
                _inside(page, shown, width, height)
                page.keyboard.press("1")
                assert page.locator("#mh-heads .head:visible").get_attribute("data-head") == "0"
            page.screenshot(path=str(ARTIFACTS / f"{figure}-present-{width}x{height}.png"))
            page.keyboard.press("Escape")
            page.wait_for_selector(".presenting", state="detached")
    # The phone layout, one screenshot a figure and the page's top.
    page.set_viewport_size({"width": 375, "height": 800})
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "phone-375-top.png"))
    for figure in SHOWN:
        page.locator(f"#{figure}").screenshot(path=str(ARTIFACTS / f"{figure}-phone-375.png"))
