"""Figure ``multi-head``: four heads read one sentence, each with its own pattern (§6.6).

Shape legend: h heads (4), N tokens (10), d_v per-head value width (2), d_model (4).

The score tables are set by hand to mimic patterns seen in trained models (nobody assigns them
in a real model); ``attnlab.softmax`` turns the stacked (h, N, N) scores into weights. Each head
averages its own value vectors, the h outputs are joined side by side, and W^O mixes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab import softmax
from attnlab.errors import AttnlabError
from attnlab.figures._data import Matrix, as_dict, matrix, vector

__all__ = ["HEADS", "SENTENCE", "Head", "MultiHeadFigure", "Picked", "build_multihead"]

FIGURE_ID = "multi-head"

SENTENCE = ("The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "tired")
_IT, _ANIMAL, _BECAUSE = 7, 1, 6
# Each verb and the word that is its subject.
_SUBJECT = {2: _ANIMAL, 3: _ANIMAL, 8: _IT}
_STRONG = 4.0  # a score this far above the rest of its row takes most of the weight
_SELF = 2.0  # a head with nothing to do for a word rests mostly on the word itself


@dataclass(frozen=True)
class Head:
    name: str
    describes: str
    scores: Matrix  # (N, N), hand-set
    weights: Matrix  # (N, N), softmax of each row


@dataclass(frozen=True)
class Picked:
    """What the heads do for one query word."""

    query: int
    word: str
    weights: Matrix  # (h, N): each head's weights for this query
    top: list[int]  # per head, the key with the largest weight (the first, in a tie)
    tops: list[list[int]]  # per head, every key that ties for the largest weight
    top_weight: list[float]
    head_outputs: Matrix  # (h, d_v): each head's blend of its values
    joined: list[float]  # (h * d_v,): the head outputs side by side
    mixed: list[float]  # (d_model,): joined @ W^O


@dataclass(frozen=True)
class MultiHeadFigure:
    figure: str
    tokens: list[str]
    shape: list[int]  # of the stacked weights tensor: (h, N, N)
    heads: list[Head]
    values: list[Matrix]  # per head, its value vectors (N, d_v)
    w_o: Matrix  # (h * d_v, d_model)
    picked: Picked

    def as_dict(self) -> dict:
        return as_dict(self)


def _previous_word(n: int) -> np.ndarray:
    s = np.full((n, n), 0.0)
    s[0, 0] = _STRONG  # the first word has no previous word: it rests on itself
    s[np.arange(1, n), np.arange(n - 1)] = _STRONG  # (i, i - 1)
    return s


def _resting(n: int) -> np.ndarray:
    return np.eye(n) * _SELF  # (N, N)


def _pronoun(n: int) -> np.ndarray:
    s = _resting(n)
    s[_IT, _ANIMAL] = _STRONG + _SELF
    return s


def _subject(n: int) -> np.ndarray:
    s = _resting(n)
    for verb, subject in _SUBJECT.items():
        s[verb, subject] = _STRONG + _SELF
    return s


def _boundaries(n: int) -> np.ndarray:
    s = np.zeros((n, n))
    s[:, 0] = s[:, _BECAUSE] = _STRONG - 1.0  # split between the start and the clause break
    return s


HEADS = (
    ("previous word", "each word looks at the word just before it", _previous_word),
    ("pronoun → noun", "“it” looks at “animal”, the noun it stands for", _pronoun),
    ("verb → subject", "each verb looks at its subject", _subject),
    (
        "start and “because”",
        "every word looks at the sentence start and the clause break",
        _boundaries,
    ),
)

D_V, D_MODEL = 2, 4
# Small whole numbers so the mixing can be followed by hand; fixed by the seed.
_rng = np.random.default_rng(6)
VALUES = _rng.integers(-2, 3, size=(len(HEADS), len(SENTENCE), D_V)).astype(float)  # (h, N, d_v)
W_O = _rng.integers(-1, 2, size=(len(HEADS) * D_V, D_MODEL)).astype(float)  # (h*d_v, d_model)
del _rng


def build_multihead(query: int = 3) -> MultiHeadFigure:
    """The four heads' score and weight tables, and what they do for the word ``query``.

    Args:
        query: index of the query word in SENTENCE (0 to 9).

    >>> fig = build_multihead(SENTENCE.index("it"))
    >>> fig.tokens[fig.picked.top[1]], fig.shape
    ('animal', [4, 10, 10])
    """
    n = len(SENTENCE)
    if isinstance(query, bool) or not isinstance(query, int | np.integer) or not 0 <= query < n:
        raise AttnlabError(
            f"expected query to be a word index from 0 to {n - 1}, but got {query!r} instead"
        )
    scores = np.stack([make(n) for _, _, make in HEADS])  # (h, N, N)
    weights = softmax(scores, axis=-1)  # (h, N, N)
    heads_out = weights @ VALUES  # (h, N, d_v): each head's weighted average of its values
    joined = np.swapaxes(heads_out, 0, 1).reshape(n, -1)  # (N, h * d_v), [head_1; ...; head_h]
    mixed = joined @ W_O  # (N, d_model)

    row = weights[:, query, :]  # (h, N)
    picked = Picked(
        query=int(query),
        word=SENTENCE[query],
        weights=matrix(row),
        top=[int(j) for j in row.argmax(axis=-1)],
        tops=[
            [int(j) for j in np.flatnonzero(np.isclose(r, r.max(), rtol=0, atol=1e-12))]
            for r in row
        ],
        top_weight=vector(row.max(axis=-1)),
        head_outputs=matrix(heads_out[:, query, :]),
        joined=vector(joined[query]),
        mixed=vector(mixed[query]),
    )
    return MultiHeadFigure(
        figure=FIGURE_ID,
        tokens=list(SENTENCE),
        shape=list(weights.shape),
        heads=[
            Head(name, describes, matrix(s), matrix(w))
            for (name, describes, _), s, w in zip(HEADS, scores, weights, strict=True)
        ],
        values=[matrix(v) for v in VALUES],
        w_o=matrix(W_O),
        picked=picked,
    )
