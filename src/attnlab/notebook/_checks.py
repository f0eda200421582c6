"""The checks every widget trait passes before it is stored, and the error a refusal raises.

A widget's traits are set from a cell (``w.d_k = 3``) or by its view (a click, a typed number).
Each value is checked here first; a bad one never reaches the widget, which keeps its last good
state and shows the refusal in its error line. The checks return the value in the plain form
the front end receives (``int``, ``bool``, nested lists of floats), so a numpy array or a numpy
integer set from a cell syncs like a list or an int.
"""

from __future__ import annotations

import numpy as np
import traitlets

from attnlab.errors import AttnlabError

__all__ = ["WidgetValueError", "flag", "index_pairs", "number_matrix", "shown", "whole_number"]


class WidgetValueError(AttnlabError, traitlets.TraitError):
    """A value a widget refused; the widget kept its last good one.

    An ``AttnlabError`` (so ``except attnlab.AttnlabError`` catches it, as it does every other
    refusal) and a ``traitlets.TraitError``, which is what traitlets expects from a validator:
    a change made inside ``hold_trait_notifications`` (several traits at once, or a message
    from the view) is rolled back as a whole only on a TraitError.
    """


def shown(value) -> str:
    """A short description of a value for a message: a big table by its shape, not its cells."""
    if isinstance(value, list | tuple | np.ndarray):
        try:
            arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
        except (TypeError, ValueError):
            arr = None
        if arr is not None and arr.size > 8:
            return f"a table of shape {arr.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def whole_number(name: str, value, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``; bools and floats are refused, not rounded."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise AttnlabError(
            f"expected {name} to be a whole number from {low} to {high}, "
            f"but got {shown(value)} ({type(value).__name__}) instead"
        )
    if not low <= value <= high:
        raise AttnlabError(
            f"expected {name} to be a whole number from {low} to {high}, but got {value} instead"
        )
    return int(value)


def flag(name: str, value) -> bool:
    """``value`` as a bool; 0, 1, "yes" and None are refused (a typo should not flip a switch)."""
    if not isinstance(value, bool | np.bool_):
        raise AttnlabError(f"expected {name} to be True or False, but got {shown(value)} instead")
    return bool(value)


def number_matrix(name: str, value) -> list[list[float]]:
    """``value`` as a matrix (rows, columns) of real numbers, as nested lists of floats.

    Only the type and the number of dimensions are checked here; sizes, ranges and how the
    matrices fit together are the figure builder's to check, which names them itself.
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # a ragged list: rows of different lengths
        arr = None
    if arr is None or arr.dtype == object:
        raise AttnlabError(
            f"expected {name} to be a matrix whose rows all have the same length, "
            f"but got {shown(value)} instead"
        )
    if arr.dtype.kind not in "iuf":  # bools, words, complex numbers
        kind = {"b": "True/False", "U": "text", "S": "text", "c": "complex"}.get(arr.dtype.kind)
        raise AttnlabError(
            f"expected {name} to be a matrix of real numbers, but got "
            f"{kind or arr.dtype} entries in {shown(value)}"
        )
    if arr.ndim != 2:
        raise AttnlabError(
            f"expected {name} to be a matrix (rows, columns), but got shape {arr.shape} instead"
        )
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:  # refused here, in the widget's words: no check_finite switch to point at
        i, j = (int(x) for x in bad[0])
        raise AttnlabError(
            f"expected every entry of {name} to be a finite number, but got "
            f"{float(arr[i, j])} at row {i + 1}, column {j + 1}"
        )
    return arr.astype(np.float64).tolist()


def index_pairs(name: str, value) -> list[list[int]]:
    """``value`` as a list of [row, column] pairs of whole numbers (their range is the caller's)."""
    if not isinstance(value, list | tuple):
        raise AttnlabError(f"expected {name} to be a list of [i, j] pairs, but got {shown(value)}")
    pairs = []
    for index, pair in enumerate(value):
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or any(
                isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer) for x in pair
            )
        ):
            raise AttnlabError(
                f"expected {name}[{index}] to be a pair [i, j] of whole numbers, "
                f"but got {shown(pair)} instead"
            )
        pairs.append([int(pair[0]), int(pair[1])])
    return pairs
