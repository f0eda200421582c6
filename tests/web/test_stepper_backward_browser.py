"""In a real browser: the stepper walks on past the output, back through dV, dA, dS,
dQ and dK, with an upstream gradient dO the reader can edit, and keeps it in the URL.

The numbers on the page are checked against torch.autograd where torch is installed and
against the closed form of the chapter's example otherwise (tests/figures/test_stepper_backward.py
checks the server's numbers in depth). Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_browser import ARTIFACTS, browser, server, sync_api  # noqa: F401 (fixtures)
from test_explorer_browser import opened, query, ready, stepper_values  # noqa: F401

pytestmark = pytest.mark.browser

BACKWARD = ["grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k"]


def _closed_form(g: np.ndarray, scaled: bool = True) -> dict[str, np.ndarray]:
    """The chapter's example with the causal mask, by hand: query 1 sees key 1 only, query 2
    sees both with weights softmax(s2) (s2 = its scaled scores [0, 2·scale])."""
    q = np.array([[3.0, -3.0], [1.0, 1.0]])
    k = np.array([[-3.0, 3.0], [1.0, 1.0]])
    v = np.array([[0.0, -1.0], [1.0, 2.0]])
    c = 1 / math.sqrt(2) if scaled else 1.0
    a = np.array([[1.0, 0.0], [0.0, 0.0]])
    e = np.exp(np.array([0.0, 2.0 * c]))
    a[1] = e / e.sum()
    da = g @ v.T
    ds = a * (da - (a * da).sum(axis=1, keepdims=True))
    return {
        "grad_v": a.T @ g,
        "grad_weights": da,
        "grad_scores": ds,
        "grad_q": ds @ k * c,
        "grad_k": ds.T @ q * c,
    }


def _go(page, step_id: str) -> None:
    ids = page.locator("#stepper-steps li button").count()
    assert ids == 11
    page.evaluate(f"() => import('/static/js/stepper.js').then(m => m.goToStep('{step_id}'))")
    page.wait_for_selector(f"#figure-attention-stepper[data-step='{step_id}']")


def test_next_walks_forward_then_back_through_every_gradient(opened):  # noqa: F811
    page = opened()
    steps = page.locator("#stepper-steps li")
    assert steps.count() == 11
    phases = steps.evaluate_all("els => els.map(e => e.dataset.phase)")
    assert phases == ["forward"] * 6 + ["backward"] * 5
    # The first backward step is set apart (the "Backward:" label).
    assert "phase-start" in (steps.nth(6).get_attribute("class") or "")
    # Keyboard only: focus Next and press Enter until the last step.
    page.focus("#stepper-next")
    want = _closed_form(np.ones((2, 2)))
    seen = []
    for _ in range(10):
        page.keyboard.press("Enter")
        step = page.locator("#figure-attention-stepper").get_attribute("data-step")
        seen.append(step)
        if step in want:
            got = np.array(stepper_values(page)).reshape(want[step].shape)
            np.testing.assert_allclose(got, want[step], rtol=1e-9, atol=1e-12)
    assert seen[-5:] == BACKWARD
    assert page.locator("#stepper-title").inner_text().startswith("Step 11 of 11")
    assert page.locator("#stepper-next").get_attribute("aria-disabled") == "true"


def test_ds_step_explains_the_zero_rows_and_the_picked_entry(opened):  # noqa: F811
    page = opened("/?stepper.step=grad_scores&stepper.cell=2,2")
    work = page.locator("#stepper-working")
    assert work.is_visible()
    assert "Back through the softmax" in work.locator("h4").inner_text()
    rows = work.locator("li")
    # Row 1 has one allowed key (causal): weight 1 whatever the score, so dS = 0 there.
    assert "One allowed key" in rows.nth(0).inner_text()
    ds = _closed_form(np.ones((2, 2)))["grad_scores"]
    delta = float(rows.nth(1).get_attribute("data-delta"))
    assert delta == pytest.approx(2.2177187300, abs=1e-9)  # dO·O for row 2: 0.8044 + 1.4133
    detail = page.locator("#stepper-detail").inner_text()
    assert f"= {ds[1, 1]:.3f}".rstrip("0") in detail.replace("−", "-")
    # A blocked pair: the detail says why its gradient is 0.
    page.locator("#stepper-tables .step-result td[data-row='0'][data-col='1']").click()
    assert "blocked" in page.locator("#stepper-detail").inner_text()
    # The entries that feed dS (i, j): row i of A and of dA.
    page.locator("#stepper-tables .step-result td[data-row='1'][data-col='0']").click()
    fed = page.locator("#stepper-tables td.feed").evaluate_all(
        "els => els.map(e => [e.closest('table').dataset.table, +e.dataset.row])"
    )
    assert sorted(fed) == [["grad_weights", 1]] * 2 + [["weights", 1]] * 2


def test_edited_upstream_gradient_recomputes_and_lives_in_the_url(opened, server):  # noqa: F811
    page = opened("/?stepper.step=grad_v")
    cell = page.locator("input[data-entry='dO row 2, column 1']")
    cell.fill("3")
    cell.press("Enter")
    page.wait_for_function("() => new URL(location).searchParams.get('stepper.do') === '1,1;3,1'")
    g = np.array([[1.0, 1.0], [3.0, 1.0]])
    np.testing.assert_allclose(
        np.array(stepper_values(page)).reshape(2, 2), _closed_form(g)["grad_v"], rtol=1e-9
    )
    # Focus stays on the edited cell; the link restores dO in a fresh page, at dK.
    assert page.evaluate("document.activeElement.dataset.entry") == "dO row 2, column 1"
    link = page.url.replace("stepper.step=grad_v", "stepper.step=grad_k")
    other = opened(link.removeprefix(server))
    np.testing.assert_allclose(
        np.array(stepper_values(other)).reshape(2, 2), _closed_form(g)["grad_k"], rtol=1e-9
    )
    # Scaling off keeps dO and recomputes with a factor of 1.
    other.locator("#stepper-scaled").uncheck()
    other.wait_for_function("() => new URL(location).searchParams.get('stepper.scaled') === '0'")
    np.testing.assert_allclose(
        np.array(stepper_values(other)).reshape(2, 2),
        _closed_form(g, scaled=False)["grad_k"],
        rtol=1e-9,
    )
    assert query(other)["stepper.do"] == "1,1;3,1"
    # A careless entry: named, marked, and the tables stay as they were.
    before = stepper_values(page)
    bad = page.locator("input[data-entry='dO row 1, column 2']")
    bad.fill("lots")
    bad.press("Enter")
    error = page.locator("#stepper-error")
    error.wait_for(state="visible")
    assert error.inner_text().startswith("dO row 1, column 2")
    assert bad.get_attribute("aria-invalid") == "true"
    assert stepper_values(page) == before
    # "Chapter example" puts dO back to all ones.
    page.locator("details.edit summary").click()
    page.locator("#stepper-reset").click()
    page.wait_for_function("() => !new URL(location).searchParams.get('stepper.do')")


def test_empty_row_sends_no_gradient(opened):  # noqa: F811
    # Block both keys of query 2 by hand: its rows of dA, dS and dQ show the error instead.
    page = opened("/?stepper.step=grad_q&stepper.blocked=2-1;2-2")
    errors = page.locator("#stepper-tables .step-result tr.row-error")
    assert errors.count() == 1
    assert "no gradient" in errors.inner_text()
    assert not page.locator("#stepper-tables td[data-value='NaN']").count()


@pytest.mark.parametrize("width", [375, 1280, 1920])
def test_backward_screenshots(opened, width):  # noqa: F811
    page = opened("/?stepper.step=grad_scores&stepper.cell=2,1", width=width)
    root = page.locator("#figure-attention-stepper")
    # Nothing spills sideways on a phone: the tables scroll inside their own box.
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    ARTIFACTS.mkdir(exist_ok=True)
    root.screenshot(path=str(ARTIFACTS / f"stepper-backward-{width}.png"))
    if width == 1920:
        # Presenting: the arrow keys walk the backward steps too.
        page.click("#figure-attention-stepper .present-button")
        page.wait_for_selector("#figure-attention-stepper.presenting")
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#figure-attention-stepper[data-step='grad_q']")
        page.screenshot(path=str(ARTIFACTS / "stepper-backward-1920-present.png"))
        page.keyboard.press("Escape")
        page.wait_for_selector(".presenting", state="detached")


@pytest.mark.parametrize(("step", "width"), [("grad_v", 375), ("grad_v", 1280), ("grad_k", 1280)])
def test_backward_step_screenshots(opened, step, width):  # noqa: F811
    page = opened(f"/?stepper.step={step}&stepper.cell=1,1", width=width)
    # The picked entry's working names the scale (1/√d_k for the example, d_k = 2).
    detail = page.locator("#stepper-detail").inner_text()
    assert ("0.7071" in detail) == (step == "grad_k")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#figure-attention-stepper").screenshot(
        path=str(ARTIFACTS / f"stepper-{step}-{width}.png")
    )


def test_predict_first_prompt_opens_the_backward_softmax_step(opened):  # noqa: F811
    page = opened("/?stepper.causal=0")
    page.evaluate("document.querySelectorAll('details.why-fold').forEach(d => d.open = true)")
    card = page.locator("[data-prompt='stepper-gradient']")
    card.locator("input[value='1']").check()
    card.locator("button.why-check").click()
    assert card.get_attribute("data-result") == "wrong"
    card.locator(".why-answer a").click()
    # "Show me" turns the causal mask back on and opens dS, whose first row is all zeros.
    page.wait_for_selector("#figure-attention-stepper[data-step='grad_scores']")
    page.wait_for_function("() => document.querySelector('#stepper-causal').checked")
    page.wait_for_function("() => !new URL(location).searchParams.get('stepper.causal')")
    assert stepper_values(page)[:2] == [0.0, 0.0]


def test_export_of_a_backward_step_names_dO_and_holds_its_tables(opened):  # noqa: F811
    page = opened("/?stepper.step=grad_q&stepper.do=1,2;3,4")
    csv = page.evaluate(
        """async () => { const m = await import('/static/js/export.js');
        return m.toCsv(document.querySelector('#figure-attention-stepper').exportData()); }"""
    )
    assert "step 10 (Gradient of Q)" in csv and "upstream gradient dO as entered" in csv
    assert "# Gradient of Q: dQ = dS K · 1/√d_k" in csv and "# Keys K" in csv
    want = _closed_form(np.array([[1.0, 2.0], [3.0, 4.0]]))["grad_q"]
    assert f"{want[1, 0]:.6g}"[:5] in csv
