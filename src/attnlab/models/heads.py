"""Head scores: which heads attend to the previous token, the first token, an earlier copy of
the current token, or the token after such a copy (induction).

Shape legend: L layers, h heads, N tokens; A is one head's (N, N) weights, ids the tokens.

Two definitions of each score, kept apart and labelled:

attnlab's (``scores``): the mean, over the queries where the pattern exists, of the weight the
query puts on the positions the pattern names:
    previous_token   A[i, i-1], over queries i >= 1
    first_token      A[i, 0], over queries i >= 1 (the "sink" heads that park weight on token 0)
    duplicate_token  Σ A[i, j] over earlier j with ids[j] = ids[i], over queries with such a j
    induction        Σ A[i, j+1] over j with ids[j] = ids[i] and j + 1 < i, over queries with
                     such a j (the token that followed the earlier copy)
A score is NaN when no query in the text has the pattern (no repeated token, say).

An encoder (BERT) sees both ways, so its heads are scored by kinds that need no order
(``ENCODER_KINDS``): previous_token and first_token as above, next_token A[i, i+1] over
queries i <= N - 2, and duplicate_token over every other copy j != i, before or after;
induction (a copy's successor, read left to right) is left out. Padded positions
(``attention_mask`` 0) are dropped from the table and the ids before any score.

TransformerLens's ``detect_head`` (``transformer_lens``): a 0/1 detection pattern P (lower
triangular, N x N) per kind, and the score Σ(A ∘ P) / Σ A over the whole table (its default
"mul" measure, no exclusions). Its patterns: previous token P[i, i-1] = 1; duplicate token
P[i, j] = 1 for j < i with ids[j] = ids[i]; induction the duplicate pattern moved one column
right (P[i, j+1] = 1, with j + 1 <= i). TransformerLens has no first-token pattern; the
``transformer_lens`` first_token score uses the same measure with P[i, 0] = 1 for every i.
For an encoder the same measure runs on P[i, i+1] (next token) and on the duplicate pattern
over both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ENCODER_KINDS", "HEAD_KINDS", "HeadScores", "head_scores", "patterns"]

HEAD_KINDS = ("previous_token", "induction", "duplicate_token", "first_token")
#: The kinds an encoder's (bidirectional) heads are scored by.
ENCODER_KINDS = ("previous_token", "next_token", "duplicate_token", "first_token")


def patterns(ids: np.ndarray) -> dict[str, np.ndarray]:
    """TransformerLens's 0/1 detection patterns for token ids (N,), each (N, N)."""
    n = len(ids)
    same = ids[:, None] == ids[None, :]  # (N, N)
    duplicate = np.tril(same, -1)
    induction = np.zeros((n, n), bool)
    induction[:, 1:] = duplicate[:, :-1]  # P[i, j+1] = duplicate[i, j]
    first = np.zeros((n, n), bool)
    first[:, 0] = True
    return {
        "previous_token": np.eye(n, k=-1, dtype=bool),
        "induction": np.tril(induction),
        "duplicate_token": duplicate,
        "first_token": first,
    }


def encoder_patterns(ids: np.ndarray) -> dict[str, np.ndarray]:
    """An encoder's 0/1 patterns for token ids (N,), each (N, N): no side is favoured."""
    n = len(ids)
    duplicate = (ids[:, None] == ids[None, :]) & ~np.eye(n, dtype=bool)  # (N, N)
    first = np.zeros((n, n), bool)
    first[:, 0] = True
    return {
        "previous_token": np.eye(n, k=-1, dtype=bool),
        "next_token": np.eye(n, k=1, dtype=bool),
        "duplicate_token": duplicate,
        "first_token": first,
    }


def _attnlab_masks(ids: np.ndarray) -> dict[str, np.ndarray]:
    """attnlab's (N, N) selections: which keys each query's score sums."""
    p = patterns(ids)
    first = p["first_token"].copy()
    first[0] = False  # query 0 can only see token 0: no evidence either way
    induction = np.tril(p["induction"], -1)  # j + 1 < i: never the query itself
    return {
        "previous_token": p["previous_token"],
        "induction": induction,
        "duplicate_token": p["duplicate_token"],
        "first_token": first,
    }


def _score(weights: np.ndarray, select: np.ndarray) -> np.ndarray:
    """Mean over the queries with any selected key of the selected weight: (L, h, N, N) -> (L, h)."""
    rows = select.any(-1)  # (N,)
    if not rows.any():
        return np.full(weights.shape[:2], np.nan)
    picked = (weights * select).sum(-1)[..., rows]  # (L, h, rows)
    return picked.mean(-1)


@dataclass(frozen=True)
class HeadScores:
    """Every head's scores of each kind, by both definitions (see the module docstring).

    Attributes:
        scores: attnlab's, kind -> (L, h).   transformer_lens: detect_head's, kind -> (L, h).
        ids: the tokens they were measured on, (N,).
    """

    scores: dict[str, np.ndarray]
    transformer_lens: dict[str, np.ndarray]
    ids: np.ndarray

    def strongest(self, kind: str, count: int = 3) -> list[tuple[int, int, float]]:
        """(layer, head, score) of the ``count`` highest attnlab scores of ``kind``."""
        table = self.scores[kind]
        if np.isnan(table).all():
            return []
        order = np.argsort(-np.nan_to_num(table, nan=-np.inf), axis=None)[:count]
        return [
            (int(i // table.shape[1]), int(i % table.shape[1]), float(table.flat[i])) for i in order
        ]

    def as_dict(self) -> dict:
        """JSON-ready: both definitions, NaN as None."""

        def lists(table: np.ndarray):
            return [[None if np.isnan(x) else float(x) for x in row] for row in table]

        return {
            "ids": self.ids.tolist(),
            "attnlab": {k: lists(v) for k, v in self.scores.items()},
            "transformer_lens": {k: lists(v) for k, v in self.transformer_lens.items()},
        }


def head_scores(run, batch: int = 0) -> HeadScores:
    """Both definitions of every score for each head of ``run`` (a ``ModelRun``): the
    encoder's kinds when no layer is causal, else the decoder's."""
    ids = run.ids[batch]  # (N,)
    weights = np.stack([w[batch] for w in run.attention]).astype(np.float64)  # (L, h, N, N)
    keys = getattr(run, "keys", None)
    if keys is not None:  # only real tokens: padding is neither a query nor a key
        real = np.flatnonzero(keys[batch])  # (N',)
        ids, weights = ids[real], weights[..., real[:, None], real]  # (L, h, N', N')
    # a layer (or a run) that does not say it is bidirectional is scored as a decoder's
    if any(getattr(layer, "causal", True) for layer in getattr(run, "layers", [None])):
        ours = {k: _score(weights, m) for k, m in _attnlab_masks(ids).items()}
        table = patterns(ids)
    else:
        table = encoder_patterns(ids)
        first = table["first_token"].copy()
        first[0] = False  # token 0 on itself is not a first-token head's mark
        ours = {k: _score(weights, first if k == "first_token" else m) for k, m in table.items()}
    total = weights.sum((-2, -1))  # (L, h): N, less what sinks took
    theirs = {k: (weights * p).sum((-2, -1)) / total for k, p in table.items()}
    return HeadScores(scores=ours, transformer_lens=theirs, ids=ids)
