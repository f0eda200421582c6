"""The multi-head view's learned mode in Chromium, the network blocked: /learned opens it, it
draws every head of the shipped model with its label, takes a typed sequence, steps through the
checkpoints with Back and Forward, opens one head's query in the stepper with the model's own
numbers, and is usable from the keyboard alone. Screenshots at 375, 1280 and 1920 px land in
test-artifacts/."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_browser import ARTIFACTS, Offline, browser, server, sync_api  # noqa: F401

from attnlab.transformer import pretrained

pytestmark = pytest.mark.browser

TOKENS = [5, 9, 12, 40, 7, 5, 9, 12]  # "5 9 12" again: the copy should go on with 40
QUERY = 6  # the second 9: an induction head looks at 12, the token after the first 9
READY = "document.querySelector('#figure-multi-head').dataset.learned === 'ready'"


def _page(browser, server, width):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(server)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on(
        "console",
        lambda msg: msg.type == "error" and "422" not in msg.text and problems.append(msg.text),
    )
    return context, page, offline, problems


def _param(page, key):
    return page.evaluate(f"new URL(location).searchParams.get('{key}')")


def _induction_head(model) -> int:
    """The layer-1 head that puts most weight on the token after the earlier copy."""
    w = model.attention_weights(np.array([TOKENS]))[0, 1, :, QUERY]  # (heads, N)
    return int(w[:, TOKENS.index(TOKENS[QUERY]) + 1].argmax())


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_learned_mode_opens_a_head_in_the_stepper(browser, server, width):  # noqa: F811
    context, page, offline, problems = _page(browser, server, width)
    page.goto(server + "/learned")  # the old page's address opens the explorer in learned mode
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(READY)
    assert _param(page, "mh.mode") == "learned"
    assert page.locator("#mh-handset").is_hidden()
    assert page.locator("#mh-learned .learned-head canvas").count() == 8
    assert page.locator("#mh-heading").inner_text() == "Heads that learned"
    # It starts on a layer-1 head, where the induction heads are.
    assert page.locator("#learned-open select[name=layer]").input_value() == "1"
    assert page.locator(".learned-head.picked").get_attribute("data-layer") == "1"
    captions = page.locator(".learned-head figcaption").all_inner_texts()
    assert any("previous-token (" in c for c in captions[:4])
    assert any("induction (" in c for c in captions[4:])

    page.fill("#learned-form input[name=tokens]", " ".join(map(str, TOKENS)))
    page.click("#learned-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#learned-seq span').length === 8")
    assert page.locator("#learned-seq span").nth(7).get_attribute("title").endswith("predicts 40")
    assert _param(page, "mh.tokens") == ",".join(map(str, TOKENS))

    # The slider back to the untrained snapshot: no head has a pattern; Back undoes it.
    slider = page.locator("#learned-form input[name=checkpoint]")
    slider.evaluate("el => { el.value = '0'; el.dispatchEvent(new Event('change')); }")
    page.wait_for_function("document.getElementById('learned-step').textContent === '0'")
    assert {f.get_attribute("data-pattern") for f in page.locator(".learned-head").all()} == {
        "other"
    }
    assert _param(page, "mh.checkpoint") == "0"
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#figure-multi-head").screenshot(
        path=str(ARTIFACTS / f"learned-step0-{width}.png")
    )
    page.go_back()
    page.wait_for_function(
        "document.getElementById('learned-step').textContent.includes('trained')"
    )
    assert _param(page, "mh.checkpoint") is None
    page.go_forward()
    page.wait_for_function("document.getElementById('learned-step').textContent === '0'")
    page.go_back()
    page.wait_for_function(
        "document.getElementById('learned-step').textContent.includes('trained')"
    )

    # Open the induction head's query in the stepper: its weights are the model's own.
    model = pretrained("induction")
    head = _induction_head(model)
    page.select_option("#learned-open select[name=layer]", "1")
    page.select_option("#learned-open select[name=head]", str(head))
    page.fill("#learned-open input[name=query]", str(QUERY))
    page.locator("#learned-open input[name=query]").dispatch_event("change")
    page.wait_for_function(
        f"document.getElementById('learned-pick').textContent.includes('position {QUERY} ')"
    )
    page.locator("#figure-multi-head").screenshot(path=str(ARTIFACTS / f"learned-{width}.png"))
    page.click("#learned-open button[type=submit]")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert _param(page, "stepper.learned") == f"1,{head},{QUERY}"
    assert _param(page, "stepper.q") is None  # the URL names the head, not its numbers
    expected = model.attention_weights(np.array([TOKENS]))[0, 1, head, QUERY, : QUERY + 1]
    page.click("#stepper-steps li:nth-child(5) button")
    page.wait_for_function(
        "document.querySelector('#figure-attention-stepper').dataset.step === 'weights'"
    )
    cells = "#stepper-tables table[data-table=weights] td[data-col]"
    got = page.locator(cells).evaluate_all("els => els.map(e => Number(e.dataset.value))")
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert int(np.argmax(got)) == TOKENS.index(TOKENS[QUERY]) + 1
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.locator("#figure-attention-stepper").screenshot(
        path=str(ARTIFACTS / f"learned-stepper-{width}.png")
    )

    # A reload restores both: the learned mode on this sequence and the head in the stepper.
    page.reload()
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert page.locator("#figure-attention-stepper").get_attribute("data-step") == "weights"
    got = page.locator(cells).evaluate_all("els => els.map(e => Number(e.dataset.value))")
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert page.locator("#learned-seq span").count() == 8

    page.fill("#learned-form input[name=tokens]", "1 2 999")
    page.click("#learned-form button[type=submit]")
    page.wait_for_function("!document.getElementById('learned-error').hidden")
    assert "0 to 255" in page.locator("#learned-error").inner_text()
    context.close()
    assert offline.blocked == [] and problems == []


def test_learned_mode_by_keyboard_alone(browser, server):  # noqa: F811
    context, page, offline, problems = _page(browser, server, 1280)
    page.goto(server + "/")
    page.wait_for_selector("body[data-charts='drawn']")
    page.focus("#mh-mode input[value=handset]")
    page.keyboard.press("ArrowRight")  # the radio group's arrows pick the learned mode
    page.wait_for_function(READY)
    assert _param(page, "mh.mode") == "learned" and page.locator("#mh-handset").is_hidden()
    page.keyboard.press("Tab")  # into the tokens box
    page.keyboard.type(" ".join(map(str, TOKENS)))
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelectorAll('#learned-seq span').length === 8")
    for _ in range(3):  # seed, Show, the slider
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "checkpoint"
    page.keyboard.press("Home")
    page.wait_for_function("document.getElementById('learned-step').textContent === '0'")
    page.keyboard.press("End")
    page.wait_for_function(
        "document.getElementById('learned-step').textContent.includes('trained')"
    )
    page.focus("#learned-open select[name=layer]")  # past the eight heads' canvases
    page.keyboard.press("ArrowDown")  # layer 1
    page.keyboard.press("Tab")
    head = _induction_head(pretrained("induction"))
    for _ in range(head):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Tab")
    page.keyboard.press("Control+A")
    page.keyboard.type(str(QUERY))
    page.keyboard.press("Enter")  # submits the form: opens the stepper and moves focus there
    page.wait_for_function("document.activeElement.id === 'figure-attention-stepper'")
    assert page.locator("#stepper-learned").is_visible()
    assert _param(page, "stepper.learned") == f"1,{head},{QUERY}"
    # The figure's export follows the mode: the labels and the picked head's weights.
    exported = page.evaluate("""async () => { const m = await import('/static/js/export.js');
        return m.toJson(document.querySelector('#figure-multi-head').exportData()); }""")
    data = json.loads(exported)
    assert data["state"]["mode"] == "learned" and data["state"]["head"] == head
    weights = pretrained("induction").attention_weights(np.array([TOKENS]))[0, 1, head]
    np.testing.assert_allclose(data["tables"][1]["values"], weights, atol=6e-5)  # 4 places
    # Back to the mode's radio and ArrowLeft: the hand-set heads again.
    page.focus("#mh-mode input[value=learned]")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("!document.getElementById('mh-handset').hidden")
    assert _param(page, "mh.mode") is None
    context.close()
    assert offline.blocked == [] and problems == []
