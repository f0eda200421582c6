"""The explorer's last class items in a real browser: each figure's why folded beside it, one Tab
stop per equation (arrow keys inside), the stepper's two groups of step buttons, and a cold page
that loads nothing heavy: no lab request, the first screen's module graph preloaded, versioned
files.

Fixtures as in test_browser.py: uvicorn on a free 127.0.0.1 port, Debian's Chromium, every other
request blocked. What makes the cold load fast is asserted here; its times (ready, charts) are
measured by benchmarks/page_ready.py, never in a test.
"""

from __future__ import annotations

import pytest
from test_browser import ARTIFACTS, Pages, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

FIGURES = ("figure-attention-stepper", "figure-sqrt-dk-histogram", "figure-permutation-demo",
           "figure-multi-head")  # fmt: skip


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)

    def open_at(width: int = 1280, height: int = 900, requests: list | None = None):
        return pages.open(width, height, requests)

    yield open_at
    pages.close()


def _focused(page) -> dict:
    return page.evaluate(
        """() => { const e = document.activeElement; const card = e.closest('article.explainer');
        return {sym: e.dataset.symbol ?? null, card: card?.dataset.equation ?? null,
                tag: e.tagName, shown: card?.dataset.shown ?? null}; }"""
    )


def test_an_opened_explainer_is_one_tab_stop_per_equation(opened, server):  # noqa: F811
    page = opened()
    equations = page.request.get(server + "/api/equations").json()["equations"]
    summary = page.locator("#why-equations-fold > summary")
    summary.focus()
    page.keyboard.press("Enter")  # opened by keyboard
    page.wait_for_selector("#why-equations article.explainer")
    # Tab through every card: each gives one symbol stop (and its panel's link), never two.
    stops: dict[str, int] = {}
    for _ in range(3 * len(equations)):
        page.keyboard.press("Tab")
        at = _focused(page)
        if at["card"] is None:
            break
        if at["sym"] is not None:
            stops[at["card"]] = stops.get(at["card"], 0) + 1
    assert stops == {eq["id"]: 1 for eq in equations}
    # Inside one equation the arrow keys move (and show), Home and End jump, Tab leaves.
    card = page.locator("[data-equation='projections']")
    card.locator(".why-sym[aria-pressed='true']").focus()
    order = [s["id"] for s in next(e for e in equations if e["id"] == "projections")["symbols"]]
    page.keyboard.press("ArrowRight")
    assert _focused(page) == {"sym": order[1], "card": "projections", "tag": "BUTTON",
                              "shown": order[1]}  # fmt: skip
    page.keyboard.press("End")
    assert _focused(page)["sym"] == card.locator(".why-sym").last.get_attribute("data-symbol")
    page.keyboard.press("ArrowRight")  # wraps round to the first
    first = card.locator(".why-sym").first.get_attribute("data-symbol")
    assert _focused(page)["sym"] == first
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Home")
    assert _focused(page)["sym"] == first
    assert card.locator(".why-sym[tabindex='0']").count() == 1
    page.keyboard.press("Shift+Tab")
    assert _focused(page)["card"] != "projections"
    page.keyboard.press("Tab")  # back in: on the symbol last shown, not the first of the row
    assert _focused(page) == {"sym": first, "card": "projections", "tag": "BUTTON", "shown": first}


def test_each_figure_has_its_why_folded_beside_it(opened, server):  # noqa: F811
    page = opened()
    equations = page.request.get(server + "/api/equations").json()["equations"]
    for figure in FIGURES:
        fold = page.locator(f"#{figure} > details.why-beside")
        assert fold.count() == 1 and not fold.evaluate("d => d.open")
        fold.locator("summary").click()
        mine = [e["id"] for e in equations if e["figure"] == f"#{figure}"]
        page.wait_for_selector(f"#{figure} .why-beside article.explainer")
        shown = fold.locator("article.explainer").evaluate_all(
            "cs => cs.map(c => c.dataset.beside)"
        )
        assert shown == mine and mine, figure
    beside = {e["id"] for e in equations if e["figure"] == "#figure-attention-stepper"}
    assert {"projections", "copy", "causal"} <= beside
    multi = {e["id"] for e in equations if e["figure"] == "#figure-multi-head"}
    assert {"head", "multihead"} <= multi
    # The copies beside the figures keep the ids unique and the why section's cards the only
    # data-equation ones.
    ids = page.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)")
    assert len(ids) == len(set(ids))
    assert page.locator("[data-equation]").count() == len(equations)
    # A card beside the multi-head figure says why several heads, with the figure's sizes.
    page.locator("#figure-multi-head [data-beside='head']").scroll_into_view_if_needed()
    assert (
        "one set of weights" in page.locator("#figure-multi-head [data-beside='head']").inner_text()
    )
    page.screenshot(path=str(ARTIFACTS / "class-why-beside-1280.png"), full_page=False)


def test_the_step_buttons_keep_their_two_groups(opened):
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (375, 1280, 1920):
        page = opened(width, 900)
        lines = page.locator("#stepper-steps li").evaluate_all(
            """ls => ls.map(l => ({phase: l.dataset.phase,
            top: Math.round(l.querySelector('button').getBoundingClientRect().top),
            right: l.getBoundingClientRect().right}))"""
        )
        for phase in ("forward", "backward"):
            tops = {x["top"] for x in lines if x["phase"] == phase}
            assert len(tops) == 1, (width, phase, lines)  # the whole group on one line
        assert max(x["right"] for x in lines) <= width
        page.locator("#stepper-steps").screenshot(path=str(ARTIFACTS / f"class-steps-{width}.png"))


def test_a_cold_page_loads_nothing_heavy(opened, server):  # noqa: F811
    requests: list = []
    page = opened(1280, 900, requests)
    paths = [(r.path, r.query) for r in requests]
    assert not any(p.startswith("/api/labs/") for p, _ in paths), paths  # no lab runs at load
    modules = {(p, q) for p, q in paths if p.startswith("/static/js/")}
    preloads = page.locator("link[rel='modulepreload']").evaluate_all(
        "ls => ls.map(l => new URL(l.href)).map(u => [u.pathname, u.search.slice(1)])"
    )
    # Every module preloaded was fetched, and the others (import() after ready) are versioned too.
    assert {tuple(p) for p in preloads} < modules
    assert all(q.startswith("v=") for _, q in modules)
    headers = page.request.get(server + "/static/js/main.js?" + next(iter(modules))[1]).headers
    assert "immutable" in headers["cache-control"]
    # The proof lab draws its samples when its fold opens, not before.
    page.locator("#why-proof-fold > summary").click()
    page.wait_for_selector("#why-proof-steps li", state="attached")
    assert any(r.path == "/api/labs/proof" for r in requests)
