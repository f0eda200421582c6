"""Helpers that turn numpy tables into JSON-ready lists.

JSON has no -inf or NaN, so a blocked entry (-inf in the masked scores) becomes ``None``; the page
draws it as "−∞". Nothing else may be non-finite: attnlab refuses non-finite input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Matrix = list[list[float | None]]


def matrix(table) -> Matrix:
    """A (rows, cols) table as nested lists of floats, with -inf (a blocked pair) as None."""
    return [
        [None if math.isinf(x) else float(x) for x in row] for row in np.asarray(table).tolist()
    ]


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
