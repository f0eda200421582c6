"""How a number is written, everywhere: the terminal, the trace, lab tables, CSV and the page.

One rule, so that a number reads the same wherever it is shown: four significant digits with
trailing zeros dropped (more when the reader asks: ``digits``, the page's "Digits" control), written plainly from 0.001 up to a million and as ``1.235e-4`` or
``1.235e+6`` outside that range; ties round away from zero (on the number's exact binary value,
as JavaScript's ``toFixed`` and ``toExponential`` do). Two values are not numbers and say so:

- ``-inf`` (``MASKED``) is a blocked pair, a score the mask set to minus infinity;
- ``—`` (``NO_VALUE``) is a cell with nothing in it: a row with no weights, a lab column that
  does not apply, NaN.

In JSON, which has neither, a blocked pair travels as the string ``"-inf"`` (``encode_cell``)
and an empty cell as ``null``; the page's ``formatNumber`` (``web/static/js/common.js``) follows
the same rule, and ``tests/core/test_numbers.py`` runs both on one table of cases.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal, localcontext

from attnlab.errors import AttnlabError

__all__ = [
    "MASKED",
    "MAX_DIGITS",
    "NO_VALUE",
    "SIGNIFICANT",
    "encode_cell",
    "format_cell",
    "format_number",
]

# Four significant digits print the chapter's numbers as it prints them (0.1065, 0.9987, 0.00825,
# 4.113); a fixed three decimals would not (0.00825 becomes 0.008, 0.1065 becomes 0.107).
SIGNIFICANT = 4
MAX_DIGITS = 17  # a float64 round-trips at 17
MASKED = "-inf"
NO_VALUE = "—"
# Plain notation from 1e-3 (inclusive) to 1e6 (exclusive): the decade of |x| picks the decimals.
_DECADES = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6)


def format_number(x, digits: int = SIGNIFICANT) -> str:
    """``x`` as text under the one rule above, to ``digits`` significant digits (1 to 17).

    >>> [format_number(v) for v in (-18.0, 1.41421, 0.5, 1e-5, 2.5e7, float("-inf"), None)]
    ['-18', '1.414', '0.5', '1e-5', '2.5e+7', '-inf', '—']
    >>> format_number(0.195573, digits=6)
    '0.195573'
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= MAX_DIGITS:
        raise AttnlabError(
            f"expected digits to be a whole number from 1 to {MAX_DIGITS}, but got {digits!r}"
        )
    if x is None or x == MASKED:
        return NO_VALUE if x is None else MASKED
    x = float(x)
    if math.isnan(x):
        return NO_VALUE
    if math.isinf(x):
        return MASKED if x < 0 else "inf"
    if x == 0:
        return "0"
    size = abs(x)
    if not _DECADES[0] <= size < _DECADES[-1]:
        with localcontext(rounding=ROUND_HALF_UP):
            mantissa, exponent = format(Decimal(x), f".{digits - 1}e").split("e")
        return (
            _trim(mantissa)
            + "e"
            + ("+" if not exponent.startswith("-") else "")
            + exponent.lstrip("+")
        )
    decade = sum(size >= d for d in _DECADES) - 4  # floor(log10 |x|), in -3 .. 5
    places = max(0, digits - 1 - decade)
    text = str(Decimal(x).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
    return _trim(text)


def format_cell(x) -> str:
    """A table cell as text: a float, or None for no value, under ``format_number``; anything
    else (a whole number such as a width or a count, a flag, a word) as ``str`` writes it, so
    that 65536 keys stay 65536.

    >>> [format_cell(v) for v in (0.123456, None, 65536, True, "case")]
    ['0.1235', '—', '65536', 'True', 'case']
    """
    if isinstance(x, float) or x is None:
        return format_number(x)
    return str(x)


def _trim(text: str) -> str:
    """Trailing zeros (and a bare point) off a decimal; "-0" as "0"."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def encode_cell(x):
    """A table entry for JSON: a float, ``"-inf"`` for a blocked pair, None for no value."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return MASKED if x < 0 else math.inf
    return x
