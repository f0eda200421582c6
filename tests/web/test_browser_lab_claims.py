"""The Labs panel's training labs in Chromium: they start at the CLI's defaults, run as jobs with
a progress bar and Stop, and put their claim's verdict beside the result, never a plain "done".

Default-size runs take tens of seconds to minutes, so the runs here are small: a run too short
to learn must say it falls short, a small run that learned must say it shows the claim, and the
defaults are checked against the lab specs (the default runs' verdicts are
tests/labs/test_lab_claims.py's, with ``-m grid``). Screenshots at 375, 1280 and 1920 px go to
/tmp/shots-classroom/; axe-core runs on the panel with a verdict shown.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

from attnlab.labs import LABS

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-classroom")
AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"
TRAINING = [name for name, spec in LABS.items() if spec.training]
# A train-positions run that learns in about a second: with positions far above the ceiling.
LEARNS = {"steps": 60, "batch": 16, "vocab_size": 8, "context": 6, "d_model": 16, "fresh": 200}


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def _lab(page, name: str) -> None:
    page.click(f"#lab-tabs [data-lab='{name}']")
    page.wait_for_selector(f"#lab-panel[aria-label='{LABS[name].title}']")


def _fill(page, values: dict) -> None:
    for key, value in values.items():
        page.fill(f"#lab-param-{key}", str(value))


def _run_to_end(page) -> None:
    page.click("#lab-run")
    page.wait_for_function("document.querySelector('#labs').dataset.job === 'done'")
    page.wait_for_selector("#lab-claim:not([hidden])")


def test_the_form_starts_at_the_clis_defaults(opened):
    page = opened(1280, 900)
    for name in TRAINING:
        _lab(page, name)
        for p in LABS[name].params:
            if not p.web:
                continue
            typed = page.locator(f"#lab-param-{p.name}").input_value()
            default = ", ".join(map(str, p.default)) if p.many else str(p.default)
            assert float(typed) == float(default) if p.kind is float else typed == default, p.name
        assert page.locator("#lab-table-box").get_attribute("tabindex") is None  # no empty stop


def test_a_short_run_shows_progress_and_says_it_falls_short(opened):
    page = opened(1280, 900)
    _lab(page, "train-positions")
    _fill(page, {"steps": 3, "fresh": 50})
    seen = []
    page.on("response", lambda r: "/api/runs" in r.url and seen.append(r.request.method))
    page.click("#lab-run")
    page.wait_for_selector("#lab-job:not([hidden])")
    assert page.locator("#lab-stop").is_visible()
    page.wait_for_function("document.querySelector('#labs').dataset.job === 'done'")
    assert "POST" in seen  # it went through the runs queue, not the lab request
    page.wait_for_selector("#lab-table tbody tr")
    claim = page.locator("#lab-claim")
    assert claim.get_attribute("data-held") == "false"
    assert claim.inner_text().startswith("Falls short of the claim")
    assert "default: 300" in claim.inner_text()
    status = page.locator("#lab-status").inner_text()
    assert "falls short" in status and "done" not in status
    assert page.locator("#lab-job").is_hidden() and page.locator("#lab-run").is_enabled()
    assert page.locator("#lab-table-box").get_attribute("tabindex") == "0"


def test_a_run_that_learned_shows_the_claim_at_every_width(opened):
    for width in (375, 1280, 1920):
        page = opened(width, 900)
        _lab(page, "train-positions")
        _fill(page, LEARNS)
        _run_to_end(page)
        claim = page.locator("#lab-claim")
        assert claim.get_attribute("data-held") == "true", claim.inner_text()
        assert claim.inner_text().startswith("Shows the claim")
        # The verdict's numbers are the table's: the with-positions accuracy, as the table has it.
        accuracy = page.locator("#lab-table tbody tr").first.locator("td").nth(1).inner_text()
        assert f"with positions {float(accuracy):.1%}" in claim.inner_text()
        SHOTS.mkdir(exist_ok=True)
        page.locator("#labs").screenshot(path=str(SHOTS / f"labs-claim-{width}.png"))
        if width == 1280:
            page.add_script_tag(path=str(AXE))
            found = page.evaluate(
                """async () => (await axe.run('#labs', {resultTypes: ['violations']}))
                  .violations.map(v => ({id: v.id, impact: v.impact}))"""
            )
            assert [v for v in found if v["impact"] in ("critical", "serious")] == [], found


def test_stop_by_keyboard_ends_a_default_run(opened, server):  # noqa: F811
    page = opened(1280, 900)
    _lab(page, "train-induction")
    page.focus("#lab-run")
    page.keyboard.press("Enter")  # at the defaults: 600 steps
    page.wait_for_function("/step ([2-9]|\\d\\d+) of 600/.test("
                           "document.querySelector('#lab-status').textContent)")  # fmt: skip
    assert page.evaluate("document.activeElement.id") == "lab-stop"
    page.keyboard.press("Enter")
    page.wait_for_function("/stopped/.test(document.querySelector('#lab-status').textContent)")
    runs = page.request.get(server + "/api/runs/" + _last_run(page)).json()
    assert runs["state"] == "cancelled" and runs["step"] < 600
    assert page.locator("#lab-claim").is_hidden()
    assert page.evaluate("document.activeElement.id") == "lab-run"


def _last_run(page) -> str:
    names = page.evaluate("performance.getEntriesByType('resource').map((e) => e.name)")
    return [re.search(r"/api/runs/([0-9a-f]+)", n).group(1) for n in names
            if re.search(r"/api/runs/[0-9a-f]+", n)][-1]  # fmt: skip
