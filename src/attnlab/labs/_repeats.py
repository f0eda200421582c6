"""Loss per position of a repeat: where in a copied segment a model's loss falls.

A sequence of the induction task ends with a segment of T tokens and the same T tokens again.
The loss at position i is −log p(token i + 1), in nats. This module averages it by the offset j
of i inside each copy (j = 0 … T − 2, the last position of each copy left out: its next token
starts the other copy or lies past the context):

    first_copy[j]    the loss at offset j of the first copy: its next token is new, so a
                     model can do no better than the token frequencies (about ln V)
    second_copy[j]   the loss at offset j of the second copy: its next token is a copy, which
                     an induction head can find

Offsets run 0 … N/2 − 2; an offset that no sequence reaches is None.

Shape legend: B sequences, N positions, T the repeat length of a sequence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["position_losses"]


def _by_offset(nll: np.ndarray, start: np.ndarray, lengths: np.ndarray, width: int) -> list:
    """Mean of nll (B, N) at offsets j = pos − start (B,) with 0 ≤ j ≤ T − 2, per j < width."""
    offset = np.arange(nll.shape[1])[None, :] - start[:, None]  # (B, N)
    inside = (offset >= 0) & (offset <= lengths[:, None] - 2) & ~np.isnan(nll)
    total = np.bincount(offset[inside], weights=nll[inside], minlength=width)[:width]
    count = np.bincount(offset[inside], minlength=width)[:width]
    return [round(float(t / c), 6) if c else None for t, c in zip(total, count, strict=True)]


def position_losses(model, tokens: np.ndarray, lengths: np.ndarray, **ablate) -> dict:
    """{"first_copy": [...], "second_copy": [...], "first_mean", "second_mean"} for ``model`` on
    induction sequences ``tokens`` (B, N) with repeat lengths ``lengths`` (B,).

    ``ablate``: passed to ``model.token_losses`` (``ablate=``, ``ablation=``).
    """
    n = tokens.shape[1]
    targets = np.full_like(tokens, -1)
    targets[:, :-1] = tokens[:, 1:]
    nll = model.token_losses(tokens, targets, **ablate).astype(float)  # (B, N), NaN at the end
    width = n // 2 - 1
    first, second = n - 2 * lengths, n - lengths  # (B,): where each copy begins
    out = {"first_copy": _by_offset(nll, first, lengths, width),
           "second_copy": _by_offset(nll, second, lengths, width)}  # fmt: skip
    for name, start in (("first_mean", first), ("second_mean", second)):
        offset = np.arange(n)[None, :] - start[:, None]
        inside = (offset >= 0) & (offset <= lengths[:, None] - 2)
        out[name] = float(nll[inside].mean())
    return out
