"""Present mode fits every figure in every mode on a 1280x720 and a 1920x1080 projector: the
multi-head view's learned heads (not the hidden hand-set ones), a learned head's query opened in
the stepper (q with 16 columns, up to 32 keys), an 8 x 8 input, and the worked example, whose
small tables grow to use the screen. At each step and size the presented section neither
scrolls down nor sideways. Fixtures as in test_browser.py (Debian's Chromium, every request
but the explorer's own blocked). Screenshots land in /tmp/shots-class/."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-class")
SIZES = [(1280, 720), (1920, 1080)]
STEPPER = "figure-attention-stepper"
MULTI = "figure-multi-head"
READY = "document.querySelector('#figure-multi-head').dataset.learned === 'ready'"
# A learned head's query in the repeated half, and one that sees all 32 positions.
LEARNED = "/?stepper.learned=1,1,7&stepper.tokens=5,9,12,40,7,5,9,12,40,7&stepper.causal=0"
LEARNED_32 = "/?stepper.learned=1,1,31&stepper.tokens=" + ",".join(
    str(t) for t in [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 83, 27, 95] * 2
)
EIGHT = ";".join(",".join(str((i * 8 + j) % 7 - 3) for j in range(8)) for i in range(8))
EIGHT_BY_EIGHT = f"/?stepper.q={EIGHT}&stepper.k={EIGHT}&stepper.v={EIGHT}"


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def _overflow(page, figure: str) -> dict:
    """How far the presented section (and any scrolling box inside it) runs past its box."""
    return page.evaluate(
        """(id) => { const e = document.getElementById(id);
        const inner = [...e.querySelectorAll('.scroll, .tables, table')].filter((x) => x.offsetParent)
          .map((x) => x.scrollWidth - x.clientWidth);
        return { down: e.scrollHeight - e.clientHeight, across: e.scrollWidth - e.clientWidth,
                 inner: Math.max(0, ...inner) }; }""",
        figure,
    )


def _present(page, figure: str) -> None:
    page.click(f"#{figure} .present-button")
    page.wait_for_selector(f"#{figure}.presenting")
    page.wait_for_timeout(300)  # the fit runs on the next frame


def _leave(page) -> None:
    page.keyboard.press("Escape")
    page.wait_for_selector(".presenting", state="detached")


def _walk_steps(page, name: str, width: int, height: int) -> list[float]:
    """Every step of the presented stepper fits; answers, step by step, how much of the screen its
    tables use: the larger of their right edge over the width and their bottom over the height."""
    used, wrong = [], []
    page.click("#stepper-steps li:first-child button")
    for n in range(11):
        if n:
            page.keyboard.press("ArrowRight")
        page.wait_for_function(
            f"document.querySelectorAll('#stepper-steps button')[{n}]"
            ".getAttribute('aria-current') === 'step'"
        )
        page.wait_for_timeout(150)
        if n in (0, 1, 5, 8):
            page.screenshot(path=str(SHOTS / f"present-{name}-step{n + 1}-{width}.png"))
        over = _overflow(page, STEPPER)
        if max(over.values()) > 1:
            wrong.append((n + 1, over))
        box = page.locator("#stepper-tables").evaluate(
            "e => { const r = [...e.querySelectorAll('table')].map((t) => t.getBoundingClientRect());"
            " return { right: Math.max(...r.map((b) => b.right)),"
            " bottom: Math.max(...r.map((b) => b.bottom)) }; }"
        )
        used.append(max(box["right"] / width, box["bottom"] / height))
    assert wrong == [], (name, width, height, wrong)  # (step, how far it runs over)
    return used


def test_presenting_the_learned_mode_shows_the_learned_heads(opened, server):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = opened()
    page.goto(server + "/?mh.mode=learned#figure-multi-head")
    page.wait_for_function(READY)
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        _present(page, MULTI)
        page.screenshot(path=str(SHOTS / f"present-learned-{width}x{height}.png"))
        assert page.locator("#mh-handset").is_hidden()
        heads = page.locator("#mh-learned .learned-head canvas")
        assert heads.count() == 8
        for n in range(8):
            box = heads.nth(n).bounding_box()
            assert box["y"] >= 0 and box["y"] + box["height"] <= height, (n, box)
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, (n, box)
            assert box["width"] >= height / 6, (n, box)  # big enough to read from the back
        assert max(_overflow(page, MULTI).values()) <= 1, _overflow(page, MULTI)
        _leave(page)


@pytest.mark.parametrize(
    "name, url", [("learned", LEARNED), ("learned32", LEARNED_32), ("eight", EIGHT_BY_EIGHT)]
)
def test_presenting_the_stepper_fits_large_inputs(opened, server, name, url):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = opened()
    page.goto(server + url)
    page.wait_for_selector("body[data-ready='true']")
    page.wait_for_selector("#stepper-tables table")
    if name.startswith("learned"):
        page.wait_for_selector("#stepper-learned:not([hidden])")
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        _present(page, STEPPER)
        _walk_steps(page, name, width, height)
        _leave(page)


def test_presenting_small_tables_scales_them_up(opened):
    SHOTS.mkdir(exist_ok=True)
    page = opened()
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        _present(page, STEPPER)
        used = _walk_steps(page, "example", width, height)
        # The worked example's small tables reach across the screen or down to its foot, at
        # every step: not a third of it.
        assert min(used) >= 0.85, (width, used)
        _leave(page)
