"""The multi-head figure's exports for a handout, in Chromium with the network blocked: its
LaTeX (hand-set and learned modes, and a learned head's query in the stepper) compiles with
pdflatex with no overfull box, keeps every column, and writes small numbers as 9\\times10^{-4};
the learned mode's PNG/SVG draws the eight heads' heatmaps instead of a wall of numbers."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_browser import Pages, browser, server, sync_api  # noqa: F401

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-class")
READY = "document.querySelector('#figure-multi-head').dataset.learned === 'ready'"


@pytest.fixture
def opened(browser, server):  # noqa: F811
    pages = Pages(browser, server)
    yield pages.open
    pages.close()


def _export(page, figure: str) -> dict:
    return page.evaluate(
        """async (id) => { const m = await import('/static/js/export.js');
        const d = document.getElementById(id).exportData();
        return { tex: m.toLatex(d), svg: await m.toSvg(d, []), tables: d.tables }; }""",
        figure,
    )


def _log(tex: str, where: Path) -> str:
    """pdflatex's log of ``tex``; the compile must succeed."""
    if not shutil.which("pdflatex"):
        pytest.skip("pdflatex is not installed (apt-get install texlive-latex-recommended)")
    where.mkdir()
    (where / "export.tex").write_text(tex)
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "export.tex"],
        cwd=where, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    return (where / "export.log").read_text(errors="replace")


def _columns_kept(tex: str, tables: list[dict]) -> None:
    """Every column header of every table is a header of some tabular in the LaTeX."""
    headers = re.findall(r"\\hline\n & (.*) \\\\\n\\hline", tex)
    seen = [h for line in headers for h in line.split(" & ")]
    for t in tables:
        cells = sum(len(row) for row in t["values"])
        assert cells and all(len(row) == len(t["cols"]) for row in t["values"])
    wanted = sum(len(t["cols"]) for t in tables)
    assert len(seen) == wanted, (len(seen), wanted)


def test_latex_exports_fit_the_page_and_print_powers(opened, server, tmp_path):  # noqa: F811
    page = opened(1280, 900)
    texs = {"handset": _export(page, "figure-multi-head")}
    page.goto(server + "/?mh.mode=learned#figure-multi-head")
    page.wait_for_function(READY)
    texs["learned"] = _export(page, "figure-multi-head")
    page.goto(server + "/?stepper.learned=1,1,7&stepper.tokens=5,9,12,40,7,5,9,12,40,7"
              "&stepper.step=weights")  # fmt: skip
    page.wait_for_selector("#figure-attention-stepper[data-step='weights']")
    page.wait_for_selector("#stepper-learned:not([hidden])")
    texs["stepper-learned"] = _export(page, "figure-attention-stepper")
    powers = 0
    for name, out in texs.items():
        log = _log(out["tex"], tmp_path / name)
        overfull = [line for line in log.splitlines() if line.startswith("Overfull \\hbox")]
        assert overfull == [], (name, overfull[:3])
        _columns_kept(out["tex"], out["tables"])
        assert re.findall(r"\$-?[\d.]+e[-+]?\d+\$", out["tex"]) == [], name  # no "9e-4"
        powers += out["tex"].count("\\times10^{-")
    assert powers > 0  # the learned weights do have small entries, written as powers of ten


def test_learned_image_export_draws_the_heatmaps(opened, server):  # noqa: F811
    SHOTS.mkdir(exist_ok=True)
    page = opened(1280, 900)
    page.goto(server + "/?mh.mode=learned#figure-multi-head")
    page.wait_for_function(READY)
    svg = _export(page, "figure-multi-head")["svg"]
    n = page.locator("#learned-seq > span").count()
    assert svg.count('<g class="heatmap">') == 8
    assert svg.count("<rect ") >= 8 * n * n  # one square per weight, every head
    width = int(re.search(r'width="(\d+)"', svg)[1])
    height = int(re.search(r'height="(\d+)"', svg)[1])
    assert width <= 1000 and height <= 1200, (width, height)
    # Shaded as the page shades: some cells near white (no weight), some dark (most weight).
    fills = re.findall(r'fill="rgb\((\d+),', svg)
    assert min(map(int, fills)) < 60 and max(map(int, fills)) > 240
    (SHOTS / "learned-export.svg").write_text(svg)
    page.set_content(svg)
    page.screenshot(path=str(SHOTS / "learned-export.png"), full_page=True)
