"""verify's plot: the error per (head, row) and per query tile, as Plotly JSON and as a page."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab import AttnlabError
from attnlab.verifier import figure, verify, write_plot
from attnlab.verifier._plot import MAX_COLUMNS, _pool
from verify_reference import inputs, reference


def _report(change=None, seed=0):
    q, k, v = inputs(np.random.default_rng(seed))  # (2, 24, 4, 16): two sequences of 24 rows
    out = reference(q, k, v, causal=True)["out"].astype(np.float32)
    for (b, row, head), delta in (change or {}).items():
        out[b, row, head] += np.float32(delta)
    return verify(q, k, v, out, causal=True)


def test_the_wrong_tile_is_the_only_red_bar():
    report = _report({(1, 10, 3): 1e-2})  # sequence 1, row 10: packed row 34
    fig = figure(report, tile=8)
    heat, bars, _ = fig["data"]  # a failed case: its block summary last
    assert len(heat["y"]) == 4 and len(heat["x"]) == 48  # heads x packed rows
    assert int(np.argmax(np.array(heat["customdata"])[3])) == 34
    # Tiles restart at each sequence: rows 0-7, 8-15, 16-23 | 24-31, 32-39, 40-47.
    assert bars["x"] == [0, 8, 16, 24, 32, 40] and bars["width"] == [8] * 6
    red = [x for x, c in zip(bars["x"], bars["marker"]["color"], strict=True) if c == "#cf222e"]
    assert red == [32]


def test_a_correct_kernel_has_no_red_bar():
    fig = figure(_report(), tile=8)
    assert "#cf222e" not in fig["data"][1]["marker"]["color"]
    assert len(fig["data"]) == 2  # no block summary for a passing case


def test_the_block_summary_marks_the_wrong_head_and_block():
    report = _report({(1, 10, 3): 1e-2})  # packed row 34 of 48: the one 128-row block
    blocks = figure(report)["data"][2]
    ratio = 10.0 ** np.array(blocks["z"])  # (heads, blocks)
    assert ratio.shape == (4, 1) and blocks["x"] == [0]
    assert ratio[3, 0] > 1 and (ratio[:3, 0] <= 1).all()  # head 3 alone fails
    t = report.tensors["out"]
    assert np.isclose(ratio[3, 0], t.max_abs_error / t.tolerance)


def test_tiles_follow_uneven_sequences():
    report = _report({(0, 23, 0): 1.0})
    fig = figure(report, tile=16)
    assert fig["data"][1]["x"] == [0, 16, 24, 40]
    assert fig["data"][1]["width"] == [16, 8, 16, 8]  # each sequence's last tile is shorter


def test_long_rows_are_pooled_by_their_maximum():
    heat = np.zeros((2, 3 * MAX_COLUMNS + 5))
    heat[1, 4000] = 7.0
    starts, pooled = _pool(heat)
    assert len(starts) <= MAX_COLUMNS and pooled.shape == (2, len(starts))
    assert pooled.max() == 7.0 and pooled[1].argmax() == np.searchsorted(starts, 4000, "right") - 1


def test_write_plot_keeps_an_existing_file(tmp_path):
    report = _report({(0, 3, 1): 1.0})
    page = tmp_path / "p.html"
    page.write_text("mine")
    with pytest.raises(AttnlabError, match="already exists"):
        write_plot(report, page)
    assert page.read_text() == "mine"
    write_plot(report, page, force=True)
    assert "plotly" in page.read_text() and sorted(p.name for p in tmp_path.iterdir()) == ["p.html"]
