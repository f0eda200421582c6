"""A real model's head in the stepper, in Chromium with the network blocked: its rows carry
their 0-based positions and tokens (a leading space shown as ␣), a capped layer gets its capped
step and a layer with sinks its sink column, and the stepper's weights equal the model's row.

The model is a tiny GPT-2 written by attnlab; its layers are given a softcap (layer 0) and
sinks (layer 1) as Gemma 2's and gpt-oss's are, so their rows read back through
``LayerAttention.trace`` are the model's own rows (tests/web/test_models_web_oracle.py holds
the same steps to transformers' Gemma 2 and gpt-oss). Screenshots at 375, 1280 and 1920 px go to
/tmp/shots-classroom/.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_browser import Offline, browser, sync_api  # noqa: F401

from attnlab.models import load, write_tiny_gpt2
from attnlab.web import create_app, realmodels

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-classroom")
TEXT = "the cat sat on the mat . the cat sat"
CAP, SINKS = 1.5, np.array([0.5, -1.0, 2.0, 0.0])
QUERY = 8
WEIGHTS = "#stepper-tables table[data-table=weights] td[data-col]"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("m") / "tiny", layers=2, d_model=32, heads=4)


def _varied(run):
    """The run with layer 0 capped and layer 1 given a sink per head."""
    first, second = run.layers
    layers = [dataclasses.replace(first, softcap=CAP, _weights=None),
              dataclasses.replace(second, sinks=SINKS, _weights=None)]  # fmt: skip
    return dataclasses.replace(run, layers=layers)


@pytest.fixture(scope="module")
def origin(sync_api, tiny):  # noqa: F811
    import uvicorn

    real_run = realmodels.Shelf.run
    realmodels.Shelf.run = lambda self, name, ids: _varied(real_run(self, name, ids))
    app = create_app(models=[tiny])
    app.state.models.wait()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    serving = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=serving.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not serving.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://{host}:{port}"
    realmodels.Shelf.run = real_run
    serving.should_exit = True
    thread.join(timeout=20)
    sock.close()


@pytest.fixture(scope="module")
def expected(tiny):
    """(ids, the model's own row per (layer, head), its sink's share per head of layer 1)."""
    model = load(tiny)
    ids = model.tokenize(TEXT)
    run = _varied(model.run(ids))
    rows = {(layer, head): run.trace(layer, head, QUERY).weights[0, : QUERY + 1]
            for layer in (0, 1) for head in range(4)}  # fmt: skip
    pieces = [model.detokenize([i]) for i in ids]
    return ids, rows, pieces


def _open(browser, origin, ids, layer, head, width=1280):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(origin)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    tokens = ",".join(map(str, ids))
    page.goto(f"{origin}/?stepper.model=tiny&stepper.learned={layer},{head},{QUERY}"
              f"&stepper.tokens={tokens}#figure-attention-stepper")  # fmt: skip
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    return context, page, offline, problems


def _go(page, step: str) -> None:
    ids = page.evaluate("[...document.querySelectorAll('#stepper-steps button')].map(b => b"
                        ".textContent)")  # fmt: skip
    n = next(i for i, text in enumerate(ids) if text.split(". ", 1)[-1].strip() and
             step in text)  # fmt: skip
    page.locator("#stepper-steps button").nth(n).click()


def test_a_capped_heads_steps_and_its_tokens(browser, origin, expected):  # noqa: F811
    ids, rows, pieces = expected
    context, page, offline, problems = _open(browser, origin, ids, 0, 1)
    names = page.locator("#stepper-steps .step-name").all_inner_texts()
    at = [i for i, n in enumerate(names) if "Capped scores" in n]
    assert len(at) == 1 and "Mask added" in names[at[0] + 1]  # the cap, then the mask on it
    # Rows carry 0-based positions and tokens, a leading space shown as ␣.
    keys = page.locator("#stepper-tables table[data-table=k] tbody th").all_inner_texts()
    assert keys == [f"{p} {pieces[p].replace(' ', '␣')}" for p in range(QUERY + 1)]
    assert keys[1] == "1 cat"  # this tokenizer's words carry no space (test_models_web: ␣)
    note = page.locator("#stepper-learned").inner_text()
    assert "position 8" in note and "capped at ±1.5" in note
    _go(page, "Capped scores")
    page.wait_for_function("document.querySelector('#figure-attention-stepper').dataset.step"
                           " === 'capped'")  # fmt: skip
    capped = page.locator("#stepper-tables table[data-table=capped] td[data-col]")
    values = np.array(capped.evaluate_all("els => els.map(e => Number(e.dataset.value))"))
    assert np.all(np.abs(values) < CAP)
    _go(page, "Softmax")
    page.wait_for_function("document.querySelector('#figure-attention-stepper').dataset.step"
                           " === 'weights'")  # fmt: skip
    got = page.locator(WEIGHTS).evaluate_all("els => els.map(e => Number(e.dataset.value))")
    np.testing.assert_allclose(got, rows[(0, 1)], atol=1e-6)
    SHOTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        page.locator("#figure-attention-stepper").screenshot(
            path=str(SHOTS / f"stepper-capped-{width}.png"))  # fmt: skip
    context.close()
    assert offline.blocked == [] and problems == []


def test_a_heads_sink_is_its_own_column(browser, origin, expected):  # noqa: F811
    ids, rows, _ = expected
    context, page, offline, problems = _open(browser, origin, ids, 1, 2)
    _go(page, "Softmax")
    page.wait_for_function("document.querySelector('#figure-attention-stepper').dataset.step"
                           " === 'weights'")  # fmt: skip
    got = np.array(page.locator(WEIGHTS).evaluate_all(
        "els => els.map(e => Number(e.dataset.value))"))  # fmt: skip
    np.testing.assert_allclose(got, rows[(1, 2)], atol=1e-6)
    sink = page.locator("#stepper-tables table[data-table=sink]")
    assert sink.locator("thead th").all_inner_texts()[-2:] == ["sink logit", "sink's share"]
    logit, share = sink.locator("td[data-col]").evaluate_all(
        "els => els.map(e => Number(e.dataset.value))")  # fmt: skip
    assert logit == pytest.approx(SINKS[2])
    assert share == pytest.approx(1 - got.sum(), abs=1e-6)  # what the weights fall short of 1 by
    assert "sink's share" in page.locator("#stepper-working").inner_text()
    page.locator("#figure-attention-stepper").screenshot(path=str(SHOTS / "stepper-sink-1280.png"))
    context.close()
    assert offline.blocked == [] and problems == []


def test_the_model_views_picked_head_has_its_tokens_on_both_axes(browser, origin, expected):  # noqa: F811
    _, rows, pieces = expected
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    offline = Offline(origin)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{origin}/?mh.mode=model&mh.model=tiny&mh.text={TEXT.replace(' ', '+')}"
              f"&mh.layer=1&mh.head=2&mh.query={QUERY}#figure-multi-head")  # fmt: skip
    page.wait_for_selector("#model-pick-map table")
    table = page.locator("#model-pick-map table")
    cols = table.locator("thead th").all_inner_texts()[1:]
    assert cols == [f"{p} {piece}" for p, piece in enumerate(pieces)]
    assert table.locator("tbody th").all_inner_texts() == cols
    assert table.get_attribute("class").split() == ["matrix", "heatmap"]  # 10 tokens: shaded
    row = table.locator(f"tbody tr:nth-child({QUERY + 1}) td[data-col]")
    got = np.array(row.evaluate_all("els => els.map(e => Number(e.dataset.value))"))
    np.testing.assert_allclose(got[: QUERY + 1], rows[(1, 2)], atol=1e-4)  # 4 places
    SHOTS.mkdir(exist_ok=True)
    page.locator("#figure-multi-head").screenshot(path=str(SHOTS / "model-pick-map-1280.png"))
    context.close()
    assert offline.blocked == []
