"""The lab plots a notebook shows: a log d_k axis labelled with the widths the lab ran (not
Plotly's own "2 3 4 ... 100 2"), and no series drawn under another that equals it by
construction (the variance lab's two ratios)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import attnlab as al
from attnlab.labs import LABS
from attnlab.labs._display import plotly_figure, reset, result_html
from conftest import require_or_skip

WIDTHS = (16, 32, 64, 128, 256)
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def variance():
    return al.labs.variance_scaling(widths=WIDTHS, draws=2_000, seed=0)


def test_a_log_width_axis_is_labelled_with_the_widths(variance):
    axis = plotly_figure(LABS["variance"].figure(variance))["layout"]["xaxis"]
    assert axis["type"] == "log"
    assert axis["tickvals"] == list(WIDTHS)
    assert axis["ticktext"] == ["16", "32", "64", "128", "256"]


def test_a_linear_or_bar_axis_keeps_plotly_ticks():
    result = al.labs.permutation(seed=0, d_model=8)
    axis = plotly_figure(LABS["permutation"].figure(result))["layout"]["xaxis"]
    assert "tickvals" not in axis


def test_the_variance_plot_draws_the_two_equal_ratios_once(variance):
    # Closed form: Var(x / c) = Var(x) / c², so the two columns agree to rounding at every width.
    ratio = np.array([row.var_ratio for row in variance.rows])
    scaled = np.array([row.scaled_var for row in variance.rows])
    np.testing.assert_allclose(ratio, scaled, rtol=1e-12)
    plot = LABS["variance"].figure(variance)
    measured = [s for s in plot.series if not s.dash]
    assert len(measured) == 1, [s.name for s in plot.series]
    assert "Var(q·k) / d_k" in measured[0].name and "Var(q·k / √d_k)" in measured[0].name
    assert "equal by construction" in measured[0].name
    np.testing.assert_array_equal(measured[0].y, ratio)
    # No two series of the figure lie on top of each other.
    lines = [np.array(s.y, dtype=float) for s in plot.series]
    for i in range(len(lines)):
        for j in range(i + 1, len(lines)):
            assert not np.allclose(lines[i], lines[j], rtol=1e-9)


@pytest.mark.browser
def test_chromium_shows_the_widths_under_the_log_axis(variance, tmp_path):
    sync_api = require_or_skip(
        "playwright.sync_api", "ATTNLAB_REQUIRE_BROWSER", "the browser tests drive Chromium"
    )
    if not Path(CHROMIUM).exists():
        if os.environ.get("ATTNLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(f"Debian's Chromium is not at {CHROMIUM}")
        pytest.skip("no Chromium")
    reset()  # this page needs plotly.js inline, whatever displayed before in this process
    page_file = tmp_path / "variance.html"
    page_file.write_text(f"<!doctype html><meta charset='utf-8'><body>{result_html(variance)}")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1000, "height": 900})
        tab.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
        )
        tab.goto(page_file.as_uri())
        tab.wait_for_selector(".xtick text", timeout=30_000)
        texts = "els => els.map((e) => e.textContent)"  # SVG text has no innerText
        ticks = tab.eval_on_selector_all(".xtick text", texts)
        legend = tab.eval_on_selector_all(".legendtext", texts)
        ARTIFACTS.mkdir(exist_ok=True)
        tab.locator(".attnlab-result").screenshot(
            path=str(ARTIFACTS / "notebook-variance-plot.png")
        )
        browser.close()
    assert ticks == ["16", "32", "64", "128", "256"]
    assert len(legend) == 2 and any("equal by construction" in t for t in legend)
