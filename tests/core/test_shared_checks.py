"""Helpers that now serve two places each keep both places' behaviour: the exact messages the
mask readers gave before they shared a check, the atomic write's last step with and without
force, a cost breakdown's dict and a lab table built from its spec's columns."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from attnlab._atomic import move_into_place
from attnlab.cost import breakdown
from attnlab.errors import AttnlabError
from attnlab.labs._common import row_table
from attnlab.masks import from_jax, from_key_padding_mask, from_torch

# -- mask readers: the whole message, as written before the checks were shared -----------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: from_torch(np.ones((2, 2), dtype=np.int64)),
            "expected attn_mask of dtype bool (True = may attend) or float (added to the scores), "
            "as SDPA requires, but got int64 instead; use attn_mask.bool() if 1 means 'may attend'",
        ),
        (
            lambda: from_key_padding_mask(np.zeros((2, 3), dtype=np.int32)),
            "expected key_padding_mask of dtype bool (True = ignore this key) or float, but got "
            "int32 instead; for a Hugging Face 1/0 attention_mask (1 = real token) use from_hf",
        ),
        (
            lambda: from_jax(np.zeros((1, 1, 2, 2))),
            "expected mask to be a bool array (True = take part) of 2 to 4 axes, as JAX requires "
            "(additive masks go to bias), but got dtype float64 and shape (1, 1, 2, 2) instead",
        ),
        (
            lambda: from_jax(np.ones((2,), dtype=bool)),
            "expected mask to be a bool array (True = take part) of 2 to 4 axes, as JAX requires "
            "(additive masks go to bias), but got dtype bool and shape (2,) instead",
        ),
        (
            lambda: from_jax(bias=np.ones((2, 2), dtype=bool)),
            "expected bias to be a float array of 2 to 4 axes, but got dtype bool and shape "
            "(2, 2) instead",
        ),
    ],
)
def test_mask_readers_keep_their_messages(call, message):
    with pytest.raises(AttnlabError, match=f"^{re.escape(message)}$"):
        call()


def test_float_masks_still_read_as_tables_or_biases():
    blocked = np.array([[0.0, -np.inf], [0.0, 0.0]])  # (N, M): only 0 and -inf, a table
    assert from_torch(blocked).allowed(2, 2).tolist() == [[True, False], [True, True]]
    biased = np.array([[0.0, -1.5]])  # a finite bias is kept as a bias, not a table
    assert from_torch(biased).additive(1, 2).tolist() == [[0.0, -1.5]]
    padding = np.array([[0.0, 0.0, -np.inf]])  # (B, M): key 2 padded
    assert from_key_padding_mask(padding).allowed(1, 3).reshape(-1).tolist() == [1, 1, 0]
    ignore = np.array([[False, True, True]])  # bool: True = ignore this key
    assert from_key_padding_mask(ignore).allowed(1, 3).reshape(-1).tolist() == [1, 0, 0]
    bias = np.array([[0.5, -0.5]])  # (N, M) float bias through JAX's reader
    assert from_jax(bias=bias).additive(1, 2).tolist() == [[0.5, -0.5]]


# -- the atomic write's last step ---------------------------------------------------------------


def test_move_into_place_without_force_never_replaces(tmp_path):
    temp, path = tmp_path / ".page.part", tmp_path / "page.html"
    temp.write_text("new")
    move_into_place(temp, path, force=False)  # no file there yet: it lands
    assert path.read_text() == "new"
    other = tmp_path / ".other.part"
    other.write_text("newer")
    with pytest.raises(FileExistsError):  # a file appeared meanwhile: it stays as it was
        move_into_place(other, path, force=False)
    assert path.read_text() == "new"


def test_move_into_place_with_force_replaces(tmp_path):
    temp, path = tmp_path / ".page.part", tmp_path / "page.html"
    path.write_text("old")
    temp.write_text("new")
    move_into_place(temp, path, force=True)
    assert path.read_text() == "new"
    assert not temp.exists()


# -- a breakdown's dict, from its fields and its totals -----------------------------------------


def test_breakdown_dict_holds_fields_then_totals():
    n, d = 6, 4  # madds: 3 N d², N² d, N² d, N d²
    got = breakdown(n, d).as_dict()
    assert list(got) == [
        "n", "d_model", "count", "projections", "scores", "weighted_sum", "output_projection",
        "linear", "quadratic", "total", "quadratic_share",
    ]  # fmt: skip
    assert got["projections"] == 3 * n * d * d and got["output_projection"] == n * d * d
    assert got["scores"] == got["weighted_sum"] == n * n * d
    assert got["linear"] == 4 * n * d * d and got["quadratic"] == 2 * n * n * d
    assert got["total"] == 4 * n * d * d + 2 * n * n * d
    assert got["quadratic_share"] == pytest.approx(n / (n + 2 * d))


# -- a lab table from its spec's columns --------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    width: int
    share: float


def test_row_table_follows_the_columns_order():
    rows = (_Row(16, 0.5), _Row(32, 0.25))
    columns = (("share", "sat."), ("width", "d_k"))
    assert row_table(rows, columns) == (["share", "width"], [[0.5, 16], [0.25, 32]])
    with pytest.raises(AttributeError):  # a column the rows lack is an error, not a blank
        row_table(rows, (("missing", "?"),))
