"""A corpus attnlab writes itself: short sentences with names, objects and repeated phrases, so
that a small language model trained on it grows the heads interpretability work looks for.

Shape legend: B sequences, N = the context (positions per sequence), V the vocabulary.

Three kinds of sentence, drawn at random and joined until a sequence of N + 1 words is full:

    giving      "when John and Mary went to the park , John gave a cake to Mary ."
                The last name is the one of the pair that did not give: to predict it, a head
                must find the two names and leave out the repeated one (the indirect-object
                task that name-mover heads solve in GPT-2).
    repeat      "red blue one two . red blue one two ." A phrase of random words said twice:
                the second copy is predictable only by looking back to the first (induction).
    plain       "Anna likes the book ." / "the ball is in the garden ." Filler with structure.

Every sequence starts with ``<bos>``. Words are whole tokens: the tokenizer is a word-level one
(``tokenizer.json``, ``tokenizers``' WordLevel model), so each token is a word a reader can see.
``sequences`` draws training batches; ``evaluation`` fixes held-out sequences with the positions
whose next word is determined (the giving sentence's last name, a repeated phrase's second copy)
for measuring what the model learned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["VOCABULARY", "Evaluation", "evaluation", "sentence", "sequences"]

NAMES = ("John", "Mary", "Tom", "Anna", "Paul", "Lisa", "Mark", "Sara")
OBJECTS = ("flower", "book", "ball", "apple", "cake", "letter", "hat", "cup")
PLACES = ("store", "park", "school", "river", "market", "garden")
FILLER = ("red", "blue", "green", "one", "two", "three", "big", "small", "old", "new")
FUNCTION = ("when", "and", "went", "to", "the", "gave", "a", "likes", "is", "in", ".", ",")
SPECIAL = ("<bos>", "<unk>")
#: Every word; its position is its token id: special tokens first, then function words and content.
VOCABULARY = SPECIAL + FUNCTION + NAMES + OBJECTS + PLACES + FILLER
_ID = {w: i for i, w in enumerate(VOCABULARY)}


def sentence(rng: np.random.Generator, kind: str) -> tuple[list[str], list[int]]:
    """(words, the indices among them whose word is determined by what came before)."""
    if kind == "giving":
        giver, other = rng.choice(NAMES, 2, replace=False)
        first, second = (giver, other) if rng.random() < 0.5 else (other, giver)
        place, thing = rng.choice(PLACES), rng.choice(OBJECTS)
        words = ["when", first, "and", second, "went", "to", "the", place, ",",
                 giver, "gave", "a", thing, "to", other, "."]  # fmt: skip
        return words, [14]  # the indirect object
    if kind == "repeat":
        phrase = list(rng.choice(FILLER + OBJECTS, int(rng.integers(3, 6)), replace=False))
        words = phrase + ["."] + phrase + ["."]
        start = len(phrase) + 1
        return words, list(range(start + 1, len(words)))  # after the copy's first word
    if rng.random() < 0.5:
        return [str(rng.choice(NAMES)), "likes", "the", str(rng.choice(OBJECTS)), "."], []
    return ["the", str(rng.choice(OBJECTS)), "is", "in", "the", str(rng.choice(PLACES)), "."], []


def _sequence(rng: np.random.Generator, length: int) -> tuple[list[str], dict]:
    """``length`` words from ``<bos>`` on, and per task the indices of its determined words."""
    words, marks = ["<bos>"], {"giving": [], "repeat": []}
    while len(words) < length:
        kind = str(rng.choice(("giving", "repeat", "plain"), p=(0.45, 0.35, 0.2)))
        more, determined = sentence(rng, kind)
        if kind in marks:
            marks[kind] += [len(words) + i for i in determined if len(words) + i < length]
        words += more
    return words[:length], marks


def sequences(rng: np.random.Generator, count: int, context: int):
    """(tokens (B, N), targets (B, N)): next-word prediction over ``count`` fresh sequences."""
    ids = np.array([[_ID[w] for w in _sequence(rng, context + 1)[0]] for _ in range(count)])
    return ids[:, :-1], ids[:, 1:]  # (B, N) each


@dataclass(frozen=True)
class Evaluation:
    """Held-out sequences and, per task, the (sequence, position) pairs whose next word is
    determined: ``giving`` (the indirect object) and ``repeat`` (a phrase's second copy)."""

    tokens: np.ndarray  # (B, N)
    targets: np.ndarray  # (B, N)
    giving: np.ndarray  # (K, 2): sequence, position predicting the indirect object
    repeat: np.ndarray  # (K, 2)


def evaluation(seed: int = 12345, count: int = 256, context: int = 32) -> Evaluation:
    """A fixed held-out set (its own seed, never drawn in training)."""
    rng = np.random.default_rng(seed)
    rows, found = [], {"giving": [], "repeat": []}
    for b in range(count):
        words, marks = _sequence(rng, context + 1)
        rows.append([_ID[w] for w in words])
        for task, at in marks.items():  # word i is predicted at position i - 1
            found[task] += [(b, i - 1) for i in at]
    ids = np.array(rows)  # (B, N + 1)
    return Evaluation(ids[:, :-1], ids[:, 1:], np.array(found["giving"]), np.array(found["repeat"]))
