"""The page's one number rule, with more digits when the reader asks: the "Digits shown" control
rewrites every table at once, lives in the URL (a link or a reload keeps it, Back undoes it), and
the default prints the chapter's numbers as the chapter prints them.

Fixtures as in test_browser.py: uvicorn on a free 127.0.0.1 port, Debian's Chromium, every other
request blocked.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

import attnlab as al
from attnlab.core import example
from attnlab.core.numbers import format_number

pytestmark = pytest.mark.browser

WEIGHTS = "#stepper-tables .step-result td[data-col]"


def _exact_weights() -> list[float]:
    """The worked example's weights, from the library (the oracle the page must print)."""
    q, k, v = (np.array(a) for a in (example.EXAMPLE_Q, example.EXAMPLE_K, example.EXAMPLE_V))
    _, w = al.attention(q, k, v, al.masks.Causal(), return_weights=True)
    return [float(x) for x in np.asarray(w).ravel()]


@pytest.fixture
def page(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open(1280, 900)
    pages.close()


def _to_weights(page) -> list[str]:
    """The stepper's softmax table, stepped to by keyboard."""
    page.locator("#stepper-next").focus()
    for _ in range(4):  # inputs -> scores -> scaled -> masked -> softmax
        page.keyboard.press("Enter")
    page.wait_for_function(
        "document.querySelector('#stepper-title').textContent.includes('Softmax')"
    )
    return page.locator(WEIGHTS).all_inner_texts()


def test_more_digits_rewrite_the_tables_and_stay_in_the_link(page):
    exact = _exact_weights()
    assert _to_weights(page) == [format_number(x) for x in exact]  # 0.1956, as the chapter
    page.select_option("#digits", "6")
    want = format_number(exact[2], digits=6)
    page.wait_for_function(f"document.querySelectorAll({WEIGHTS!r})[2].textContent === {want!r}")
    six = page.locator(WEIGHTS).all_inner_texts()
    assert six == [format_number(x, digits=6) for x in exact]
    assert six != [format_number(x) for x in exact]
    assert "digits=6" in page.url

    # A reload (or the link) keeps the reader's choice.
    page.reload()
    page.wait_for_selector("body[data-ready='true']", state="attached")
    assert page.locator("#digits").input_value() == "6"
    page.wait_for_function(
        "document.querySelector('#stepper-title').textContent.includes('Softmax')"
    )
    assert page.locator(WEIGHTS).all_inner_texts() == [format_number(x, digits=6) for x in exact]

    # Back returns to the chapter's four digits.
    page.select_option("#digits", "4")
    assert "digits=" not in page.url
    page.go_back()
    page.wait_for_function("document.querySelector('#digits').value === '6'")


def test_a_bad_digits_in_the_link_falls_back_to_four(page, server):  # noqa: F811
    page.goto(server + "/?digits=99")
    page.wait_for_selector("body[data-ready='true']", state="attached")
    assert page.locator("#digits").input_value() == "4"
