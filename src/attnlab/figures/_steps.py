"""The stepper's building blocks, shared by its forward and backward halves: a labelled table and
one step of the walk (``figures/stepper.py`` and ``figures/stepper_backward.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.figures._data import Matrix

__all__ = ["Step", "Table", "float_matrix"]


def float_matrix(name: str, value) -> np.ndarray:
    """``value`` as a float64 array, or an error naming ``name`` when it is no table of numbers
    (a ragged list, a word). Its shape and range are the caller's to check."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AttnlabError(
            f"expected {name} to be a rectangular matrix of numbers, but got {value!r}"
        ) from None


@dataclass(frozen=True)
class Table:
    """One labelled table. ``values`` uses None for -inf (a blocked pair) and for the entries
    of a row that has no weights because every key is blocked."""

    name: str
    label: str
    rows: list[str]
    cols: list[str]
    values: Matrix


@dataclass(frozen=True)
class Step:
    """One step of the walk: which tables feed it and which table it produces.

    ``feeds`` says which entries of the inputs make one entry (i, j) of the result, "first" and
    "second" being ``inputs[0]`` and ``inputs[1]``:
    "qk" (row i of the first and row j of the second: a product A Bᵀ), "av" (row i of the first
    and column j of the second: A B), "ta" (column i of the first and column j of the second:
    Aᵀ B), "cell" (entry (i, j) of each input), "row" (row i of each input), or "" for the
    opening step. ``phase`` is "forward" or "backward" (the gradients, from the output back).
    """

    id: str
    title: str
    formula: str
    explain: str
    inputs: list[str]
    result: str
    feeds: str
    phase: str = "forward"
