"""The multi-head view's model mode in Chromium, the network blocked, on a tiny GPT-2 folder
given to the app as ``attnlab serve --model`` gives it: the mode's chip appears, the page says
the model is loading and then shows every layer x head with its score, a clicked row opens in
the stepper with the model's own weights, a reload restores both, and it all works from the
keyboard. Without a model the chip stays hidden. Screenshots at 375, 1280 and 1920 px land in
test-artifacts/."""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest
from test_browser import ARTIFACTS, Offline, browser, server, sync_api  # noqa: F401

from attnlab.models import load, write_tiny_gpt2
from attnlab.web import create_app, realmodels

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat . the cat sat"
LAYER, HEAD, QUERY = 1, 2, 8
SHOWN = "document.querySelector('#figure-multi-head').dataset.model === 'shown'"
CELLS = "#stepper-tables table[data-table=weights] td[data-col]"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("m") / "tiny", layers=2, d_model=32, heads=4)


@pytest.fixture(scope="module")
def gate():
    return threading.Event()


@pytest.fixture(scope="module")
def model_server(sync_api, tiny, gate):  # noqa: F811
    """The explorer with the tiny model, whose loading waits for ``gate`` (to see progress)."""
    import uvicorn

    real_load = realmodels.load
    realmodels.load = lambda path: (gate.wait(30), real_load(path))[1]  # put back at the end
    app = create_app(models=[tiny])
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
    gate.set()
    realmodels.load = real_load
    serving.should_exit = True
    thread.join(timeout=20)
    sock.close()


def _page(browser, origin, width=1280):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    offline = Offline(origin)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on(
        "console",
        lambda msg: msg.type == "error" and "503" not in msg.text and problems.append(msg.text),
    )
    page.goto(origin + "/")
    page.wait_for_selector("body[data-charts='drawn']")
    return context, page, offline, problems


def _param(page, key):
    return page.evaluate(f"new URL(location).searchParams.get('{key}')")


def _expected(tiny):
    model = load(tiny, dtype="float64")
    return model.run(model.tokenize(TEXT)).attention[LAYER][0, HEAD, QUERY, : QUERY + 1]


def test_without_a_model_the_mode_is_not_offered(browser, server):  # noqa: F811
    context, page, offline, problems = _page(browser, server)
    page.wait_for_function("document.querySelector('#mh-mode input[value=learned]') !== null")
    assert page.locator("#mh-mode-model").is_hidden()
    assert page.locator("#mh-mode label:visible").count() == 2
    context.close()
    assert offline.blocked == [] and problems == []


def test_model_mode_opens_a_head_in_the_stepper(browser, model_server, tiny, gate):  # noqa: F811
    context, page, offline, problems = _page(browser, model_server)
    page.wait_for_selector("#mh-mode-model:not([hidden])")
    page.click("#mh-mode-model")
    page.wait_for_function(
        "document.getElementById('model-status').textContent.includes('loading')"
    )
    assert _param(page, "mh.mode") == "model"
    assert page.locator("#mh-heading").inner_text() == "Heads of a real model"
    gate.set()  # the model loads: the page, polling, shows it
    page.wait_for_function(SHOWN)
    assert "2 layers × 4 heads of width 8" in page.locator("#model-status").inner_text()

    page.fill("#model-form input[name=text]", TEXT)
    page.click("#model-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#model-seq span').length === 10")
    assert page.locator("#model-layers .model-head canvas").count() == 8
    assert _param(page, "mh.text") == TEXT
    captions = page.locator(".model-head figcaption").all_inner_texts()
    assert captions[0].startswith("h0 ") and len(captions) == 8
    page.select_option("#model-form select[name=kind]", "first_token")
    assert _param(page, "mh.kind") == "first_token"

    # A click on row QUERY of layer 1, head 2 picks that head and query.
    canvas = page.locator(f".model-head[data-layer='{LAYER}'][data-head='{HEAD}'] canvas")
    box = canvas.bounding_box()
    canvas.click(position={"x": box["width"] / 2, "y": (QUERY + 0.5) * box["height"] / 10})
    page.wait_for_function(
        f"document.getElementById('model-pick-note').textContent.includes('position {QUERY}: ')"
    )
    assert (_param(page, "mh.layer"), _param(page, "mh.head")) == (str(LAYER), str(HEAD))
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.locator("#figure-multi-head").screenshot(path=str(ARTIFACTS / f"model-{width}.png"))
    page.set_viewport_size({"width": 1280, "height": 900})

    page.click("#model-open button[type=submit]")
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert "of tiny, query at position 8" in page.locator("#stepper-learned").inner_text()
    assert _param(page, "stepper.model") == "tiny"
    assert _param(page, "stepper.learned") == f"{LAYER},{HEAD},{QUERY}"
    page.click("#stepper-steps li:nth-child(5) button")
    page.wait_for_function(
        "document.querySelector('#figure-attention-stepper').dataset.step === 'weights'"
    )
    got = page.locator(CELLS).evaluate_all("els => els.map(e => Number(e.dataset.value))")
    np.testing.assert_allclose(got, _expected(tiny), atol=1e-6)
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        page.locator("#figure-attention-stepper").screenshot(
            path=str(ARTIFACTS / f"model-stepper-{width}.png")
        )
    page.set_viewport_size({"width": 1280, "height": 900})

    # A reload restores the mode on this text, the picked head and the stepper's row.
    page.reload()
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(SHOWN)
    page.wait_for_function("document.getElementById('stepper-learned')?.hidden === false")
    assert page.locator("#model-seq span").count() == 10
    assert page.locator(".model-head.picked").get_attribute("data-head") == str(HEAD)
    got = page.locator(CELLS).evaluate_all("els => els.map(e => Number(e.dataset.value))")
    np.testing.assert_allclose(got, _expected(tiny), atol=1e-6)

    page.fill("#model-form input[name=ids]", "1 2 999")
    page.click("#model-form button[type=submit]")
    page.wait_for_function("!document.getElementById('model-error').hidden")
    assert "ids: expected token ids from 0 to" in page.locator("#model-error").inner_text()
    context.close()
    assert offline.blocked == [] and [p for p in problems if "422" not in p] == []


def test_model_mode_by_keyboard_alone(browser, model_server, tiny, gate):  # noqa: F811
    gate.set()
    context, page, offline, problems = _page(browser, model_server)
    page.wait_for_selector("#mh-mode-model:not([hidden])")
    page.focus("#mh-mode input[value=learned]")
    page.keyboard.press("ArrowRight")  # the radio group's arrows reach the model mode
    page.wait_for_function(SHOWN)
    assert _param(page, "mh.mode") == "model"
    page.keyboard.press("Tab")  # into the text box (one model: no model picker)
    assert page.evaluate("document.activeElement.name") == "text"
    page.keyboard.type(TEXT)
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelectorAll('#model-seq span').length === 10")
    page.focus("#model-open select[name=layer]")  # past the form and the heads' canvases
    page.keyboard.press("ArrowDown")  # layer 1
    page.keyboard.press("Tab")
    for _ in range(HEAD):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Tab")
    page.keyboard.press("Control+A")
    page.keyboard.type(str(QUERY))
    page.keyboard.press("Enter")  # opens the stepper and moves focus there
    page.wait_for_function("document.activeElement.id === 'figure-attention-stepper'")
    assert _param(page, "stepper.learned") == f"{LAYER},{HEAD},{QUERY}"
    # The figure's export follows the mode: every head's scores and the picked head's weights.
    exported = page.evaluate("""async () => { const m = await import('/static/js/export.js');
        return m.toJson(document.querySelector('#figure-multi-head').exportData()); }""")
    data = json.loads(exported)
    assert data["state"]["mode"] == "model" and data["state"]["head"] == HEAD
    model = load(tiny, dtype="float64")
    weights = model.run(model.tokenize(TEXT)).attention[LAYER][0, HEAD]
    np.testing.assert_allclose(data["tables"][1]["values"], weights, atol=6e-5)  # 4 places
    assert len(data["tables"][0]["rows"]) == 8
    page.focus("#mh-mode input[value=model]")
    page.keyboard.press("ArrowLeft")  # back to the learned heads
    page.wait_for_function("!document.getElementById('mh-learned').hidden")
    assert _param(page, "mh.mode") == "learned"
    context.close()
    assert offline.blocked == [] and problems == []


LONG_TEXT = " ".join(["the cat sat on the mat ."] * 40)  # 280 words, 281 tokens with <s>


@pytest.fixture(scope="module")
def long_server(sync_api, tmp_path_factory):  # noqa: F811
    """The explorer with a 3-layer tiny GPT-2 of 600 positions whose tokenizer adds "<s>"."""
    import uvicorn
    from safetensors.numpy import load_file, save_file
    from test_models_web import _with_bos

    folder = write_tiny_gpt2(tmp_path_factory.mktemp("long") / "long", layers=3, d_model=16,
                             heads=2, positions=600)  # fmt: skip
    bos = _with_bos(folder)
    weights = load_file(str(folder / "model.safetensors"))
    grown = np.zeros((bos + 1, 16), np.float32)
    grown[:bos] = weights["transformer.wte.weight"]
    weights["transformer.wte.weight"] = grown
    save_file(weights, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"vocab_size": bos + 1}))
    app = create_app(models=[folder])
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
    yield f"http://{host}:{port}", folder
    serving.should_exit = True
    thread.join(timeout=20)
    sock.close()


def test_long_input_scrolls_one_layer_at_a_time_with_a_visible_bos(browser, long_server):  # noqa: F811
    origin, folder = long_server
    context, page, offline, problems = _page(browser, origin)
    page.goto(
        origin + "/?mh.mode=model&mh.text=" + LONG_TEXT.replace(" ", "+") + "#figure-multi-head"
    )
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function(SHOWN)
    assert page.locator("#model-seq span").count() == 281
    assert page.locator("#model-seq span").first.inner_text() == "<s>"  # was blank
    heads = page.locator("#model-layers .model-head canvas")
    assert heads.count() == 2  # one layer of 2 heads, not 3 x 2
    assert page.locator("#model-layers h4").all_inner_texts() == ["Layer 0 (full)"]
    box = page.locator(".model-layer.long .model-scroll").first
    assert box.evaluate("e => e.scrollWidth > e.clientWidth && e.scrollHeight > e.clientHeight")
    model = load(folder, dtype="float64")
    exact = model.run(LONG_TEXT).attention[2][0, 1]  # layer 2, head 1: (N, N)
    page.select_option("#model-open select[name=layer]", "2")
    page.wait_for_function(
        "document.querySelector('#model-layers h4')?.textContent === 'Layer 2 (full)'"
    )
    assert _param(page, "mh.layer") == "2"
    page.select_option("#model-open select[name=head]", "1")
    exported = page.evaluate("""async () => { const m = await import('/static/js/export.js');
        return m.toJson(document.querySelector('#figure-multi-head').exportData()); }""")
    np.testing.assert_allclose(
        json.loads(exported)["tables"][1]["values"], exact, atol=0.5 / 255 + 1e-6
    )
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.locator("#mh-model").screenshot(path=str(ARTIFACTS / f"model-long-{width}.png"))
    context.close()
    assert offline.blocked == [] and problems == []


def _tiny_bert(folder):
    """A random BERT folder (no head) in Hugging Face's layout, written without torch."""
    from safetensors.numpy import save_file

    from attnlab.models._config import Config
    from attnlab.models.families.bert import _tensors, shape_of

    config = {
        "model_type": "bert", "vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 32,
        "type_vocab_size": 2,
    }  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    sizes = _tensors(shape_of(Config(config, folder / "config.json")), 24, 2)
    save_file(
        {k: rng.normal(0, 0.5, v).astype(np.float32) for k, v in sizes.items()},
        str(folder / "model.safetensors"),
    )
    return folder


def test_an_encoders_head_is_drawn_both_ways(browser, tmp_path):  # noqa: F811
    """BERT's picked head as lines (BertViz's head view): the picked query's lines reach keys
    after it as well as before, each line's opacity its weight."""
    import uvicorn

    folder = _tiny_bert(tmp_path / "bert")
    app = create_app(models=[folder])
    app.state.models.wait()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    serving = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=serving.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not serving.started:
        time.sleep(0.05)
    try:
        context, page, offline, problems = _page(browser, f"http://{host}:{port}")
        page.wait_for_selector("#mh-mode-model:not([hidden])")
        page.click("#mh-mode-model")  # no tokenizer.json: the default text is refused, ids run
        page.wait_for_function(
            "document.getElementById('model-status').textContent.includes('1 layers')"
        )
        page.fill("#model-form input[name=ids]", "3 7 4 9 3 7")
        page.click("#model-form button[type=submit]")
        page.wait_for_function("document.querySelectorAll('#model-seq span').length === 6")
        assert "bidirectional" in page.locator("#model-layers h4").first.inner_text()
        lines = page.locator("#model-lines-svg line.query")
        keys = sorted(int(k) for k in lines.evaluate_all("ls => ls.map(l => l.dataset.key)"))
        assert keys == list(range(6))  # the last query (5) is picked: every key, as weights go
        weights = load(folder).run([3, 7, 4, 9, 3, 7]).attention[0][0, 0, 5]
        shown = lines.evaluate_all("ls => ls.map(l => +l.getAttribute('stroke-opacity'))")
        np.testing.assert_allclose(sorted(shown), sorted(weights), atol=1e-3)
        canvas = page.locator(".model-head[data-layer='0'][data-head='1'] canvas")
        box = canvas.bounding_box()
        canvas.click(position={"x": box["width"] / 2, "y": 1.5 * box["height"] / 6})  # query 1
        page.wait_for_function("document.querySelectorAll('#model-lines-svg line.query').length")
        later = page.locator("#model-lines-svg line.query").evaluate_all(
            "ls => ls.filter(l => +l.dataset.key > +l.dataset.query).length"
        )
        assert later == 4  # query 1 reaches keys 2..5: after it, as an encoder does
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#mh-model").screenshot(path=str(ARTIFACTS / "model-bert-lines.png"))
        context.close()
        assert offline.blocked == []
        assert [p for p in problems if "422" not in p] == []  # the refused default text
    finally:
        serving.should_exit = True
        thread.join(timeout=20)
        sock.close()
