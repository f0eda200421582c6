"""The inside of a real model in Chromium, under the multi-head view's model mode, on a tiny
GPT-2 folder served as ``attnlab serve --model`` serves it, the network blocked: the logit lens
grid, the attribution bars (a head's bar opens its row in the stepper), heads knocked out with
the prediction before and after, streamed generation with Stop, the heatmaps' hover, the state
in the URL (a reload restores it), the export, the keyboard alone and axe. The numbers are
compared with attnlab's Python API on the same folder. Screenshots at 375, 1280 and 1920 px land
in test-artifacts/ (and /tmp)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_browser import ARTIFACTS, Offline, browser, sync_api  # noqa: F401

from attnlab.models import ablate, load, write_tiny_gpt2
from attnlab.web import create_app

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat . the cat sat"
SHOWN = "document.getElementById('model-inside')?.dataset.inside === 'shown'"
AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("m") / "tiny", layers=2, d_model=32, heads=4)


@pytest.fixture(scope="module")
def origin(sync_api, tiny):  # noqa: F811
    import uvicorn

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
    serving.should_exit = True
    thread.join(timeout=20)
    sock.close()


@pytest.fixture(scope="module")
def model(tiny):
    return load(tiny)


def _open(browser, origin, query="", width=1280):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(origin)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on("console", lambda msg: msg.type == "error" and problems.append(msg.text))
    page.goto(f"{origin}/?mh.mode=model&mh.text={TEXT.replace(' ', '+')}{query}#figure-multi-head")
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(SHOWN)
    return context, page, offline, problems


def _param(page, key):
    return page.evaluate(f"new URL(location).searchParams.get('{key}')")


def _softmax(x):
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


def test_lens_attribution_and_a_heads_bar_opening_the_stepper(browser, origin, model):  # noqa: F811
    context, page, offline, problems = _open(browser, origin)
    run = model.run(model.tokenize(TEXT))
    # The lens grid: 2 layers x 10 positions, each cell the Python lens's top token.
    cells = page.locator("#inside-lens tbody td")
    assert cells.count() == 20
    for layer in range(2):
        top = run.logit_lens(layer)[0].argmax(-1)  # (N,)
        titles = page.locator(f"#inside-lens td[data-layer='{layer}']").evaluate_all(
            "els => els.map(e => e.title)"
        )
        assert [f"(id {i})" in t for t, i in zip(titles, top, strict=True)] == [True] * 10
    # A position's button picks it; attribution follows, a bar per head and part.
    page.click("#inside-lens button[data-position='5']")
    page.wait_for_function(
        "document.getElementById('inside-attr-note').textContent.includes('at position 5:')"
    )
    assert _param(page, "mh.pos") == "5"
    token = int(run.logits[0, 5].argmax())
    parts = run.logit_attribution(5, token)
    signs = page.locator("#inside-attr .attr-fill").evaluate_all(
        "els => els.map(e => e.classList.contains('neg'))"
    )
    names = page.locator("#inside-attr .attr-name").all_inner_texts()
    assert sorted(names) == sorted(parts) and len(names) == len(parts)
    assert signs == [parts[n] < 0 for n in names]
    assert f"(id {token})" in page.locator("#inside-attr-note").inner_text()
    # The picked head, large, with the tokens on both axes and each square's weight.
    labels = page.locator("#inside-zoom .zoom-label").all_text_contents()
    assert labels == [json.dumps(t) for t in TEXT.split() for _ in range(2)]
    weights = run.attention[0][0, 0]  # the picked head: layer 0, head 0
    titles = page.locator("#inside-zoom rect title").all_text_contents()
    assert len(titles) == 100 and titles[12].startswith('query 1 "cat" → key 2 "sat": weight')
    got = page.locator("#inside-zoom rect").evaluate_all(
        "els => els.map(e => e.getAttribute('fill'))"
    )
    shade = np.round(255 * (1 - np.minimum(1, weights.ravel())))  # 4 places then rounded
    assert [int(f[4:].split(",")[0]) for f in got] == pytest.approx(shade, abs=1)
    page.hover("#model-layers .model-head[data-layer='1'][data-head='2'] canvas")
    assert "L1H2: query" in page.locator("#inside-tip").inner_text()
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        for folder in (ARTIFACTS, Path("/tmp")):
            folder.mkdir(exist_ok=True)
            page.locator("#model-inside").screenshot(path=str(folder / f"model-inside-{width}.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    # A head's bar opens that head's row for the position read, in the stepper.
    page.click("#inside-attr button[data-layer='1'][data-head='2']")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert _param(page, "stepper.learned") == "1,2,5"
    context.close()
    assert offline.blocked == [] and problems == []


def test_heads_knocked_out_generation_reload_and_export(browser, origin, model):  # noqa: F811
    context, page, offline, problems = _open(browser, origin, "&mh.pos=9")
    page.click("#inside-heads button[data-head='1.2']")
    page.click("#inside-heads button[data-head='0.1']")
    page.wait_for_function("document.querySelectorAll('#inside-ablate tbody tr').length === 5")
    assert _param(page, "mh.off") == "1.2,0.1"
    assert page.locator("#inside-heads [aria-pressed='true']").count() == 2
    ids = model.tokenize(TEXT)
    after = _softmax(ablate(model, ids, heads=[(1, 2), (0, 1)]).logits[0, 9])
    best = model.detokenize([int(after.argmax())])
    assert (
        page.locator("#inside-ablate tbody tr")
        .first.locator("td")
        .nth(2)
        .inner_text()
        .startswith(json.dumps(best))
    )
    page.fill("#inside-gen input[name=new]", "5")
    page.click("#inside-go")
    page.wait_for_function(
        "document.getElementById('inside-gen-note').textContent.includes('generated')"
    )
    got = page.locator("#inside-out .new-token").evaluate_all("els => els.map(e => e.dataset.id)")
    expected = model.generate(ids, 5)[0, len(ids) :].tolist()
    assert got == [str(i) for i in expected]
    whole = page.locator("#inside-out").inner_text()
    assert whole == model.detokenize(np.concatenate([ids, expected]).tolist())
    assert _param(page, "mh.new") == "5"
    for folder in (ARTIFACTS, Path("/tmp")):
        folder.mkdir(exist_ok=True)
        page.locator("#model-inside").screenshot(path=str(folder / "model-inside-knocked-1280.png"))
    page.fill("#inside-gen input[name=new]", "64")  # more than the tiny model's positions allow
    page.click("#inside-go")
    page.wait_for_function("!document.getElementById('inside-error').hidden")
    assert "new: expected at most 54 new tokens" in page.locator("#inside-error").inner_text()
    page.fill("#inside-gen input[name=new]", "50")
    page.click("#inside-go")
    page.click("#inside-stop", force=True)  # a tiny model may be done before the click lands
    page.wait_for_function("document.getElementById('inside-stop').disabled")
    assert page.locator("#inside-out .new-token").count() <= 50
    exported = json.loads(
        page.evaluate("""async () => { const m = await import('/static/js/export.js');
        return m.toJson(document.querySelector('#figure-multi-head').exportData()); }""")
    )
    titles = [t["title"] for t in exported["tables"]]
    assert any(t.startswith("Logit lens") for t in titles) and any(
        "knocked out" in t for t in titles
    )
    assert exported["state"]["knocked_out"] == "1.2,0.1" and exported["state"]["position"] == 9
    page.reload()
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(SHOWN)
    page.wait_for_function("document.querySelectorAll('#inside-ablate tbody tr').length === 5")
    assert page.locator("#inside-heads [aria-pressed='true']").count() == 2
    assert page.locator("#inside-form input[name=pos]").input_value() == "9"
    context.close()
    assert offline.blocked == [] and [p for p in problems if "422" not in p] == []


def test_the_inside_by_keyboard_alone_and_axe(browser, origin):  # noqa: F811
    context, page, offline, problems = _open(browser, origin)
    page.focus("#inside-form input[name=pos]")
    page.keyboard.press("Control+A")
    page.keyboard.type("3")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "document.getElementById('inside-attr-note').textContent.includes('at position 3:')"
    )
    page.keyboard.press("Tab")  # the token box
    page.keyboard.press("Tab")  # Show inside
    page.keyboard.press("Tab")  # the lens grid's scrolling region
    assert page.evaluate("document.activeElement.classList.contains('lens-wrap')")
    page.keyboard.press("Tab")  # the first position's button in the lens
    assert page.evaluate("document.activeElement.dataset.position") == "0"
    page.keyboard.press("Enter")
    page.wait_for_function("new URL(location).searchParams.get('mh.pos') === '0'")
    page.focus("#inside-heads button[data-head='0.0']")
    page.keyboard.press("Space")
    page.wait_for_function("document.querySelectorAll('#inside-ablate tbody tr').length === 5")
    assert _param(page, "mh.off") == "0.0"
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => (await axe.run('#figure-multi-head', {resultTypes: ['violations'],
          rules: {'target-size': {enabled: true}}}))
          .violations.map(v => ({id: v.id, impact: v.impact,
          nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"""
    )
    # (the model view's own h4 under the section's h2 is a moderate heading-order finding)
    assert [v for v in found if v["impact"] in ("critical", "serious")] == [], found
    context.close()
    assert offline.blocked == [] and problems == []
