"""The permutation lab (§6.5): without positions "dog" gets the same output in both sentences."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import permutation

EQUIVARIANT = 1e-12  # rounding only: a different summation order over the keys


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_equivariant_without_positions_and_not_with_them(seed):
    r = permutation(seed=seed)
    assert r.tokens == ("The", "dog", "bit", "the", "man")
    assert r.shuffled_tokens == ("The", "man", "bit", "the", "dog")
    assert r.order == (0, 4, 2, 3, 1)
    assert r.equivariance_error <= EQUIVARIANT
    assert r.word_difference <= EQUIVARIANT
    # Positions: outputs move by a sizeable fraction of their own size.
    assert r.positional_error > 1e-2 * r.output_scale
    assert r.word_difference_with_positions > 1e-3


def test_outputs_are_the_reordered_outputs():
    r = permutation()
    out, shuffled = np.array(r.outputs), np.array(r.shuffled_outputs)
    assert out.shape == (5, 8)
    np.testing.assert_allclose(shuffled, out[list(r.order)], rtol=0, atol=EQUIVARIANT)
    pos, p_pos = np.array(r.outputs_with_positions), np.array(r.shuffled_outputs_with_positions)
    assert np.abs(p_pos - pos[list(r.order)]).max() == pytest.approx(r.positional_error)
    assert max(r.token_changes) == pytest.approx(r.positional_error)


def test_the_and_The_share_a_vector():
    r = permutation()
    out, pos = np.array(r.outputs), np.array(r.outputs_with_positions)
    assert np.abs(out[0] - out[3]).max() <= EQUIVARIANT  # same word, same output
    assert np.abs(pos[0] - pos[3]).max() > 1e-3  # different places, different outputs


def test_same_order_with_positions_changes_nothing():
    r = permutation(shuffled="The dog bit the man")
    assert r.positional_error == 0.0 and r.equivariance_error == 0.0


def test_same_seed_same_numbers_other_seed_other_numbers():
    assert permutation(seed=5) == permutation(seed=5)
    assert permutation(seed=5).outputs != permutation(seed=6).outputs


def test_table_has_one_row_per_token():
    columns, rows = permutation().table()
    assert columns[:3] == ["token", "position", "shuffled_position"]
    assert [row[0] for row in rows] == ["The", "man", "bit", "the", "dog"]
    assert all(row[3] <= EQUIVARIANT and row[4] > 0 for row in rows)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shuffled": "The cat bit the man"}, "reorder"),
        ({"shuffled": "The dog bit the"}, "reorder"),
        ({"sentence": "", "shuffled": ""}, "at least one word"),
        ({"word": "cat"}, "word"),
        ({"d_model": 0}, "d_model"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        permutation(**kwargs)
