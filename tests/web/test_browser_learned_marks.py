"""What the learned view and the stepper say about the model's guesses and the softmax, in
Chromium with the network blocked: the learned view opens on a query in the repeated half, a
typed sequence gets ✓ marks on the tokens the model predicted (on the predicted token, shown
without hovering), a snapshot with no output layer of its own gets none and says why, and the
stepper's softmax working writes e^(−∞) = 0 for a blocked key and enough digits that a
saturated row's division reads right."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

from attnlab.transformer import pretrained

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-class")
READY = "document.querySelector('#figure-multi-head').dataset.learned === 'ready'"
TOKENS = [5, 9, 12, 40, 7, 5, 9, 12, 40, 7]


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def _positions(page, selector: str) -> list[int]:
    return [int(p) for p in page.locator(selector).evaluate_all(
        "es => es.map((e) => e.dataset.position)")]  # fmt: skip


def test_learned_view_opens_in_the_repeat_and_marks_predicted_tokens(opened, server):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = opened(1280, 900)
    page.goto(server + "/?mh.mode=learned#figure-multi-head")
    page.wait_for_function(READY)
    n = page.locator("#learned-seq > span").count()
    copied = page.locator("#learned-seq > span.copy").count()
    assert copied > 0
    (query,) = _positions(page, "#learned-seq > span.query")
    assert query >= n - copied, (query, n, copied)  # in the repeated half, not position 0
    assert page.locator("#learned-open input[name=query]").input_value() == str(query)

    page.fill("#learned-form input[name=tokens]", " ".join(map(str, TOKENS)))
    page.click("#learned-form button[type=submit]")
    page.wait_for_function(
        f"document.querySelectorAll('#learned-seq > span').length === {len(TOKENS)}"
    )
    predicted = pretrained("induction").predict(np.array([TOKENS]))[0]
    right = [i for i in range(1, len(TOKENS)) if predicted[i - 1] == TOKENS[i]]
    assert right, predicted  # the model continues the copy
    assert _positions(page, "#learned-seq > span.hit") == right
    for i in right:  # a ✓ on the token itself, on screen without hovering
        assert page.locator(f"#learned-seq > span[data-position='{i}'] .mark").is_visible()
    # A typed sequence opens on its first repeated token too.
    assert _positions(page, "#learned-seq > span.query") == [TOKENS.index(TOKENS[5], 0) + 5]
    page.locator("#figure-multi-head").screenshot(path=str(SHOTS / "learned-marks-1280.png"))

    # The untrained snapshot kept no output layer: no marks, and the line says why.
    slider = page.locator("#learned-form input[name=checkpoint]")
    slider.evaluate("el => { el.value = '0'; el.dispatchEvent(new Event('change')); }")
    page.wait_for_function("document.getElementById('learned-step').textContent === '0'")
    assert page.locator("#learned-seq .hit").count() == 0
    assert "output layer" in page.locator("#learned-seq").inner_text()


def test_softmax_working_writes_blocked_keys_and_saturated_rows(opened, server):  # noqa: F811
    page = opened(1280, 900)
    page.goto(server + "/?stepper.step=weights")
    page.wait_for_selector("#stepper-working li")
    first = page.locator("#stepper-working li").first.inner_text()
    assert "e^(−∞) = 0" in first, first  # the causal mask blocks row 1's later keys

    # One query, two keys, scores 7.6407 and -2: e^7.6407 ≈ 2080.6 of a sum ≈ 2080.7.
    page.goto(server + "/?stepper.step=weights&stepper.q=1&stepper.k=7.6407;-2&stepper.v=1;0"
              "&stepper.causal=0&stepper.scaled=0")  # fmt: skip
    page.wait_for_function(
        "document.querySelector('#stepper-working li')?.textContent.includes('7.641')"
    )
    text = page.locator("#stepper-working li").first.inner_text()
    divisions = re.findall(r"(-?[\d.e+-]*\d) / (-?[\d.e+-]*\d) = (-?[\d.e+-]*\d)", text)
    assert len(divisions) == 2, text
    for top, bottom, weight in divisions:
        assert top != bottom or weight == "1", text
        # The quotient of the printed numbers, to 4 significant digits, is the weight printed.
        assert float(f"{float(top) / float(bottom):.4g}") == float(weight), text
