"""explain(): the grid agrees with the mask's own table and names the parts that block each cell;
its size is bounded; bad input is refused. Also the conftest hook that says how to get torch."""

from __future__ import annotations

import types

import numpy as np
import pytest

import conftest
from attnlab.errors import ShapeError
from attnlab.masks import Causal, Dense, Padding, SlidingWindow, explain


def _grid_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("  query ")]


@pytest.mark.parametrize(
    ("mask", "n", "m"),
    [
        (Causal(), 4, 4),
        (Causal("bottom_right"), 3, 5),
        (SlidingWindow(2) + Padding([3, 1]), 4, 4),
        (Causal() + Dense(np.array([[True, False, True]])), 3, 3),
    ],
    ids=repr,
)
def test_codes_are_the_parts_that_block(mask, n, m):
    """Bit p of a cell is set exactly when part p blocks that pair; 0 exactly where allowed."""
    e = explain(mask, n, m)
    parts = mask.parts()
    lead_ndim = 1 if mask.batched else 0
    allowed = mask.allowed(n, m, lead_ndim=lead_ndim).reshape(-1, n, m)
    assert len(e.grids) == len(allowed)
    for (_, codes), table in zip(e.grids, allowed, strict=True):
        assert np.array_equal(codes == 0, table)
    for p, part in enumerate(parts):
        own = part.allowed(n, m, lead_ndim=lead_ndim) if part.batched else part.allowed(n, m)
        own = np.broadcast_to(own, allowed.shape[:1] + (n, m) if part.batched else (n, m))
        for g, (_, codes) in enumerate(e.grids):
            mine = own[g] if part.batched else own
            assert np.array_equal((codes >> p) & 1 == 1, ~mine)


def test_text_shows_the_chapters_causal_matrix():
    text = str(explain(Causal(), 4))
    assert _grid_lines(text) == [
        "  query 0  · c c c  sees key 0",
        "  query 1  · · c c  sees keys 0-1",
        "  query 2  · · · c  sees keys 0-2",
        "  query 3  · · · ·  sees keys 0-3",
    ]
    assert "c  blocked by Causal(): query i sees keys 0..i" in text


def test_cells_blocked_by_two_parts_name_both():
    text = str(explain(Causal() + Padding([1]), 2, 2))
    assert _grid_lines(text)[0] == "  query 0  ·  cp  sees key 0"
    assert _grid_lines(text)[1] == "  query 1  ·  p   sees key 0"
    assert "p  blocked by Padding(lengths=[1])" in text


def test_a_row_with_no_key_says_attention_raises():
    text = str(explain(Causal("bottom_right"), 3, 2))
    assert "query 0  c c  sees no key (attention raises FullyMaskedRowError)" in text


def test_window_words_follow_the_alignment():
    assert "query i sees keys i-1..i" in str(explain(SlidingWindow(2), 3))
    assert "query i sees keys i+1..i+2" in str(explain(SlidingWindow(2, "bottom_right"), 3, 5))


def test_size_is_bounded():
    small = explain(Causal(), 64)
    assert small.grids[0][1].shape == (64, 64) and not small.note
    big = explain(Causal(), 10**6, 10**6)  # renders only the corner: no 10**12 table
    assert big.grids[0][1].shape == (16, 16)
    assert "showing queries 0-15 and keys 0-15 of 1000000 x 1000000" in str(big)
    many = explain(Padding(list(range(1, 11))), 2, 3)
    assert len(many.grids) == 4 and "showing 4 of 10 batch elements" in str(many)


def test_corner_rows_do_not_claim_no_key():
    e = explain(SlidingWindow(2, "bottom_right"), 10, 100)  # row 0 sees keys 89-90
    assert "query 0 " in str(e) and "FullyMaskedRowError" not in str(e)
    assert str(e).count("sees no key of those shown") == 10


def test_html_is_a_table_with_the_same_cells():
    html = explain(Causal() + Padding([2]), 2, 3)._repr_html_()
    assert html.count("<tr>") == 3 and "<table" in html
    assert "cp</td>" in html and "Padding(lengths=[2])" in html


def test_arrays_are_explained_as_dense():
    e = explain(np.array([[True, False]]), 1, 2)
    assert "Dense(bool, shape=(1, 2))" in str(e)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((None, 2), "expected a mask"),
        ((Causal(), 0), "n to be a positive integer"),
        ((Dense(np.ones((2, 2), bool)), 3), r"broadcastable to the score table"),
    ],
)
def test_bad_input(args, match):
    with pytest.raises(ShapeError, match=match):
        explain(*args)


# -- conftest: one line saying how to install torch -----------------------------------------


def test_torch_skip_summary_counts_and_says_how_to_install():
    reasons = [
        "Skipped: torch is not installed: the PyTorch oracle tests need it",
        "Skipped: jax is not installed: the JAX oracle tests need it",
        "Skipped: torch is not installed: the PyTorch oracle tests need it",
    ]
    line = conftest.torch_skip_summary(reasons)
    assert line == (
        "torch not installed: 2 tests skipped; install with .venv/bin/pip install torch==2.13.0"
    )
    assert conftest.torch_skip_summary(reasons[1:2]) is None
    assert conftest.torch_skip_summary([]) is None


def test_terminal_summary_hook_writes_the_line_once():
    written = []
    report = types.SimpleNamespace(longrepr=("t.py", 1, "Skipped: torch is not installed: x"))
    reporter = types.SimpleNamespace(
        stats={"skipped": [report, report]},
        write_line=lambda line, **kw: written.append(line),
    )
    conftest.pytest_terminal_summary(reporter)
    assert written == [conftest.torch_skip_summary(["torch is not installed"] * 2)]
    reporter.stats = {}
    conftest.pytest_terminal_summary(reporter)
    assert len(written) == 1
