"""The errors attnlab raises on bad input.

Every error is a ``ValueError``, so code that already guards numeric input keeps working::

    ValueError
     └── AttnlabError              anything attnlab refuses
          ├── ShapeError           shapes that do not fit together (names both shapes)
          ├── FullyMaskedRowError  a query row whose mask allows no key (names the rows)
          ├── NonFiniteInputError  NaN or inf in q, k or v (pass check_finite=False to skip)
          ├── NonFiniteResultError finite inputs whose result overflowed (names stage and array)
          ├── FieldError           a web API request's field (``web/models.py``; names it)
          ├── CaseError            a case ``attnlab verify`` cannot judge
          │                        (``verifier/_options.py``; names the array or option)
          └── WidgetValueError     a value a notebook widget refused (``notebook/_checks.py``;
                                   also a ``traitlets.TraitError``)

AttnlabError and its first four subclasses are defined here; the last three beside the code that
raises them.

Messages read "expected ..., but got ... instead" and name the argument, so a learner can fix
the call without reading attnlab's source. The CLI turns them into one red line and exit code 2,
the web API into HTTP 422.
"""

from __future__ import annotations

__all__ = [
    "AttnlabError",
    "FullyMaskedRowError",
    "NonFiniteInputError",
    "NonFiniteResultError",
    "ShapeError",
]


class AttnlabError(ValueError):
    """Base class of every error attnlab raises on bad input."""


class ShapeError(AttnlabError):
    """Arrays whose shapes do not fit together, or a shape outside what a function accepts."""


class NonFiniteInputError(AttnlabError):
    """NaN or inf in an input that must be finite."""


class NonFiniteResultError(AttnlabError):
    """Finite inputs whose result is not: a table of the computation overflowed its dtype.

    Attributes:
        stage: "forward" or "backward".
        array: the table that overflowed first, by its ``AttentionTrace`` name ("output",
            "grad_weights", "grad_q", ...).
    """

    def __init__(self, message: str, stage: str = "", array: str = ""):
        super().__init__(message)
        self.stage = stage
        self.array = array


class FullyMaskedRowError(AttnlabError):
    """A query row that may attend to no key at all.

    Softmax over a row of -inf is 0/0 = NaN (§6.4), so attnlab refuses instead of returning it.

    Attributes:
        rows: the offending query rows, each a tuple index into ``(..., N)``.
        blocked_by: a description of the mask that left the rows empty, when known.
    """

    def __init__(self, message: str, rows: tuple[tuple[int, ...], ...] = (), blocked_by: str = ""):
        super().__init__(message)
        self.rows = rows
        self.blocked_by = blocked_by
