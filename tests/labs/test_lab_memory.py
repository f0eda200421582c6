"""The training labs' tables and the CLI's memory gate.

The ceilings the training labs report were computed through tables the estimates did not
count: a (fresh, V, V) gain table (``lab train-positions --vocab-size 4096`` asked for 125 GiB)
and a (fresh, N, V) one-hot of successors (``lab train-induction --vocab-size 4096`` spent
40 s there). Both are now computed without a V-wide table per position, and a run whose
estimated bytes pass half the machine's memory asks for ``--yes`` as a long one does.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.labs.induction import ceiling, induction_sequences
from attnlab.labs.training_positions import permutation_ceiling, previous_token_task


def _peak(fn, *args) -> int:
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _gain_ceiling(tokens: np.ndarray, vocab: int) -> float:
    """The positions lab's formula term by term, in Python: an independent oracle."""
    total = 0.0
    for row in tokens:
        n = len(row)
        counts = [int((row == a).sum()) for a in range(vocab)]
        score = sum(counts[a] * max(counts[c] - (a == c) + (c == 0) for c in range(vocab))
                    for a in range(vocab))  # fmt: skip
        total += score / n**2
    return total / len(tokens)


@pytest.mark.parametrize("seed", range(6))
def test_the_positions_ceiling_is_its_formula(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(2, 7))
    tokens, _ = previous_token_task(rng, 5, int(rng.integers(2, 9)), vocab)
    assert permutation_ceiling(tokens, vocab) == pytest.approx(_gain_ceiling(tokens, vocab))


def test_the_positions_ceiling_needs_no_vocab_squared_table():
    tokens, _ = previous_token_task(np.random.default_rng(0), 4, 12, 4096)
    assert _peak(permutation_ceiling, tokens, 4096) < 8 * 4 * 4096 * 8  # a few (B, V) tables


def test_the_induction_ceiling_needs_no_vocab_wide_table_per_position():
    tokens, lengths = induction_sequences(np.random.default_rng(0), 200, 32, 4096)
    assert _peak(ceiling, tokens, lengths, 4096) < 200 * 32 * 4096  # the one-hot was 8x that


def test_positions_at_the_largest_vocabulary_runs(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "lab",
            "train-positions",
            "--vocab-size",
            "4096",
            "--steps",
            "2",
            "--fresh",
            "50",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output[-500:]


def test_a_run_past_half_the_memory_asks_for_yes(monkeypatch):
    import attnlab.cli.labs as labs_cli

    monkeypatch.setattr(labs_cli, "machine_bytes", lambda: 8 << 30)
    monkeypatch.setattr(labs_cli, "_progress", lambda label: pytest.fail("the lab ran"))
    args = ["lab", "train-positions", "--vocab-size", "4096", "--fresh", "100000", "--steps", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "--yes" in line and "memory" in line and "GiB" in line and "\n" not in line


def test_the_positions_estimate_counts_the_softmax_over_a_large_vocabulary():
    """At V = 4,096 the loss's softmax over the vocabulary, not the products, is most of a
    step (profiled: 7.6 s for 30 steps, estimated 1.5 s before). Its term grows with rows · V:
    the estimate at V = 4,096 is now over ten times the one at V = 16 (it was under five)."""
    from attnlab.labs.training_positions import SPEC

    base = {p.name: p.default for p in SPEC.params}
    small = SPEC.estimate(**base).seconds
    large = SPEC.estimate(**{**base, "vocab_size": 4096}).seconds
    assert large > 10 * small


def test_a_large_vocabulary_positions_run_asks_for_yes():
    result = CliRunner().invoke(
        app, ["lab", "train-positions", "--vocab-size", "4096", "--steps", "30"]
    )
    assert result.exit_code == 2
    assert "--yes" in result.output and "Traceback" not in result.output
