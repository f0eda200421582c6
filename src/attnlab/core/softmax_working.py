"""The softmax of one row worked as a reader works it by hand: the exponentials, their sum, the
division and the gap between the two largest scores (§6.2 step 4, §6.3's hinge).

Shape legend: a row of M masked scores, one per key (a blocked key as -inf or ``MASKED``).

One home for the working that ``attnlab example`` prints and the stepper figure shows, so the
terminal and the page write out the same numbers. The weights attention returns come from
``core/softmax.py``; this is the arithmetic written out beside them, in plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from attnlab.core.numbers import MASKED

__all__ = ["EXP_LIMIT", "SoftmaxRow", "softmax_working"]

EXP_LIMIT = 50.0  # e^50 is about 5e21: still printable; past it the working shifts the row
_GAP_LIMIT = 700.0  # e^700 is near float64's largest number: past it no ratio is given


@dataclass(frozen=True)
class SoftmaxRow:
    """The softmax step's working for one query row.

    ``exps[j]`` is e^(x_j - shift) for each allowed key (None where blocked); ``shift`` is 0
    unless the row's largest score is beyond ±EXP_LIMIT, when it is that score (softmax does not
    change when one number is taken from the whole row). ``total`` is the sum of the
    exponentials and ``weights[j]`` = exps[j] / total. ``gap`` is the top score minus the
    runner-up (None with fewer than two allowed keys), and ``gap_ratio`` = e^gap: how many
    times more weight the top key gets than the next.
    """

    exps: list[float | None]
    shift: float
    total: float
    weights: list[float | None]
    gap: float | None
    gap_ratio: float | None


def softmax_working(row: Sequence) -> SoftmaxRow | None:
    """The working of one row of masked scores (M,), a blocked key given as -inf or ``MASKED``;
    None when the row allows no key (it has no weights to work out).

    >>> w = softmax_working([0.0, float("-inf")])
    >>> w.exps, w.total, w.weights, w.gap
    ([1.0, None], 1.0, [1.0, None], None)
    """
    scores = [None if _blocked(x) else float(x) for x in row]  # (M,)
    allowed = sorted((s for s in scores if s is not None), reverse=True)
    if not allowed:
        return None
    top = allowed[0]
    shift = top if abs(top) > EXP_LIMIT else 0.0
    exps = [None if s is None else math.exp(s - shift) for s in scores]
    total = math.fsum(e for e in exps if e is not None)
    gap = allowed[0] - allowed[1] if len(allowed) > 1 else None
    return SoftmaxRow(
        exps=exps,
        shift=shift,
        total=total,
        weights=[None if e is None else e / total for e in exps],
        gap=gap,
        gap_ratio=None if gap is None or gap > _GAP_LIMIT else math.exp(gap),
    )


def _blocked(x) -> bool:
    return x == MASKED if isinstance(x, str) else x == -math.inf
