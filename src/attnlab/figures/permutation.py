"""Figure ``permutation-demo``: self-attention cannot see word order (§6.5).

Shape legend: N tokens, d_model features per token (here 5 and 4).

A short sentence with hand-set token vectors goes through unmasked self-attention,
``attention(X, X, X)``. Reordering the tokens reorders the outputs and changes nothing else;
adding position vectors (``positions.sinusoidal``) before attention makes the outputs depend
on where each token sits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlab import attention
from attnlab.errors import AttnlabError
from attnlab.figures._data import Matrix, as_dict, matrix, vector
from attnlab.positions import sinusoidal

__all__ = [
    "MAX_WORDS",
    "MAX_WORD_LENGTH",
    "MIN_WORDS",
    "SENTENCE",
    "SWAP",
    "PermutationFigure",
    "TokenRow",
    "build_permutation",
    "check_words",
    "word_vector",
]

FIGURE_ID = "permutation-demo"

# §6.5's sentence. "The" and "the" share one vector: to attention they are the same word.
SENTENCE = ("The", "dog", "bit", "the", "man")
_VECTORS = {
    "the": (1.0, 0.0, 0.5, 0.0),
    "dog": (0.0, 2.0, 1.0, -1.0),
    "bit": (1.5, -1.0, 0.0, 2.0),
    "man": (-1.0, 1.5, 2.0, 0.5),
}
D_MODEL = 4
EMBEDDINGS = np.array([_VECTORS[w.lower()] for w in SENTENCE])  # (N, d_model)
# Your own sentence: 2 to 8 words of letters (an apostrophe or hyphen inside is fine).
MIN_WORDS, MAX_WORDS, MAX_WORD_LENGTH = 2, 8, 20
_WORD = re.compile(r"^[^\W\d_]+(?:['’-][^\W\d_]+)*$")
# The page's "swap" button: subject and object trade places, "The man bit the dog" (§6.5).
SWAP = (0, 4, 2, 3, 1)


@dataclass(frozen=True)
class TokenRow:
    """One token in its current place."""

    id: int  # its index in the original sentence
    text: str
    slot: int  # where it sits now (0-based)
    vector: list[float]  # what goes into attention: embedding (+ position vector)
    output: list[float]  # its attention output now
    original_output: list[float]  # its output in the original order, same switch
    max_change: float  # largest |output - original_output| over its features


@dataclass(frozen=True)
class PermutationFigure:
    figure: str
    positions: bool
    order: list[int]  # order[slot] = id of the token sitting there
    d_model: int
    tokens: list[TokenRow]  # in their current order
    position_vectors: Matrix  # (N, d_model), the sinusoidal table (added only when positions)

    def as_dict(self) -> dict:
        return as_dict(self)


def _check_order(order: Sequence[int], n: int) -> list[int]:
    order = [int(i) for i in order]
    if sorted(order) != list(range(n)):
        raise AttnlabError(
            f"expected order to be a reordering of 0..{n - 1} (each index once), "
            f"but got {order!r} instead"
        )
    return order


def check_words(words: Sequence[str]) -> list[str]:
    """``words`` stripped, or AttnlabError saying which word breaks which bound."""
    words = [str(w).strip() for w in words]
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        raise AttnlabError(
            f"expected {MIN_WORDS} to {MAX_WORDS} words, but got {len(words)} instead"
        )
    for n, word in enumerate(words, 1):
        if len(word) > MAX_WORD_LENGTH or not _WORD.match(word):
            raise AttnlabError(
                f"expected word {n} to be 1 to {MAX_WORD_LENGTH} letters, "
                f"but got {word[: MAX_WORD_LENGTH + 5]!r} instead"
            )
    return words


def word_vector(word: str) -> np.ndarray:
    """The (d_model,) vector of a word: §6.5's hand-set one for its four words, otherwise a
    deterministic one read from the SHA-256 of the lower-cased word (first d_model bytes, each
    mapped to a multiple of 0.5 in -2..2). Same word, same vector, on every machine; case is
    ignored, so "The" and "the" stay one word to attention."""
    key = word.lower()
    if key in _VECTORS:
        return np.array(_VECTORS[key])
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return np.array([(b % 9) * 0.5 - 2.0 for b in digest[:D_MODEL]])


def _self_attention(x: np.ndarray) -> np.ndarray:
    return attention(x, x, x)  # (N, d_model): no mask, so nothing marks position


def build_permutation(
    order: Sequence[int] | None = None,
    *,
    positions: bool = False,
    words: Sequence[str] | None = None,
):
    """Self-attention outputs of §6.5's sentence (or ``words``) with its tokens in ``order``.

    Args:
        words: your own sentence (2 to 8 words of letters); None: §6.5's. Each word's vector is
            ``word_vector(word)``.
        order: order[slot] is the original index of the token placed at ``slot``; None keeps
            the sentence as written.
        positions: add the sinusoidal position vector of each slot before attention.

    >>> fig = build_permutation([4, 1, 2, 3, 0])  # "man dog bit the The"
    >>> max(row.max_change for row in fig.tokens) < 1e-12
    True
    >>> max(row.max_change for row in build_permutation([4, 1, 2, 3, 0], positions=True).tokens) > 0.01
    True
    """
    sentence = SENTENCE if words is None else tuple(check_words(words))
    embeddings = np.stack([word_vector(w) for w in sentence])  # (N, d_model)
    n, d_model = embeddings.shape
    order = list(range(n)) if order is None else _check_order(order, n)
    pe = sinusoidal(n, d_model)  # (N, d_model), one row per slot
    shift = pe if positions else np.zeros_like(pe)
    x = embeddings[order] + shift  # (N, d_model), tokens in their new slots
    out = _self_attention(x)  # (N, d_model)
    original = _self_attention(embeddings + shift)  # (N, d_model), the sentence as written
    rows = []
    for slot, token in enumerate(order):
        change = np.abs(out[slot] - original[token]).max()
        rows.append(
            TokenRow(
                id=token,
                text=sentence[token],
                slot=slot,
                vector=vector(x[slot]),
                output=vector(out[slot]),
                original_output=vector(original[token]),
                max_change=float(change),
            )
        )
    return PermutationFigure(
        figure=FIGURE_ID,
        positions=positions,
        order=order,
        d_model=d_model,
        tokens=rows,
        position_vectors=matrix(pe),
    )
