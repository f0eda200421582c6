"""Helpers that turn numpy tables into JSON-ready lists.

JSON has no -inf or NaN, so a blocked entry (-inf in the masked scores) becomes the string
``"-inf"`` and an entry with no value ``None`` (``core/numbers.py``'s ``encode_cell``); the page
writes both with the same ``formatNumber`` rule. Nothing else may be non-finite: attnlab refuses
non-finite input.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from attnlab.core.numbers import encode_cell

# An entry: a float, "-inf" for a blocked pair, None for no value.
Matrix = list[list[float | Literal["-inf"] | None]]


def matrix(table) -> Matrix:
    """A (rows, cols) table as nested lists: floats, "-inf" for a blocked pair."""
    return [[encode_cell(x) for x in row] for row in np.asarray(table).tolist()]


def vector(values) -> list[float]:
    """A 1-d array as a list of plain floats."""
    return [float(x) for x in np.asarray(values).tolist()]


def as_dict(obj: Any) -> Any:
    """Recursively turn figure dataclasses (and tuples) into plain dicts and lists."""
    if hasattr(obj, "__dataclass_fields__"):
        return {name: as_dict(getattr(obj, name)) for name in obj.__dataclass_fields__}
    if isinstance(obj, list | tuple):
        return [as_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: as_dict(v) for k, v in obj.items()}
    return obj
