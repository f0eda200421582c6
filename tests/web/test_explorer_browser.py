"""The explorer in a real browser: URL state, presentation, export, phones, keyboard, offline.

Reuses test_browser's server, browser and offline guard (every non-loopback request is blocked
and fails the test). Screenshots of each figure at 375, 1280 and 1920 px (presenting) land in
test-artifacts/.
"""

from __future__ import annotations

import re

import pytest
from test_browser import ARTIFACTS, Offline, browser, server, sync_api  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

FIGURES = ["figure-attention-stepper", "figure-sqrt-dk-histogram", "figure-permutation-demo",
           "figure-multi-head"]  # fmt: skip


def _open(browser, server, path="/", width=1280, height=900):  # noqa: F811
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    offline = Offline(server)
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    page.on(
        "console",
        lambda msg: (
            msg.type == "error" and "status of 422" not in msg.text and problems.append(msg.text)
        ),
    )
    page.goto(server + path)
    ready(page)
    return context, page, offline, problems


def ready(page):
    page.wait_for_selector("body[data-charts='drawn']")
    page.wait_for_function("() => !document.querySelector('[aria-busy]')")


@pytest.fixture
def opened(browser, server):  # noqa: F811
    made = []

    def make(path="/", width=1280, height=900):
        made.append(_open(browser, server, path, width, height))
        return made[-1][1]

    yield make
    for context, _, offline, problems in made:
        context.close()
        assert offline.blocked == [], f"the page tried to reach the network: {offline.blocked}"
        assert problems == [], problems


def query(page) -> dict[str, str]:
    from urllib.parse import parse_qsl, urlparse

    return dict(parse_qsl(urlparse(page.url).query))


def stepper_values(page) -> list[float]:
    cells = page.locator("#stepper-tables .step-result td[data-col]")
    return [float(v) for v in cells.evaluate_all("els => els.map(e => e.dataset.value)")]


def test_state_lives_in_the_url_and_survives_back_reload_and_links(opened, server):  # noqa: F811
    page = opened()
    page.uncheck("#stepper-causal")
    page.wait_for_function("() => new URL(location).searchParams.get('stepper.causal') === '0'")
    page.click("#stepper-steps li:nth-child(5) button")  # softmax
    page.click("#stepper-tables .step-result td[data-row='0'][data-col='1']")  # pin (1, 2)
    page.check("#hist-scaled")
    page.wait_for_function(
        "() => document.querySelector('#figure-sqrt-dk-histogram').dataset.scaled === 'true'"
    )
    page.locator("#hist-dk").focus()
    page.keyboard.press("End")
    page.wait_for_function("() => new URL(location).searchParams.get('hist.dk') === '256'")
    page.click("#perm-swap")
    page.wait_for_function("() => new URL(location).searchParams.get('perm.order') === '1,5,3,4,2'")
    page.check("#mh-words input[value='7']")
    page.wait_for_function("() => new URL(location).searchParams.get('mh.word') === '8'")
    q = query(page)
    assert q["stepper.step"] == "weights" and q["stepper.cell"] == "1,2"
    assert q["hist.scaled"] == "1"

    def same_state(p):
        ready(p)
        p.wait_for_function(
            "() => document.querySelector('#figure-multi-head').dataset.query === '7'"
        )
        assert not p.locator("#stepper-causal").is_checked()
        assert "Softmax" in p.locator("#stepper-title").inner_text()
        assert stepper_values(p)[:2] == pytest.approx([0.000003, 0.999997], abs=5e-7)
        assert p.locator("#stepper-tables td.selected").get_attribute("data-col") == "1"
        hist = p.locator("#figure-sqrt-dk-histogram")
        assert (
            hist.get_attribute("data-scaled") == "true" and hist.get_attribute("data-dk") == "256"
        )
        assert (
            p.locator("#hist-scaled").is_checked() and p.locator("#hist-dk").input_value() == "256"
        )
        assert (
            p.locator("#perm-table tbody tr").evaluate_all(
                "rs => rs.map(r => r.dataset.token).join()"
            )
            == "0,4,2,3,1"
        )
        assert p.locator("#mh-words input[value='7']").is_checked()

    # Defect 1: follow the API reference link, press Back: controls and figures agree.
    page.click("footer a[href='/docs']")
    page.wait_for_url("**/docs")
    page.go_back()
    same_state(page)
    # Reload, and the copied link opened elsewhere, show the same state.
    page.reload()
    same_state(page)
    page.click("#figure-multi-head .copy-link")
    link = page.locator("#figure-multi-head .copy-link").get_attribute("data-link")
    assert link.endswith("#figure-multi-head") and "mh.word=8" in link
    same_state(opened(link.removeprefix(server)))
    # Back undoes one change at a time, in the figure and in its control.
    page.go_back()  # the word "it" -> the default
    page.wait_for_function(
        "() => document.querySelector('#figure-multi-head').dataset.query === '3'"
    )
    assert page.locator("#mh-words input[value='3']").is_checked()
    page.go_back()  # the swap -> as written
    page.wait_for_function(
        "() => [...document.querySelectorAll('#perm-table tbody tr')].map(r => r.dataset.token).join() === '0,1,2,3,4'"
    )


def test_stepper_refusals_hover_focus_and_working(opened):
    page = opened()
    before = page.locator("#stepper-tables").inner_text()
    page.locator("#figure-attention-stepper details.edit summary").click()
    page.fill("#stepper-edit-q", "2000 1\n0 1")
    page.click("#stepper-form button[type=submit]")
    error = page.locator("#stepper-error")
    error.wait_for(state="visible")
    assert "Q row 1, column 1" in error.inner_text()  # named as the page counts: from 1
    assert page.locator("#figure-attention-stepper.stale").count() == 1
    assert "last input the server accepted" in page.locator("#stepper-stale").inner_text()
    assert page.locator("#stepper-tables").inner_text() == before
    page.uncheck("#stepper-causal")  # a later toggle still works, on the accepted input
    page.wait_for_selector("#figure-attention-stepper:not(.stale)")
    assert error.is_hidden()
    # Cells of Q, K and V are edited in place; each entry is checked ("0x10" is not 16).
    cell = page.locator("input[data-entry='Q row 2, column 2']")
    cell.fill("0x10")
    cell.press("Enter")
    error.wait_for(state="visible")
    assert (
        "Q row 2, column 2" in error.inner_text() and cell.get_attribute("aria-invalid") == "true"
    )
    cell.fill("2")
    cell.press("Enter")
    page.wait_for_selector("#figure-attention-stepper:not(.stale)")
    assert page.locator("#stepper-edit-q").input_value().split("\n")[1].endswith(" 2")
    # Server-side refusal of a cell: the stale mark again, and the cell marked.
    cell = page.locator("input[data-entry='K row 1, column 1']")
    cell.fill("5000")
    cell.press("Enter")
    page.wait_for_selector("#figure-attention-stepper.stale")
    assert "K row 1, column 1" in error.inner_text()
    page.click("#stepper-reset")
    page.wait_for_selector("#figure-attention-stepper:not(.stale)")
    page.check("#stepper-causal")
    page.wait_for_function("() => new URL(location).searchParams.get('stepper.causal') === null")

    # Hover previews without redrawing: keyboard focus stays where it was; click pins.
    page.click("#stepper-steps li:nth-child(5) button")
    focused = page.locator("#stepper-tables .step-result td[tabindex='0']")
    focused.focus()
    page.hover("#stepper-tables .step-result td[data-row='0'][data-col='0']")
    assert (
        page.evaluate(
            "document.activeElement.dataset.row + ',' + document.activeElement.dataset.col"
        )
        == "1,0"
    )
    assert page.locator("#figure-attention-stepper [aria-live]").count() == 1
    live = page.locator("#stepper-live").inner_text()
    assert "\n" not in live and "row 2, column 1" in live
    # The softmax working for the worked example's second row: 1, 4.113, sum 5.113.
    row2 = page.locator("#stepper-working li[data-row='1']").inner_text()
    assert "= 1," in row2 and "4.113" in row2 and "sum = 5.113" in row2  # 4 significant digits
    # Next by keyboard to the end (past the backward steps, and once more): focus stays on
    # the (now inert) Next button.
    page.locator("#stepper-next").focus()
    for _ in range(page.locator("#stepper-steps li").count() - 5 + 1):
        page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "stepper-next"
    assert page.locator("#stepper-next").get_attribute("aria-disabled") == "true"
    page.uncheck("#stepper-causal")
    page.click("#stepper-steps li:nth-child(5) button")
    page.wait_for_selector("#stepper-working li[data-row='0']:has-text('337,0')")
    # A row emptied by hand-blocked cells blames the hand, not the causal mask.
    page.click("#stepper-steps li:nth-child(4) button")
    page.click("table[data-table='mask'] td[data-row='0'][data-col='0'] button")
    page.click("table[data-table='mask'] td[data-row='0'][data-col='1'] button")
    page.wait_for_selector("#stepper-rows:has-text('Query 1')")
    page.click("#stepper-next")
    message = page.locator("#stepper-tables tr.row-error").inner_text()
    assert "blocked by hand" in message and "causal" not in message


def test_toolbar_offline_keyboard_and_compression(opened, server):  # noqa: F811
    page = opened()
    answer = page.request.get(server + "/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert (
        answer.headers["content-encoding"] == "gzip"
        and "max-age" in answer.headers["cache-control"]
    )
    # Plotly's toolbar: download-as-image only, no cloud, no logo, never inside role="img".
    titles = page.locator(".modebar-btn").evaluate_all("bs => bs.map(b => b.dataset.title)")
    assert titles and set(titles) == {"Download plot as a PNG"}
    assert page.locator("[role='img'] .modebar").count() == 0
    bars = " ".join(page.locator(".modebar").all_inner_texts()).lower()
    bars += " ".join(
        page.locator(".modebar a, .modebar-btn").evaluate_all("bs => bs.map(b => b.outerHTML)")
    ).lower()
    assert "share" not in bars and "cloud" not in bars and "chart studio" not in bars
    assert page.locator(".modebar a[href*='plotly'], .plotlyjsicon").count() == 0
    # Keyboard only: Tab reaches every control of the figures, each with a visible focus ring.
    controls = page.evaluate("""() => [...document.querySelectorAll(
        'main section.figure:not(#why) :is(button, input, select, textarea, summary, [tabindex="0"])')]
        .filter(e => e.checkVisibility() && e.tabIndex >= 0 && !e.disabled && e.type !== 'radio')
        .map((e, n) => { e.dataset.kbd = String(n); return e.dataset.kbd; })""")
    reached, unringed = set(), []
    page.locator(".skip").focus()
    for _ in range(400):
        page.keyboard.press("Tab")
        info = page.evaluate("""() => { const e = document.activeElement; const s = getComputedStyle(e);
            return [e.dataset.kbd || e.id || e.outerHTML.slice(0, 60), s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2
              || e.closest('.chip') !== null, e.closest('footer') !== null] }""")
        reached.add(info[0])
        if not info[1]:
            unringed.append(info[0])
        if info[2]:
            break
    missing = [c for c in controls if c not in reached]
    assert not missing, page.evaluate(
        "ns => ns.map(n => document.querySelector(`[data-kbd='${n}']`).outerHTML.slice(0, 80))",
        missing,
    )
    assert not unringed, page.evaluate(
        "ns => ns.map(n => document.querySelector(`[data-kbd='${n}']`)?.outerHTML.slice(0, 80) ?? n)",
        unringed,
    )
    # Every button of the figures clicked: nothing leaves the machine (the fixture checks).
    for section in FIGURES:
        buttons = page.locator(f"#{section} button:visible")
        for n in range(buttons.count()):
            button = buttons.nth(n)
            if (
                button.is_visible()
                and button.is_enabled()
                and button.get_attribute("aria-disabled") != "true"
            ):
                button.click(timeout=5_000)
                page.keyboard.press("Escape")
    page.locator("#figure-sqrt-dk-histogram .modebar-btn").first.click()
    ready(page)


def test_export_tables_and_images(opened, tmp_path):
    page = opened()
    fig = "document.querySelector('#figure-attention-stepper').exportData()"
    out = page.evaluate(f"""async () => {{ const m = await import('/static/js/export.js');
        const d = {fig}; return [m.toCsv(d), m.toMarkdown(d), m.toLatex(d), m.toJson(d)]; }}""")
    csv, md, tex, js = out
    assert (
        "d_k = 2, causal mask on, scaling by 1/√d_k" in csv
        and "-inf" not in csv.split("# Queries")[0]
    )
    assert "| query 1 |" in md and "\\begin{tabular}" in tex and '"caption"' in js
    with page.expect_download() as got:
        page.click("#figure-sqrt-dk-histogram [data-export='png']")
    png = tmp_path / "hist.png"
    got.value.save_as(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as got:
        page.click("#figure-attention-stepper [data-export='svg']")
    svg = tmp_path / "stepper.svg"
    got.value.save_as(svg)
    assert "d_k = 2" in svg.read_text() and "mask on" in svg.read_text()
    with page.expect_download() as got:
        page.click("#figure-multi-head [data-export='csv']")
    assert got.value.suggested_filename == "multi-head.csv"


def test_histogram_words_heads_and_labs(opened):
    page = opened()
    # Raw and scaled share one axis; the toggle brings one to the front; the curve spans d_k.
    opacity = (
        "() => document.querySelector('#hist-plot').data.map(t => t.name + ':' + t.opacity).join()"
    )
    front = page.evaluate(opacity)
    page.check("#hist-scaled")
    page.wait_for_function(f"f => ({opacity})() !== f", arg=front)
    assert page.evaluate("document.querySelector('#hist-curve').data[0].x.length") == 16
    # Your own words, checked by the server; moved with the ▲ buttons.
    page.fill("#perm-words", "cats chase mice")
    page.click("#perm-words-form button")
    page.wait_for_function("() => document.querySelectorAll('#perm-table tbody tr').length === 3")
    page.click("#perm-table tr[data-text='mice'] button[data-move='up']")
    page.wait_for_function("() => new URL(location).searchParams.get('perm.order') === '1,3,2'")
    assert page.locator("#perm-table td.same").count() == 3
    assert query(page)["perm.words"] == "cats chase mice"
    page.fill("#perm-words", "a b2")
    page.click("#perm-words-form button")
    page.wait_for_selector("#perm-error:not([hidden])")
    assert "word 2" in page.locator("#perm-error").inner_text()
    # Head 4 ties "The" and "because" for "cross": both named. Headings say "Head n".
    assert (
        page.locator("#mh-heads article.head").nth(3).locator(".top-word").inner_text()
        == "“The” and “because”"
    )
    notes = page.evaluate(
        "document.querySelector('#mh-tensor').layout.annotations.map(a => a.text)"
    )
    assert [n.split(":")[0] for n in notes] == ["Head 1", "Head 2", "Head 3", "Head 4"]
    # Clicking a heatmap cell picks that row's word.
    page.evaluate("""() => { const n = document.querySelector('#mh-tensor');
        n.emit('plotly_click', { points: [{ x: 1, y: 7 }] }); }""")
    page.wait_for_function(
        "() => document.querySelector('#figure-multi-head').dataset.query === '7'"
    )
    # A lab tab starts clean; log axes name the widths.
    page.click("#lab-tabs [data-lab='saturation']")
    page.fill("#lab-param-trials", "50")
    page.click("#lab-run")
    page.wait_for_selector("#lab-table tbody tr")
    axis = page.evaluate("document.querySelector('#lab-plot').layout.xaxis")
    if axis.get("type") == "log":
        assert [str(t) for t in axis["ticktext"]] == [str(v) for v in axis["tickvals"]]
    page.click("#lab-tabs [role='tab']:not([aria-selected='true'])")
    assert (
        page.locator("#lab-table").count() == 0 and page.locator("#lab-status").inner_text() == ""
    )


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_layout_and_screenshots(opened, width):
    page = opened(width=width, height=1080 if width == 1920 else 900)
    ARTIFACTS.mkdir(exist_ok=True)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than the {width} px screen"
    if width == 375:
        # The multi-head labels do not run into each other: one heatmap a row.
        assert page.evaluate("document.querySelector('#mh-tensor').layout.grid.columns") == 1
        page.click("#stepper-next")
        page.click("#stepper-next")
        # With the result on screen, Next is on screen too (it stays at the screen's foot).
        page.locator("#stepper-tables .step-result").scroll_into_view_if_needed()
        nxt = page.locator("#stepper-next").bounding_box()
        assert 0 <= nxt["y"] and nxt["y"] + nxt["height"] <= 900
        assert (
            page.evaluate(
                "getComputedStyle(document.querySelector('.tables .arrow'), '::after').content"
            )
            == '"↓"'
        )
    for figure in FIGURES:
        page.locator(f"#{figure}").screenshot(path=str(ARTIFACTS / f"{figure}-{width}.png"))
    if width == 1920:
        for figure in FIGURES:
            page.click(f"#{figure} .present-button")
            section = page.locator(f"#{figure}.presenting")
            section.wait_for()
            box = section.bounding_box()
            assert box["width"] >= 0.95 * 1920
            size = float(re.sub("px", "", section.evaluate("e => getComputedStyle(e).fontSize")))
            assert size >= 28  # about twice the page's 16 px
            if figure == "figure-multi-head":
                page.wait_for_function(
                    "() => document.querySelector('#mh-tensor').layout.xaxis.tickfont.size >= 16"
                )
            if figure == "figure-attention-stepper":
                page.keyboard.press("ArrowRight")  # the arrow keys step while presenting
                page.wait_for_function(
                    "() => document.querySelector('#figure-attention-stepper').dataset.step === 'scores'"
                )
            page.wait_for_timeout(300)
            page.screenshot(path=str(ARTIFACTS / f"{figure}-1920-present.png"))
            page.keyboard.press("Escape")
            page.wait_for_selector(".presenting", state="detached")
