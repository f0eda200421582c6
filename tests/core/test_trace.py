"""The step-by-step trace: the chapter's two-token example, number for number, and its rendering."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import attnlab as al
from attnlab.masks import Causal, Padding
from tolerances import CHAPTER, F64

# §6.2: the queries, keys and values of the two tokens.
Q = [[3, -3], [1, 1]]
K = [[-3, 3], [1, 1]]
V = [[0, -1], [1, 2]]
NEG = -np.inf


@pytest.fixture(scope="module")
def causal():
    return al.trace_attention(Q, K, V, mask=Causal())


@pytest.fixture(scope="module")
def unmasked():
    return al.trace_attention(Q, K, V)


def test_chapter_numbers_with_the_causal_mask(causal):
    # The numbers as the chapter prints them, to its 3-4 significant figures.
    np.testing.assert_array_equal(causal.scores, [[-18, 0], [0, 2]])
    np.testing.assert_allclose(causal.scaled, [[-12.73, 0], [0, 1.414]], atol=5e-3)
    np.testing.assert_allclose(causal.masked, [[-12.73, NEG], [0, 1.414]], atol=5e-3)
    np.testing.assert_allclose(causal.weights, [[1, 0], [0.196, 0.804]], **CHAPTER)
    np.testing.assert_allclose(causal.output, [[0, -1], [0.804, 1.413]], **CHAPTER)
    assert causal.scale == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert causal.mask == Causal()


def test_chapter_numbers_in_closed_form(causal):
    # Row 2's weights are 1 / (1 + e^√2) and e^√2 / (1 + e^√2); row 1 keeps only key 1.
    r2 = math.sqrt(2)
    w = 1 / (1 + math.exp(r2))
    np.testing.assert_allclose(causal.scaled, [[-18 / r2, 0], [0, 2 / r2]], **F64)
    np.testing.assert_array_equal(causal.weights[0], [1.0, 0.0])
    np.testing.assert_allclose(causal.weights[1], [w, 1 - w], **F64)
    np.testing.assert_allclose(causal.output, [[0, -1], [1 - w, -w + 2 * (1 - w)]], **F64)


def test_without_the_mask_token_one_looks_at_token_two(unmasked):
    gap = 18 / math.sqrt(2)  # the two scaled scores of row 1 differ by about 12.73
    lo = 1 / (1 + math.exp(gap))
    np.testing.assert_allclose(unmasked.weights[0], [0.000003, 0.999997], atol=5e-7)
    np.testing.assert_allclose(unmasked.weights[0], [lo, 1 - lo], **F64)
    np.testing.assert_array_equal(unmasked.masked, unmasked.scaled)  # no mask: nothing added
    # Row 2 does not depend on the mask: its only blocked key was none.
    np.testing.assert_allclose(unmasked.output[1], [0.804, 1.413], **CHAPTER)
    assert unmasked.mask is None


def test_without_scaling_the_scores_pass_through():
    t = al.trace_attention(Q, K, V, mask=Causal(), scale=1.0)
    np.testing.assert_array_equal(t.scaled, t.scores)
    w = 1 / (1 + math.exp(2))  # row 2's scores 0 and 2, unscaled
    np.testing.assert_allclose(t.weights[1], [w, 1 - w], **F64)


def test_stages_come_in_the_diagrams_order(causal):
    names = [name for name, _, _ in causal.stages()]
    assert names == ["scores", "scaled", "masked", "weights", "output"]
    for name, caption, table in causal.stages():
        assert table is getattr(causal, name)
        assert caption


def test_str_shows_aligned_tables_and_minus_inf(causal):
    text = str(causal)
    for number in ("-18", "-12.73", "1.414", "-inf", "0.1956", "0.8044", "1.413"):
        assert number in text
    # Each table's rows are bracketed lines of equal width: the columns line up.
    blocks = re.findall(r"((?:^  \[.*\]$\n?)+)", text, flags=re.M)
    assert len(blocks) == 5
    for block in blocks:
        lines = block.rstrip("\n").split("\n")
        assert len(lines) == 2
        assert len({len(line) for line in lines}) == 1
        cells = [line.strip("[] ").split() for line in lines]
        assert all(len(row) == len(cells[0]) for row in cells)
    assert "N=2" in repr(causal) and "Causal()" in repr(causal)


def test_html_has_one_table_per_stage(causal):
    html = causal._repr_html_()
    assert html.count("<table>") == 5
    assert html.count("<tr>") == 10
    assert "-inf" in html and "0.8044" in html
    assert "<script" not in html


def test_batched_trace_labels_each_matrix():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 3, 4)) for _ in range(3))
    t = al.trace_attention(q, k, v, mask=Padding([3, 1]))
    assert t.weights.shape == (2, 3, 3)
    assert "[0]" in str(t) and "[1]" in str(t)
    assert t._repr_html_().count("<table>") == 10
    # The trace and attention() share one implementation: same output, same weights.
    out, weights = al.attention(q, k, v, mask=Padding([3, 1]), return_weights=True)
    np.testing.assert_array_equal(t.output, out)
    np.testing.assert_array_equal(t.weights, weights)
    assert np.all(t.masked[1, :, 1:] == NEG)


def test_trace_validates_like_attention():
    with pytest.raises(al.ShapeError, match="d_k"):
        al.trace_attention([[1, 2]], [[1, 2, 3]], [[1]])
