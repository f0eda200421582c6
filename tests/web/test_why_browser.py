"""The why-section in a real browser: every symbol of every explainer, the measured proof, and
the predict-first cards, worked with mouse and keyboard, the network blocked.

Fixtures as in test_browser.py (uvicorn on a free 127.0.0.1 port, Debian's Chromium); the page
fixture here also fails on a page error raised by the why-section's own modules. Screenshots of
the section at 375, 1280 and 1920 px land in test-artifacts/.
"""

from __future__ import annotations

import pytest
from test_browser import ARTIFACTS, Pages, browser, server, sync_api  # noqa: F401

from attnlab.labs.sqrt_dk_proof import SPEC as PROOF_SPEC

pytestmark = pytest.mark.browser

WHY_MODULES = ("why.js", "explain.js", "proof.js", "predict.js")


@pytest.fixture
def open_page(browser, server):  # noqa: F811
    # Only the reasoning sections' own script errors count here.
    pages = Pages(browser, server, keep=lambda err: any(m in str(err.stack) for m in WHY_MODULES))

    def open_at(width: int = 1280):
        page = pages.open(width, 900)
        # The proof measures only once its fold is opened.
        page.evaluate("document.querySelectorAll('details.why-fold').forEach(d => d.open = true)")
        page.wait_for_selector("#why-proof-steps li", state="attached")
        return page

    yield open_at
    pages.close()


def test_every_symbol_of_every_explainer_opens_its_panel(open_page, server):  # noqa: F811
    page = open_page()
    equations = page.request.get(server + "/api/equations").json()["equations"]
    assert page.locator("#why-equations article.explainer").count() == len(equations)
    clicked = 0
    for eq in equations:
        card = page.locator(f"#why-equations [data-equation='{eq['id']}']")
        for s in eq["symbols"]:
            card.locator(f".why-sym[data-symbol='{s['id']}']").first.click()
            panel = card.locator(".why-panel")
            assert card.get_attribute("data-shown") == s["id"]
            assert s["meaning"] in panel.inner_text()
            assert s["shape"] in panel.inner_text()
            link = panel.locator("a.why-link")
            assert link.get_attribute("href") == s["link"]["href"]
            clicked += 1
    assert clicked >= 60
    # A lab link picks its lab on the labs' tabs.
    card = page.locator("[data-equation='cost']")
    card.locator(".why-sym[data-symbol='flops']").click()
    card.locator(".why-panel a.why-link").click()
    assert page.locator("#lab-tabs [data-lab='cost']").get_attribute("aria-selected") == "true"
    # Symbols are buttons: one tab stop per equation, the arrow keys move between them.
    card = page.locator("[data-equation='gap-ratio']")
    card.locator(".why-sym[data-symbol='ratio']").focus()
    page.keyboard.press("ArrowRight")
    assert card.get_attribute("data-shown") == "exp"


def _steps(page) -> list[dict]:
    return page.locator("#why-proof-steps li").evaluate_all(
        "els => els.map(e => ({hidden: e.hidden, p: +e.dataset.predicted,"
        " m: +e.dataset.measured, se: +e.dataset.stderr}))"
    )


def test_the_proof_reveals_seven_measured_steps(open_page):
    page = open_page()
    assert [s["hidden"] for s in _steps(page)] == [True] * 7
    page.locator("#why-proof-next").focus()
    for n in range(1, 8):
        page.keyboard.press("Enter")
        assert [s["hidden"] for s in _steps(page)] == [i >= n for i in range(7)]
    assert page.locator("#why-proof-next").is_disabled()
    for s in _steps(page):
        assert abs(s["m"] - s["p"]) <= 4 * s["se"]
    # Another width, within the lab's bounds: the score's variance is predicted as d_k.
    box = page.locator("#why-proof-dk")
    # The box offers the proof lab's web bounds (what a request may ask within 2 s).
    low, high = next(p for p in PROOF_SPEC.params if p.name == "d_k").bounds(web=True)
    assert int(box.get_attribute("min")) == low and int(box.get_attribute("max")) == high
    box.fill("256")
    page.locator("#why-proof-run").click()
    page.wait_for_function("document.querySelector('#why-proof-box').dataset.dk === '256'")
    steps = _steps(page)
    assert steps[5]["p"] == 256
    assert all(abs(s["m"] - s["p"]) <= 4 * s["se"] for s in steps)


def test_predict_cards_check_right_and_wrong(open_page, server):  # noqa: F811
    page = open_page()
    prompts = {p["id"]: p for p in page.request.get(server + "/api/predict").json()["prompts"]}
    assert page.locator("#why-predict article.predict").count() == len(prompts)
    ratio = page.locator("[data-prompt='stepper-ratio']")
    assert ratio.locator(".why-answer").is_hidden()
    ratio.locator("input").fill("1000")
    ratio.locator("button.why-check").click()
    assert ratio.get_attribute("data-result") == "wrong"
    assert "337,028" in ratio.locator(".why-answer").inner_text()
    ratio.locator("input").fill(str(round(prompts["stepper-ratio"]["answer"])))
    ratio.locator("button.why-check").click()
    assert ratio.get_attribute("data-result") == "right"
    head = page.locator("[data-prompt='multihead-it']")
    right = int(prompts["multihead-it"]["answer"])
    head.locator(f"input[value='{(right + 1) % 4}']").check()
    head.locator("button.why-check").click()
    assert head.get_attribute("data-result") == "wrong"
    head.locator(f"input[value='{right}']").check()
    head.locator("button.why-check").click()
    assert head.get_attribute("data-result") == "right"
    # The guess stays in this browser: a reload shows it checked again.
    page.reload()
    page.evaluate("document.querySelectorAll('details.why-fold').forEach(d => d.open = true)")
    page.wait_for_selector("[data-prompt='multihead-it'][data-result='right']")
    # "Show me" sets the figure up: the causal mask goes off for the stepper's question.
    mask = page.locator("[data-prompt='stepper-mask']")
    mask.locator("input[value='0']").check()
    mask.locator("button.why-check").click()
    assert mask.get_attribute("data-result") == "wrong"
    mask.locator(".why-answer a").click()
    assert not page.locator("#stepper-causal").is_checked()


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_screenshots_and_no_sideways_scroll(open_page, width):
    page = open_page(width)
    page.locator("#why-proof-next").click()
    page.locator("#why-proof-next").click()
    widest = page.evaluate(
        "Math.max(...[...document.querySelectorAll('#why *')]"
        ".map(e => e.getBoundingClientRect().right))"
    )
    assert widest <= width, f"the why-section is {widest}px wide in a {width}px window"
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#why").screenshot(path=str(ARTIFACTS / f"why-{width}.png"))
    page.locator("#why-proof-box").screenshot(path=str(ARTIFACTS / f"why-proof-{width}.png"))
