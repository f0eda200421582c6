"""The explorer as a class uses it: presented on a 1280x720 and a 1920x1080 projector, by
keyboard from the page's top, exported for a handout, predicted first, and checked by axe-core.

One page load serves several checks (browser tests are slow). Fixtures as in test_browser.py:
uvicorn on a free 127.0.0.1 port, Debian's Chromium, every other request blocked. Screenshots of
each figure presented at 1280x720 and of the 375 px layout land in test-artifacts/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_browser import ARTIFACTS, Pages, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

STEPS = ["inputs", "scores", "scaled", "masked", "weights", "output", "grad_v",
         "grad_weights", "grad_scores", "grad_q", "grad_k"]  # fmt: skip
# Each figure, and the part of it that is "the figure itself" when presenting.
SHOWN = {
    "figure-attention-stepper": "#stepper-tables",
    "figure-sqrt-dk-histogram": "#hist-plot",
    "figure-permutation-demo": "#perm-table",
    "figure-multi-head": "#mh-heads .head.shown",
}


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def _inside(page, selector: str, width: int, height: int) -> dict:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not shown"
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, (selector, box, height)
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box, width)
    return box


def test_each_figure_presented_fits_the_first_screen(opened):
    page = opened()
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in [(1280, 720), (1920, 1080)]:
        page.set_viewport_size({"width": width, "height": height})
        for figure, shown in SHOWN.items():
            page.click(f"#{figure} .present-button")
            page.wait_for_selector(f"#{figure}.presenting")
            page.wait_for_timeout(400)  # the charts redraw at the presenting size
            # Prose and tools hidden: no hint, no "In words", no export button on screen.
            for hidden in (".hint", "details", "[data-export]"):
                assert page.locator(f"#{figure} {hidden}:visible").count() == 0, (figure, hidden)
            _inside(page, shown, width, height)
            # Nothing of the presented figure lies below the screen.
            below = page.evaluate(
                f"(e => e.scrollHeight - e.clientHeight)(document.getElementById('{figure}'))"
            )
            assert below <= 1, (figure, below)
            if figure == "figure-attention-stepper":
                tops = page.locator("#stepper-steps button").evaluate_all(
                    "bs => bs.map(b => Math.round(b.getBoundingClientRect().top))"
                )
                assert len(tops) >= 11 and max(tops) - min(tops) < 8, tops  # one line
                _inside(page, "#stepper-steps li:last-child button", width, height)
                # Every step, forward and backward, fits: the arrow keys walk them all.
                for step in STEPS[1:]:
                    page.keyboard.press("ArrowRight")
                    page.wait_for_selector(f"#figure-attention-stepper[data-step='{step}']")
                    _inside(page, shown, width, height)
                    if step == "output":
                        page.screenshot(path=str(ARTIFACTS / f"{figure}-output-{width}.png"))
                page.click("#stepper-steps li:first-child button")  # back to the first step
            if figure == "figure-multi-head":
                assert page.locator("#mh-heads .head:visible").count() == 1
                page.keyboard.press("3")
                assert page.locator("#mh-heads .head:visible").get_attribute("data-head") == "2"
                _inside(page, shown, width, height)
                # Its heatmap beside it, one head too, the one the key picked.
                page.wait_for_function(
                    "() => document.querySelector('#mh-tensor').data.length === 1"
                    " && document.querySelector('#mh-tensor').layout.annotations[0].text.startsWith('Head 3')"
                )
                _inside(page, "#mh-tensor", width, height)
                page.keyboard.press("1")
                assert page.locator("#mh-heads .head:visible").get_attribute("data-head") == "0"
            page.screenshot(path=str(ARTIFACTS / f"{figure}-present-{width}x{height}.png"))
            page.keyboard.press("Escape")
            page.wait_for_selector(".presenting", state="detached")
    # The phone layout, one screenshot a figure and the page's top.
    page.set_viewport_size({"width": 375, "height": 800})
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / "phone-375-top.png"))
    for figure in SHOWN:
        page.locator(f"#{figure}").screenshot(path=str(ARTIFACTS / f"{figure}-phone-375.png"))


def _focused_in_stepper(page) -> str | None:
    return page.evaluate(
        """() => { const e = document.activeElement;
        return e && e.closest('#figure-attention-stepper') && e.id !== 'figure-attention-stepper'
          ? (e.closest('#stepper-steps') ? 'step ' + e.textContent : e.outerHTML.slice(0, 60)) : null; }"""
    )


def test_keyboard_reaches_the_stepper_and_the_why_follows_the_figures(opened):
    page = opened(1280, 900)
    presses = next(
        (n for n in range(1, 11) if page.keyboard.press("Tab") or _focused_in_stepper(page)), None
    )
    assert presses is not None, "10 Tab presses from the page's load never reached the stepper"
    assert _focused_in_stepper(page) == "step 1. Queries, keys and values"
    # The skip link is the first stop and lands on the stepper: one more Tab, its first step.
    page.reload()
    page.wait_for_selector("body[data-charts='drawn']")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "figure-attention-stepper"
    page.keyboard.press("Tab")
    assert (_focused_in_stepper(page) or "").startswith("step 1.")
    # The equation is one stop; its arrow keys move between the symbols.
    page.locator(".equation .sym").first.focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.symbol") == "softmax"
    assert "softmax" in page.locator("#symbol-info").inner_text().lower()
    # The page in the chapter's order: the reasoning comes after the figures, folded, and each
    # fold is a single tab stop until it is opened.
    after = page.evaluate(
        "document.querySelector('#figure-multi-head').compareDocumentPosition("
        "document.querySelector('#why')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    assert after
    folds = page.locator("#why details.why-fold")
    assert folds.count() == 3
    assert folds.evaluate_all("ds => ds.every(d => !d.open)")
    page.locator("#why-equations-fold > summary").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('details')?.id") == "why-proof-fold"


def _exports(page, figure: str) -> dict:
    return page.evaluate(
        f"""async () => {{ const m = await import('/static/js/export.js');
        const d = document.querySelector('#{figure}').exportData();
        return {{csv: m.toCsv(d), tex: m.toLatex(d)}}; }}"""
    )


def _compile(tex: str, where) -> None:
    assert tex.isascii(), [c for c in tex if not c.isascii()][:5]
    if not shutil.which("pdflatex"):
        # CI installs TeX Live (.ci/run), so there the compile must run; elsewhere it is optional.
        assert os.environ.get("ATTNLAB_REQUIRE_BROWSER") != "1", "pdflatex is not installed"
        return
    source = where / "export.tex"
    source.write_text(tex)
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", source.name],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert (where / "export.pdf").stat().st_size > 1000


def test_exports_paste_into_a_spreadsheet_and_compile(opened, tmp_path):
    page = opened(1280, 900)
    # The histogram at a width where no scaled trial saturates: that cell has no value, and
    # is blank in the CSV (not -inf, not inf).
    page.locator("#hist-dk").fill("256")
    page.locator("#hist-dk").dispatch_event("change")
    page.wait_for_function(
        "document.querySelector('#figure-sqrt-dk-histogram').dataset.dk === '256'"
    )
    csv = _exports(page, "figure-sqrt-dk-histogram")["csv"]
    assert "inf" not in csv.lower()
    row = next(line for line in csv.splitlines() if line.startswith("with scaling,"))
    assert row.endswith(","), row  # mean p(1 - p) over no trial: an empty cell
    # The stepper under the causal mask: -inf only where a pair is blocked.
    page.click("#stepper-steps li:nth-child(4) button")  # "Mask added"
    page.wait_for_selector("#figure-attention-stepper[data-step='masked']")
    out = _exports(page, "figure-attention-stepper")
    masked = [line for line in out["csv"].splitlines() if "-inf" in line]
    assert masked and all(line.startswith("query 1,") for line in masked), masked
    # Every figure's LaTeX, and the stepper's at a blocked step and a backward step.
    texs = [out["tex"]]
    for figure in SHOWN:
        texs.append(_exports(page, figure)["tex"])
    page.click("#stepper-steps li:last-child button")
    texs.append(_exports(page, "figure-attention-stepper")["tex"])
    assert "$-\\infty$" in texs[0] and "\\surd" in texs[0]
    for n, tex in enumerate(texs):
        where = tmp_path / str(n)
        where.mkdir()
        _compile(tex, where)
    # Images sized to their text: no two column headers of the histogram overlap, and the
    # multi-head's "figure only" image is the chart alone.
    overlaps = page.evaluate(
        """async () => { const m = await import('/static/js/export.js');
        const fig = document.querySelector('#figure-sqrt-dk-histogram');
        const svg = await m.toSvg(fig.exportData(), []);
        const box = document.createElement('div'); box.innerHTML = svg; document.body.append(box);
        const texts = [...box.querySelectorAll('text')].map(t => t.getBBox());
        const bad = [];
        texts.forEach((a, i) => texts.slice(i + 1).forEach((b) => {
          if (Math.abs(a.y - b.y) < 4 && a.x < b.x + b.width && b.x < a.x + a.width) bad.push([a.x, b.x]);
        }));
        const right = Math.max(...texts.map(t => t.x + t.width));
        const width = +box.querySelector('svg').getAttribute('width');
        box.remove(); return {bad, fits: right <= width}; }"""
    )
    assert overlaps == {"bad": [], "fits": True}
    sizes = page.evaluate(
        """async () => { const m = await import('/static/js/export.js');
        const fig = document.querySelector('#figure-multi-head');
        const plots = [document.querySelector('#mh-tensor')];
        const size = (s) => [+s.match(/width="(\\d+)"/)[1], +s.match(/height="(\\d+)"/)[1]];
        return [size(await m.toSvg(fig.exportData(), plots)),
                size(await m.toSvg(fig.exportData(), plots, {figureOnly: true}))]; }"""
    )
    whole, only = sizes
    assert only[1] < whole[1] / 2 and only[1] <= 700, sizes
    assert page.locator("#figure-multi-head .figure-only").count() == 1


def test_predict_cards_hide_the_answer_and_forget_with_the_session(opened, browser, server):  # noqa: F811
    page = opened(1280, 900)
    page.locator("#why-predict-fold > summary").click()
    card = page.locator("[data-prompt='multihead-it']")
    assert card.locator(".why-answer").is_hidden()
    card.locator("button.why-check").click()  # no guess yet: the answer stays hidden
    assert card.locator(".why-answer").is_hidden()
    assert "first" in card.locator(".why-verdict").inner_text()
    card.locator("input[value='0']").check()
    card.locator("button.why-check").click()
    assert card.locator(".why-answer").is_visible()
    stored = page.evaluate(
        "[sessionStorage.getItem('attnlab.predict.multihead-it'), localStorage.length]"
    )
    assert stored == ["0", 0]
    # A reload is the same session: the guess and its answer come back.
    page.reload()
    page.wait_for_selector("[data-prompt='multihead-it'][data-result]", state="attached")
    # The card's reset: no guess, no verdict, the answer hidden again, nothing stored.
    page.locator("#why-predict-fold > summary").click()
    card.locator("button.why-reset").click()
    assert card.locator(".why-answer").is_hidden() and card.get_attribute("data-result") is None
    assert page.evaluate("sessionStorage.getItem('attnlab.predict.multihead-it')") is None
    # The page's reset clears every card.
    ratio = page.locator("[data-prompt='stepper-ratio']")
    ratio.locator("input").fill("5")
    ratio.locator("button.why-check").click()
    card.locator("input[value='1']").check()
    card.locator("button.why-check").click()
    page.locator("#why-predict-reset").click()
    assert page.locator("#why-predict .why-answer:visible").count() == 0
    assert page.evaluate("sessionStorage.length") == 0
    # A new browser session (another context) starts blank.
    ratio.locator("input").fill("5")
    ratio.locator("button.why-check").click()
    other = opened(1280, 900)
    assert other.locator("[data-prompt='stepper-ratio'][data-result]").count() == 0


AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_axe_finds_no_critical_serious_or_moderate_violation(opened, width):
    page = opened(width, 900)
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    page.wait_for_timeout(200)
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => (await axe.run(document, {rules: {'target-size': {enabled: true}},
          resultTypes: ['violations']})).violations.map(v => ({id: v.id, impact: v.impact,
          nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"""
    )
    bad = [v for v in found if v["impact"] in ("critical", "serious", "moderate")]
    assert bad == [], bad
    (ARTIFACTS / f"axe-{width}.txt").write_text("\n".join(map(str, found)) + "\n")


def test_refused_inputs_say_what_to_change(opened, server):  # noqa: F811
    page = opened(1280, 900)
    limits = page.request.get(server + "/api/config").json()["permutation"]
    error = page.locator("#perm-error")
    asked = []
    page.on("request", lambda r: "/api/permutation" in r.url and asked.append(r.url))
    for typed, said in [
        ("", f"Type {limits['min_words']} to {limits['max_words']} words first"),
        ("hello, world!", "“hello,”, has “,”, which is not a letter"),
        ("one", "has 1"),
    ]:
        page.locator("#perm-words").fill(typed)
        page.locator("#perm-words").press("Enter")
        assert error.is_visible() and said in error.inner_text(), (typed, error.inner_text())
        assert page.locator("#perm-words").get_attribute("aria-invalid") == "true"
    assert asked == []  # refused in the page, nothing sent
    # Words the chapter never gave a vector are flagged as made up; its own words are not.
    page.locator("#perm-words").fill("the dog chased a cat")
    page.locator("#perm-words").press("Enter")
    page.wait_for_selector("#figure-permutation-demo[data-made-up='chased a cat']")
    assert error.is_hidden()
    sentence = page.locator("#perm-sentence").inner_text()
    assert "Made-up vectors: “chased”, “a”, “cat”" in sentence and "“dog”," not in sentence
    # The proof's width: 0, 5000 and 1.5 are refused in words, and nothing is measured.
    page.locator("#why-proof-fold > summary").click()
    page.wait_for_selector("#why-proof-box[data-dk]")
    before = page.locator("#why-proof-box").get_attribute("data-dk")
    proof_error = page.locator("#why-proof-error")
    for typed in ["0", "5000", "1.5", ""]:
        page.locator("#why-proof-dk").fill(typed)
        page.locator("#why-proof-run").click()
        assert proof_error.is_visible() and "whole number from" in proof_error.inner_text()
        assert (typed or "nothing") in proof_error.inner_text()
    assert page.locator("#why-proof-box").get_attribute("data-dk") == before
