"""``masks.Chunks``: a query sees only its own chunk's keys, checked against tables built by
hand, and attention under ``Causal() + Chunks(c)`` against attention under that table."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import AttnlabError
from attnlab.masks import Causal, Chunks, Dense


def _by_hand(n: int, m: int, size: int, align: str, causal: bool) -> np.ndarray:
    off = 0 if align == "top_left" else m - n
    table = np.zeros((n, m), bool)
    for i in range(n):
        for j in range(m):
            same = (i + off) // size == j // size
            table[i, j] = same and (not causal or j <= i + off)
    return table


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(
    ("n", "m", "size"), [(7, 7, 3), (4, 9, 2), (9, 9, 1), (5, 5, 8), (3, 10, 4)]
)
def test_tables_are_the_hand_built_ones(n, m, size, align):
    np.testing.assert_array_equal(
        Chunks(size, align).allowed(n, m), _by_hand(n, m, size, align, causal=False)
    )
    both = Causal(align) + Chunks(size, align)
    np.testing.assert_array_equal(both.allowed(n, m), _by_hand(n, m, size, align, causal=True))


@pytest.mark.parametrize("method", ["dense", "blockwise", "auto"])
def test_attention_under_chunks_is_attention_under_the_table(method):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 70, 8)) for _ in range(3))
    table = _by_hand(70, 70, 16, "top_left", causal=True)
    ours = al.attention(q, k, v, Causal() + Chunks(16), method=method, block_size=32)
    np.testing.assert_allclose(ours, al.attention(q, k, v, Dense(table)), atol=1e-12)


def test_specs_compare_by_value_and_read_back():
    assert Chunks(4) == Chunks(4) and Chunks(4) != Chunks(5)
    assert repr(Chunks(4)) == "Chunks(4)"
    assert repr(Chunks(4, "bottom_right")) == "Chunks(4, align='bottom_right')"


@pytest.mark.parametrize(("args", "match"), [
    ((0,), "expected size to be a positive integer, but got 0 instead"),
    ((True,), "expected size to be a positive integer, but got True instead"),
    ((4, "left"), "expected align to be one of"),
])  # fmt: skip
def test_bad_arguments_are_one_error(args, match):
    with pytest.raises(AttnlabError, match=match):
        Chunks(*args)


def test_explain_says_what_chunks_allow():
    text = str(al.masks.explain(Causal() + Chunks(3), 5, 5))
    assert "Chunks(3): query i sees the keys j with j // 3 == (i) // 3" in text
    assert "query 3  a  a  a  ·  c   sees key 3" in text
