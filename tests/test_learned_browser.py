"""The learned-heads page in Chromium, the network blocked: it draws every head of the shipped
model with its label, takes a typed sequence, shows a refusal, and fits 375 to 1920 px.
Screenshots land in test-artifacts/."""

from __future__ import annotations

import pytest

from test_browser import ARTIFACTS, Offline, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_learned_heads_page(browser, server, width):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(server)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.goto(server + "/")
    page.click("footer a[href='/learned']")  # the explorer links here
    page.wait_for_url("**/learned")
    page.wait_for_selector("body[data-ready='true']")
    assert page.locator(".learned-head canvas").count() == 8
    captions = page.locator(".learned-head figcaption").all_inner_texts()
    assert any("previous-token (" in c for c in captions[:4])
    assert any("induction (" in c for c in captions[4:])
    # A typed sequence: the repeat is continued (the span after the second 12 predicts 40).
    page.fill("input[name=tokens]", "5 9 12 40 7 5 9 12")
    page.click("button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#learned-seq span').length === 8")
    assert page.locator("#learned-seq span").nth(7).get_attribute("title") == "predicts 40"
    # No horizontal scrolling at any width.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    # The slider steps back to the untrained snapshot: no head is labelled any more.
    slider = page.locator("input[name=checkpoint]")
    slider.evaluate("el => { el.value = '0'; el.dispatchEvent(new Event('input')); }")
    page.wait_for_function("document.getElementById('learned-step').textContent === '0'")
    page.wait_for_function(
        "[...document.querySelectorAll('.learned-head')].every(f => f.dataset.pattern === 'other')"
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"learned-step0-{width}.png"), full_page=True)
    last = slider.get_attribute("max")
    slider.evaluate(f"el => {{ el.value = '{last}'; el.dispatchEvent(new Event('input')); }}")
    page.wait_for_function(
        "document.getElementById('learned-step').textContent.includes('trained')"
    )
    page.screenshot(path=str(ARTIFACTS / f"learned-{width}.png"), full_page=True)
    page.fill("input[name=tokens]", "1 2 999")
    page.click("button[type=submit]")
    page.wait_for_function("document.getElementById('learned-error').textContent !== ''")
    assert "0 to 255" in page.locator("#learned-error").inner_text()
    context.close()
    assert offline.blocked == [] and problems == []
