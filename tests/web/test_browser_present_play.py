"""The stepper for a room, in Chromium with the network blocked: Play steps at the chosen pace
and stops at the last step (Pause, or a step by hand, stops it); Present mode scales the tables'
headers with their values and turns a table wider than 8 columns into a heatmap that keeps its
token labels; at 375 px the Present button leaves the heading clear; printed, the page shows no
control and its "In words" folds open. Driven by the keyboard once; axe-core in Present mode.
Screenshots at 375, 1280 and 1920 px and in Present mode go to /tmp/shots-classroom/."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-classroom")
AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"
STEP = "document.querySelector('#figure-attention-stepper').dataset.step"
# A 2 x 12 case: 12 keys make the scores and weights tables 12 columns wide.
WIDE_Q = ";".join(",".join(str((i + j) % 3 - 1) for j in range(2)) for i in range(2))
WIDE_K = ";".join(",".join(str((i * j) % 3 - 1) for j in range(2)) for i in range(12))
WIDE_V = WIDE_K


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def test_play_advances_at_its_pace_and_stops(opened):
    page = opened(1280, 900)
    page.select_option("#stepper-pace", "1")
    assert page.evaluate(STEP) == "inputs"
    page.focus("#stepper-play")
    page.keyboard.press("Enter")  # Play, by keyboard
    assert page.locator("#stepper-play").get_attribute("aria-pressed") == "true"
    page.wait_for_function(f"{STEP} === 'scores'", timeout=3000)  # the first step at once
    started = time.monotonic()
    page.wait_for_function(f"{STEP} === 'scaled'", timeout=4000)
    assert 0.5 < time.monotonic() - started < 3.0  # at about the pace chosen (1 s)
    page.keyboard.press("Enter")  # Pause
    assert page.locator("#stepper-play").get_attribute("aria-pressed") == "false"
    paused = page.evaluate(STEP)
    page.wait_for_timeout(1500)
    assert page.evaluate(STEP) == paused
    # Played to the end, it stops by itself at the last step.
    page.click("#stepper-steps li:nth-last-child(2) button")
    page.click("#stepper-play")
    page.wait_for_function(f"{STEP} === 'grad_k'", timeout=4000)
    page.wait_for_function(
        "document.querySelector('#stepper-play').getAttribute('aria-pressed') === 'false'",
        timeout=4000)  # fmt: skip
    assert "Play" in page.locator("#stepper-play").inner_text()


def test_present_mode_scales_labels_and_shows_wide_tables_as_heatmaps(opened, server):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = opened(1280, 720)
    page.goto(f"{server}/?stepper.q={WIDE_Q}&stepper.k={WIDE_K}&stepper.v={WIDE_V}"
              "&stepper.causal=0&stepper.step=weights")  # fmt: skip
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(f"{STEP} === 'weights'")
    assert page.locator("#stepper-tables table.heatmap").count() == 0  # only when presenting
    normal = page.evaluate("parseFloat(getComputedStyle(document.querySelector("
                           "'#stepper-tables thead th')).fontSize)")  # fmt: skip
    page.click("#figure-attention-stepper .present-button")
    page.wait_for_selector("#figure-attention-stepper.presenting")
    page.wait_for_timeout(400)
    heat = page.locator("#stepper-tables table.heatmap")
    assert heat.count() >= 1
    # The labels stay: 12 key headers, and each cell keeps its number as its title.
    assert heat.first.locator("thead th").count() == 13
    cell = heat.first.locator("td[data-col]").first
    assert cell.get_attribute("title") == cell.get_attribute("data-value")
    assert cell.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    sizes = page.evaluate("""() => {
        const px = (s) => parseFloat(getComputedStyle(document.querySelector(s)).fontSize);
        return { th: px('#stepper-tables thead th'), td: px('#stepper-tables td[data-col]'),
                 title: px('#stepper-title') }; }""")
    # Headers grow with the values (never the 13.6 px of the page) and keep their proportion.
    assert sizes["th"] > normal and sizes["th"] >= 0.75 * sizes["td"], (sizes, normal)
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => (await axe.run('#figure-attention-stepper',
        {resultTypes: ['violations']})).violations.map(v => ({id: v.id, impact: v.impact}))""")
    assert [v for v in found if v["impact"] in ("critical", "serious")] == [], found
    page.screenshot(path=str(SHOTS / "present-heatmap-1280.png"))
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.wait_for_timeout(400)
    page.screenshot(path=str(SHOTS / "present-heatmap-1920.png"))
    page.keyboard.press("Escape")
    page.wait_for_selector("#figure-attention-stepper:not(.presenting)")
    assert page.locator("#stepper-tables table.heatmap").count() == 0


def test_at_375_px_the_present_button_leaves_the_heading_clear(opened):
    page = opened(375, 800)
    page.click("#figure-attention-stepper .present-button")
    page.wait_for_selector("#figure-attention-stepper.presenting")
    page.wait_for_timeout(300)
    heading = page.locator("#stepper-heading").bounding_box()
    button = page.locator("#figure-attention-stepper .present-button").bounding_box()
    text = page.locator("#stepper-heading").evaluate(
        "h => { const r = document.createRange(); r.selectNodeContents(h); "
        "const b = r.getBoundingClientRect(); return {x: b.x, y: b.y, width: b.width, height: b.height}; }")  # fmt: skip
    overlap_x = min(text["x"] + text["width"], button["x"] + button["width"]) - max(
        text["x"], button["x"]
    )
    overlap_y = min(text["y"] + text["height"], button["y"] + button["height"]) - max(
        text["y"], button["y"]
    )
    assert overlap_x <= 0 or overlap_y <= 0, (text, button, heading)
    page.screenshot(path=str(SHOTS / "present-375.png"))


def test_printed_the_page_has_no_controls_and_open_folds(opened):
    page = opened(1280, 900)
    page.emulate_media(media="print")
    visible = page.evaluate("""() => [...document.querySelectorAll(
        'button:not(.mask-cell), input, select, textarea, progress')].filter((e) => {
          const r = e.getBoundingClientRect();
          return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden';
        }).map((e) => e.id || e.outerHTML.slice(0, 60))""")
    assert visible == []
    words = page.locator("#figure-attention-stepper details.in-words p").first
    assert words.is_visible()
    breaks = page.evaluate("[...document.querySelectorAll('main > section.figure')].slice(1)"
                           ".map((s) => getComputedStyle(s).breakBefore)")  # fmt: skip
    assert breaks and set(breaks) == {"page"}
    page.pdf(path=str(SHOTS / "handout.pdf"))
