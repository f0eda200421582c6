"""Lab: attention alone cannot see word order (§6.5), and position vectors fix that.

"The dog bit the man" and "The man bit the dog" hold the same words, so self-attention without
positions gives "dog" the same output vector in both: Attention(PX) = P·Attention(X) for the
permutation P that turns one sentence into the other. Adding sinusoidal position vectors
(attnlab.positions.sinusoidal) breaks the equality, which is the point of them.

Shape legend: N tokens, d_model the width of word vectors and of the single head (d_k = d_v =
d_model here); X (N, d_model) the sentence's word vectors, one row per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab import attention
from attnlab.errors import AttnlabError
from attnlab.labs._common import PERMUTATION, LabResult, column_keys, rng_for
from attnlab.labs._spec import SEED, Estimate, LabPlot, LabSpec, Param, Series
from attnlab.positions import sinusoidal

__all__ = ["SPEC", "PermutationResult", "permutation", "reordering"]

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class PermutationResult(LabResult):
    """Outputs of one seeded self-attention head on a sentence and on its reordering.

    ``order[i]`` is the index in ``tokens`` of ``shuffled_tokens[i]``: P·X = X[order]. Errors are
    max |Attention(P·X) - P·Attention(X)| over every entry; ``word_*`` compare the followed
    word's output row across the two sentences; ``token_changes`` has one entry per shuffled
    token: how far its output moved, with positions.
    """

    seed: int
    d_model: int
    word: str
    tokens: tuple[str, ...]
    shuffled_tokens: tuple[str, ...]
    order: tuple[int, ...]
    outputs: Matrix  # (N, d_model) for ``tokens``
    shuffled_outputs: Matrix  # (N, d_model) for ``shuffled_tokens``
    outputs_with_positions: Matrix
    shuffled_outputs_with_positions: Matrix
    equivariance_error: float  # without positions: rounding only, about 1e-16
    word_difference: float  # the word's output, sentence vs reordering, without positions
    positional_error: float  # with positions: large
    word_difference_with_positions: float
    output_scale: float  # max |output| with positions, to read positional_error against
    token_changes: tuple[float, ...]  # per shuffled token, with positions
    lab = "permutation"

    def table(self) -> tuple[list[str], list[list]]:
        columns = column_keys(SPEC.columns)
        plain = _row_changes(self.shuffled_outputs, self.outputs, self.order)
        rows = [
            [tok, self.order[i] + 1, i + 1, plain[i], self.token_changes[i]]
            for i, tok in enumerate(self.shuffled_tokens)
        ]
        return columns, rows

    def summary(self) -> list[str]:
        a, b = " ".join(self.tokens), " ".join(self.shuffled_tokens)
        return [
            f"Without positions, reordering '{a}' into '{b}' only reorders the outputs: "
            f"max |Attention(PX) - P·Attention(X)| = {self.equivariance_error:.3g}.",
            f"'{self.word}' gets the same output in both (difference "
            f"{self.word_difference:.3g}): attention alone cannot tell who did what to whom.",
            f"With sinusoidal positions added the outputs change by up to "
            f"{self.positional_error:.3g} (outputs are up to {self.output_scale:.3g} in size); "
            f"'{self.word}' moves by {self.word_difference_with_positions:.3g}.",
        ]


def _row_changes(shuffled: Matrix, original: Matrix, order: tuple[int, ...]) -> list[float]:
    diff = np.abs(np.asarray(shuffled) - np.asarray(original)[list(order)])  # (N, d_model)
    return diff.max(axis=-1).tolist()


def reordering(tokens: list[str], shuffled: list[str]) -> tuple[int, ...]:
    """order with shuffled[i] == tokens[order[i]]; repeated words are matched left to right."""
    pool = list(enumerate(tokens))
    order = []
    for word in shuffled:
        match = next((p for p in pool if p[1] == word), None)
        if match is None:
            break
        pool.remove(match)
        order.append(match[0])
    if pool or len(order) != len(shuffled):
        raise AttnlabError(
            f"expected the shuffled sentence to reorder the words of the sentence, but got "
            f"{' '.join(tokens)!r} and {' '.join(shuffled)!r} instead"
        )
    return tuple(order)


def _self_attention(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """One head: Attention(X W^Q, X W^K, X W^V), no mask. x (N, d), w (3, d, d) -> (N, d)."""
    q, k, v = x @ w  # each (N, d_model)
    return attention(q, k, v)


def permutation(
    seed: int = 0,
    d_model: int = 8,
    *,
    sentence: str = "The dog bit the man",
    shuffled: str = "The man bit the dog",
    word: str = "dog",
) -> PermutationResult:
    """Self-attention on a sentence and its reordering, without and with position vectors.

    Word vectors are seeded N(0, 1) rows, one per lower-cased word (so "The" and "the" share
    one); the head's projections W^Q, W^K, W^V are seeded N(0, 1/d_model) matrices.

    >>> r = permutation()
    >>> r.equivariance_error < 1e-12, r.positional_error > 1e-3
    (True, True)
    """
    seed, d_model = SPEC.check(seed=seed, d_model=d_model)
    tokens, reordered = sentence.split(), shuffled.split()
    if not tokens:
        raise AttnlabError(f"expected a sentence of at least one word, but got {sentence!r}")
    order = reordering(tokens, reordered)
    if word.lower() not in (t.lower() for t in tokens):
        raise AttnlabError(f"expected word to be one of {tokens}, but got {word!r} instead")
    rng = rng_for(seed, PERMUTATION)
    vocab = sorted({t.lower() for t in tokens})  # sorted: the vectors do not depend on order
    vectors = dict(zip(vocab, rng.standard_normal((len(vocab), d_model)), strict=True))
    w = rng.standard_normal((3, d_model, d_model)) / np.sqrt(d_model)  # W^Q, W^K, W^V

    x = np.stack([vectors[t.lower()] for t in tokens])  # (N, d_model)
    px = np.stack([vectors[t.lower()] for t in reordered])  # (N, d_model), = x[order]
    pe = sinusoidal(len(tokens), d_model)  # (N, d_model): row i belongs to position i
    out, p_out = _self_attention(x, w), _self_attention(px, w)
    pos, p_pos = _self_attention(x + pe, w), _self_attention(px + pe, w)

    at = [t.lower() for t in tokens].index(word.lower())
    p_at = [t.lower() for t in reordered].index(word.lower())
    order_list = list(order)
    return PermutationResult(
        seed=seed,
        d_model=d_model,
        word=word,
        tokens=tuple(tokens),
        shuffled_tokens=tuple(reordered),
        order=order,
        outputs=_matrix(out),
        shuffled_outputs=_matrix(p_out),
        outputs_with_positions=_matrix(pos),
        shuffled_outputs_with_positions=_matrix(p_pos),
        equivariance_error=float(np.abs(p_out - out[order_list]).max()),
        word_difference=float(np.abs(p_out[p_at] - out[at]).max()),
        positional_error=float(np.abs(p_pos - pos[order_list]).max()),
        word_difference_with_positions=float(np.abs(p_pos[p_at] - pos[at]).max()),
        output_scale=float(np.abs(pos).max()),
        token_changes=tuple(np.abs(p_pos - pos[order_list]).max(axis=-1).tolist()),
    )


def _matrix(a: np.ndarray) -> Matrix:
    return tuple(tuple(row) for row in a.tolist())


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------


def _estimate(d_model, sentence, **_) -> Estimate:
    # Measured: 2 ms at the defaults (16 ms on a first call), nearly all of it fixed cost; the
    # work is four single-head attentions over N tokens at ~2 ns per multiply-add (100 words
    # at d_model = 256: 0.18 s of CPU, 0.1 s by 1 ns).
    n = max(1, len(sentence.split()))
    work = 4 * (3 * n * d_model * d_model + 2 * n * n * d_model)  # multiply-adds
    return Estimate(0.005 + work * 2e-9, 8 * (4 * n * n + 12 * n * d_model + 3 * d_model**2))


def _plot(r: PermutationResult) -> LabPlot:
    columns, rows = r.table()
    c = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
    return LabPlot(
        title=f"How far each token's output moves: “{' '.join(r.tokens)}” → "
        f"“{' '.join(r.shuffled_tokens)}”",
        kind="bar",
        x=[f"{t} ({p})" for t, p in zip(c["token"], c["shuffled_position"], strict=True)],
        x_label="token (its new position)",
        y_label="largest |change| of its output (log scale)",
        series=[
            Series("without positions", c["change_without_positions"]),
            Series("with position vectors", c["change_with_positions"]),
        ],
        log_y=True,
    )


SPEC = LabSpec(
    name="permutation",
    title="Word order",
    summary="Attention alone cannot see word order; position vectors let it (§6.5).",
    heading="Permutation, d_model={d_model}, seed {seed}",
    run=permutation,
    params=(
        Param("d_model", "Width of the word vectors.", low=1, high=4096, web_high=256),
        Param("sentence", "The sentence.", max_length=200, budget=True),
        Param("shuffled", "The same words in another order.", max_length=200),
        Param("word", "The word to follow.", max_length=40),
        SEED,
    ),
    columns=(("token", "token"), ("position", "in sentence"), ("shuffled_position", "reordered"),
             ("change_without_positions", "Δ no positions"),
             ("change_with_positions", "Δ positions")),
    plot=_plot,
    estimate=_estimate,
    progress=False,
)  # fmt: skip
