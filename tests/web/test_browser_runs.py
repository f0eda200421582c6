"""Training on the page and knocking heads out, in Chromium with the network blocked: Train
starts a run whose loss curve grows, Stop cancels it (the server's run says so and its step
counter stops), a finished run reports its summary, and in the learned view pressing a head
knocks it out and shows what copying loses. Driven by the keyboard alone; screenshots at 375,
1280 and 1920 px go to /tmp/shots-runs/."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from test_browser import Offline, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-runs")
KNOCK_READY = "document.querySelector('#learned-knock').dataset.knocked"


def _page(browser, server, width):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(server)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(60_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    return context, page, offline, problems


def _tab_to(page, selector, limit=400):
    """Press Tab until ``selector`` has the focus: it is reachable by keyboard."""
    for _ in range(limit):
        if page.evaluate("(s) => document.activeElement === document.querySelector(s)", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"{selector} never took the focus by Tab")


def _step(page) -> int:
    return int(re.search(r"step (\d+) of", page.locator("#run-status").inner_text()).group(1))


def test_stop_cancels_a_run_by_keyboard(browser, server):  # noqa: F811
    context, page, offline, problems = _page(browser, server, 1280)
    page.goto(server + "/#runs")
    page.wait_for_selector("body[data-ready='true']")
    page.wait_for_function("document.querySelector('#run-key li')")  # runs.js started
    _tab_to(page, "#run-form select[name=lab]")
    assert page.locator("#run-form select[name=lab]").input_value() == "train-induction"
    _tab_to(page, "#run-start")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('#runs').dataset.run === 'running'")
    page.wait_for_function(
        "/step ([3-9]|\\d\\d+) of 600/.test(document.querySelector('#run-status').textContent)"
    )
    assert page.evaluate("document.activeElement.id") == "run-stop"  # Stop took the focus
    assert page.locator("#run-chart path.line").get_attribute("d").count("L") >= 2
    page.keyboard.press("Enter")  # Stop
    page.wait_for_function("document.querySelector('#runs').dataset.run === 'cancelled'")
    stopped = _step(page)
    run_id = page.evaluate("(async () => (await (await fetch('/api/runs/' + "
                           "new URL(performance.getEntriesByType('resource').map((e) => e.name)"
                           ".filter((n) => /api\\/runs\\/[0-9a-f]+/.test(n)).at(-1)).pathname"
                           ".split('/')[3])).json()))()")  # fmt: skip
    assert run_id["state"] == "cancelled" and run_id["step"] < 600
    time.sleep(1.5)
    again = page.evaluate(
        f"(async () => (await (await fetch('/api/runs/{run_id['id']}')).json()).step)()"
    )
    assert again == run_id["step"]  # the server's loop stopped
    assert stopped <= run_id["step"] + 1
    assert page.locator("#run-start").is_enabled() and page.locator("#run-stop").is_disabled()
    assert page.locator("#run-status").inner_text().endswith("stopped")
    SHOTS.mkdir(exist_ok=True)
    page.locator("#runs").screenshot(path=str(SHOTS / "runs-stopped-1280.png"))
    assert not problems and not offline.blocked
    context.close()


def test_a_finished_run_reports_and_screenshots(browser, server):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        context, page, offline, problems = _page(browser, server, width)
        page.goto(server + "/#runs")
        page.wait_for_function("document.querySelector('#run-key li')")
        page.select_option("#run-form select[name=lab]", "train-positions")
        page.focus("#run-start")
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#runs').dataset.run === 'done'")
        assert _step(page) == 600  # two models of 300 steps, the CLI's default
        assert page.locator("#run-summary li").count() == 2
        assert page.locator("#run-open").is_hidden()  # an encoder: no learned view
        page.locator("#runs").screenshot(path=str(SHOTS / f"runs-{width}.png"))
        assert not problems and not offline.blocked
        context.close()


def test_a_click_knocks_a_head_out_in_the_learned_view(browser, server):  # noqa: F811
    for width in (375, 1280, 1920):
        context, page, offline, problems = _page(browser, server, width)
        page.goto(server + "/learned")
        page.wait_for_function(KNOCK_READY + " === 'none'")
        head = page.locator("#knock-heads button[data-head='0.2']")
        assert head.get_attribute("aria-pressed") == "false"
        _tab_to(page, "#knock-heads button[data-head='0.2']")
        page.keyboard.press("Enter")
        page.wait_for_function(KNOCK_READY + " === '0.2'")
        assert head.get_attribute("aria-pressed") == "true"
        cells = page.locator("#knock-table tr td").all_inner_texts()  # intact row, then knocked
        intact, knocked = float(cells[0].rstrip("%")), float(cells[3].rstrip("%"))
        assert intact > 90 and knocked < intact - 30
        assert float(cells[4]) > float(cells[1]) + 1  # second-copy loss up by a nat or more
        assert "layer 0 head 2" in page.locator("#knock-result").inner_text()
        assert page.locator("#knock-chart path.line").count() == 3
        page.locator("#learned-knock").screenshot(path=str(SHOTS / f"knock-{width}.png"))
        head.click()  # a mouse click puts it back
        page.wait_for_function(KNOCK_READY + " === 'none'")
        assert not problems and not offline.blocked
        context.close()


def test_a_trained_run_opens_in_the_learned_view(browser, server):  # noqa: F811
    context, page, offline, problems = _page(browser, server, 1280)
    page.goto(server + "/#runs")
    page.wait_for_function("document.querySelector('#run-key li')")
    # A short induction run made through the API (the page's own runs take the CLI's defaults)
    run_id = page.evaluate("(async () => (await (await fetch('/api/runs', {method: 'POST', "
                           "headers: {'Content-Type': 'application/json'}, body: JSON.stringify("
                           "{lab: 'train-induction', params: {steps: 20, fresh: 20}})})).json()).id)()")  # fmt: skip
    state = f"(async () => (await (await fetch('/api/runs/{run_id}')).json()).state)()"
    deadline = time.monotonic() + 120
    while page.evaluate(state) != "done":  # an async predicate would be a Promise: always true
        assert time.monotonic() < deadline
        time.sleep(0.1)
    page.goto(server + f"/?mh.mode=learned&mh.run={run_id}#figure-multi-head")
    page.wait_for_function(KNOCK_READY + " === 'none'")
    assert page.locator("#learned-knock").get_attribute("data-model") == f"run {run_id}"
    assert "trained on this page" in page.locator("#knock-model").inner_text()
    assert page.locator("#mh-learned .learned-head canvas").count() == 8

    # One of its heads opened in the stepper: the stepper's weights are the trained model's row.
    view = page.evaluate(f"(async () => (await fetch('/api/runs/{run_id}/learned?seed=0'))"
                         ".json())()")  # fmt: skip
    query = len(view["tokens"]) - 1
    page.select_option("#learned-open select[name=layer]", "1")
    page.select_option("#learned-open select[name=head]", "3")
    page.fill("#learned-open input[name=query]", str(query))
    page.locator("#learned-open input[name=query]").dispatch_event("change")
    page.click("#learned-open button[type=submit]")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert page.locator("#learned-error").is_hidden()
    assert _param(page, "stepper.run") == run_id
    assert _param(page, "stepper.learned") == f"1,3,{query}" and _param(page, "stepper.q") is None
    assert f"trained on this page (run {run_id})" in page.locator("#stepper-learned").inner_text()
    page.click("#stepper-steps li:nth-child(5) button")
    page.wait_for_function(STEPPER_AT + " === 'weights'")
    expected = view["weights"][1][3][query][: query + 1]  # the server's own, to 4 places
    np.testing.assert_allclose(_stepper_weights(page), expected, atol=6e-5)
    SHOTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.locator("#figure-attention-stepper").screenshot(
            path=str(SHOTS / f"stepper-run-{width}.png"))  # fmt: skip

    # A reload keeps the trained head in the stepper, at the same step, with the same numbers.
    page.reload()
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert page.locator("#figure-attention-stepper").get_attribute("data-step") == "weights"
    assert f"run {run_id}" in page.locator("#stepper-learned").inner_text()
    np.testing.assert_allclose(_stepper_weights(page), expected, atol=6e-5)

    # A run the server does not keep: the stepper says so, naming it, and shows the example.
    page.goto(server + f"/?stepper.learned=1,3,{query}&stepper.tokens=1,2,3&stepper.run=ffffff")
    page.wait_for_selector("body[data-ready='true']")
    page.wait_for_function("!document.getElementById('stepper-error').hidden")
    said = page.locator("#stepper-error").inner_text()
    assert "'ffffff'" in said and "run" in said, said
    page.locator("#figure-attention-stepper").screenshot(path=str(SHOTS / "stepper-lost-1280.png"))
    problems[:] = [p for p in problems if "422" not in p]  # the refused request, logged
    assert not problems and not offline.blocked
    context.close()


STEPPER_AT = "document.querySelector('#figure-attention-stepper').dataset.step"


def _stepper_weights(page) -> list[float]:
    cells = "#stepper-tables table[data-table=weights] td[data-col]"
    return page.locator(cells).evaluate_all("els => els.map(e => Number(e.dataset.value))")


def _param(page, key):
    return page.evaluate(f"new URL(location).searchParams.get('{key}')")


def test_train_induction_at_its_defaults_then_open_and_knock_out_its_heads(browser, server):  # noqa: F811
    # The whole path a reader takes: about 600 steps of the CLI's default run (tens of seconds).
    context, page, offline, problems = _page(browser, server, 1280)
    page.set_default_timeout(300_000)
    page.goto(server + "/#runs")
    page.wait_for_function("document.querySelector('#run-key li')")
    page.focus("#run-start")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('#runs').dataset.run === 'done'")
    assert _step(page) == 600
    assert "copy" in page.locator("#run-summary").inner_text()
    page.locator("#runs").screenshot(path=str(SHOTS / "runs-induction-done-1280.png"))
    _tab_to(page, "#run-open")
    page.keyboard.press("Enter")
    page.wait_for_function(KNOCK_READY + " === 'none'")
    assert _param_run(page) is not None
    assert page.locator("#learned-knock").get_attribute("data-model") == f"run {_param_run(page)}"
    page.focus("#knock-heads button[data-head='0.0']")
    page.keyboard.press("Space")
    page.wait_for_function(KNOCK_READY + " === '0.0'")
    cells = page.locator("#knock-table tr td").all_inner_texts()
    assert float(cells[0].rstrip("%")) > 50  # the page's own model learned to copy
    page.locator("#figure-multi-head").screenshot(path=str(SHOTS / "learned-run-1280.png"))
    assert not problems and not offline.blocked
    context.close()


def _param_run(page):
    return _param(page, "mh.run")
