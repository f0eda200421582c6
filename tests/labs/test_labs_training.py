"""The training labs: the induction task as defined, both ceilings against brute force, head
scores of hand-built attention, and short runs whose numbers can go wrong.

Nothing here is timed and every run is a few steps of a tiny model; the full-size claims are
measured by the labs themselves (docs/training.md).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import LABS, train_induction, train_positions, train_scaling
from attnlab.labs.induction import (
    ceiling,
    head_scores,
    induction_batch,
    induction_sequences,
    label,
    second_copy,
)
from attnlab.labs.training_positions import permutation_ceiling, previous_token_task
from attnlab.transformer import TinyTransformer

TINY = dict(vocab_size=16, context=16, layers=2, heads=2, d_model=16, fresh=64)


def test_induction_sequences_repeat_a_segment_of_varying_length():
    rng = np.random.default_rng(0)
    tokens, lengths = induction_sequences(rng, 4000, 32, 50)
    assert tokens.shape == (4000, 32) and tokens.min() == 0 and tokens.max() == 49
    assert set(lengths.tolist()) == set(range(4, 17))  # every T in 4 … N/2
    counts = np.bincount(lengths, minlength=17)[4:]
    assert counts.min() > 0.7 * counts.mean()  # roughly uniform
    for row, t in zip(tokens, lengths, strict=True):
        assert np.array_equal(row[32 - t :], row[32 - 2 * t : 32 - t])


def test_targets_count_the_second_copy_but_its_last_token():
    tokens, lengths = induction_sequences(np.random.default_rng(1), 50, 20, 30)
    targets = induction_batch(tokens, lengths)
    for row, target, t in zip(tokens, targets, lengths, strict=True):
        for i in range(20):
            if 20 - t <= i < 19:  # inside the second copy, with a next token
                assert target[i] == row[i + 1] == row[i - t + 1]
            else:
                assert target[i] == -1
    assert np.array_equal(second_copy(lengths, 20), targets >= 0)


def _ceiling_by_loops(tokens, lengths) -> float:
    """Per counted position: 1 / the distinct tokens that followed the current token's earlier
    occurrences inside the copied segment. Plain loops, no numpy in the logic."""
    shares = []
    for row, t in zip(tokens.tolist(), lengths.tolist(), strict=True):
        n = len(row)
        for i in range(n - t, n - 1):
            successors = {row[j + 1] for j in range(n - 2 * t, i) if row[j] == row[i]}
            assert row[i + 1] in successors
            shares.append(1 / len(successors))
    return sum(shares) / len(shares)


def test_the_ambiguity_ceiling_against_loops():
    tokens, lengths = induction_sequences(np.random.default_rng(2), 300, 24, 8)  # many repeats
    expected = _ceiling_by_loops(tokens, lengths)
    assert expected < 0.9  # the small vocabulary makes it bite
    assert ceiling(tokens, lengths, 8) == pytest.approx(expected, abs=1e-12)


def test_the_ceiling_of_a_hand_made_sequence():
    # Prefix [5, 5], then 1 2 1 3 twice: the second copy's "1"s each saw 1->2 and 1->3.
    row = np.array([[5, 5, 1, 2, 1, 3, 1, 2, 1, 3]])
    # counted i = 6..8: "1" (2 successors), "2" (1), "1" (2)
    assert ceiling(row, np.array([4]), 6) == pytest.approx((0.5 + 1 + 0.5) / 3)


def _hand_built_weights(lengths, n):
    """Layer 0 head 0: all weight on i - 1; layer 1 head 0: on i - T + 1 in the second copy;
    head 1 of each layer: uniform over the allowed keys."""
    b = len(lengths)
    w = np.zeros((b, 2, 2, n, n))
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    w[:, :, 1] = uniform
    w[:, 0, 0, 0, 0] = 1
    w[:, 0, 0, np.arange(1, n), np.arange(n - 1)] = 1
    w[:, 1, 0] = uniform
    for s, t in enumerate(lengths):
        for i in range(n - t, n - 1):
            w[s, 1, 0, i] = 0
            w[s, 1, 0, i, i - t + 1] = 1
    return w


def test_head_scores_and_labels_of_hand_built_heads():
    _, lengths = induction_sequences(np.random.default_rng(3), 20, 16, 10)
    previous, induction = head_scores(_hand_built_weights(lengths, 16), lengths)
    assert previous[0, 0] == pytest.approx(1.0) and induction[1, 0] == pytest.approx(1.0)
    assert previous[0, 1] == pytest.approx(np.mean(1 / np.arange(2, 17)))  # uniform
    assert induction[0, 0] < 0.2 and previous[1, 0] < 0.5
    assert label(previous[0, 0], induction[0, 0]) == "previous-token"
    assert label(previous[1, 0], induction[1, 0]) == "induction"
    assert label(previous[0, 1], induction[0, 1]) == "other"


def test_a_short_induction_run_lowers_the_loss_and_saves_its_model(tmp_path):
    r = train_induction(steps=40, batch=8, seed=1, lr=1e-2, save=str(tmp_path / "m.npz"), **TINY)
    assert r.losses[-1] < r.losses[0] - 0.1
    assert len(r.head_rows) == 4 and 0 <= r.accuracy <= 1 and 0 < r.ceiling <= 1
    again = train_induction(steps=40, batch=8, seed=1, lr=1e-2, **TINY)
    assert again.losses == r.losses and again.head_rows == r.head_rows  # same seed
    model = TinyTransformer.load(tmp_path / "m.npz")
    assert model.config["layers"] == 2 and model.config["mlp"] is False
    data = json.loads(r.to_json())
    assert data["lab"] == "train-induction" and {"accuracy", "ceiling"} <= set(data)


def test_induction_arguments_are_checked():
    with pytest.raises(AttnlabError, match="d_model divisible"):
        train_induction(steps=1, d_model=10, heads=4)
    with pytest.raises(AttnlabError, match="context"):
        train_induction(steps=1, context=6)
    with pytest.raises(AttnlabError, match="init_std"):
        train_induction(steps=1, init_std=-0.1)
    # The real-valued bounds are the spec's (Param.check leaves floats to the lab): lr ≤ 1.
    with pytest.raises(AttnlabError, match="lr from 1e-06 to 1"):
        train_induction(steps=1, lr=1.5)
    with pytest.raises(AttnlabError, match="target_loss"):
        train_scaling(steps=1, target_loss=float("nan"))
    with pytest.raises(AttnlabError, match="lr"):
        train_positions(steps=1, lr="fast")
    with pytest.raises(AttnlabError, match="d_model divisible"):
        train_positions(steps=1, d_model=10, heads=4)


def test_training_labs_run_at_their_defaults_without_yes():
    # The CLI refuses a run estimated over LONG_S unless --yes: every default must fit.
    from attnlab.cli.labs import LONG_S

    for name in ("train-induction", "train-scaling", "train-positions"):
        assert LABS[name].cost().seconds < LONG_S, name


def _permutation_ceiling_by_brute_force(v: int, n: int) -> float:
    """Every sequence of length n over v tokens; for each multiset and own token, the best
    fixed guess counted over every sequence with that multiset."""
    groups: dict = {}
    for seq in itertools.product(range(v), repeat=n):
        key = tuple(sorted(seq))
        for i, a in enumerate(seq):
            target = 0 if i == 0 else seq[i - 1]
            groups.setdefault((key, a), Counter())[target] += 1
    best = sum(max(counter.values()) for counter in groups.values())
    return best / (v**n * n)


@pytest.mark.parametrize(("v", "n"), [(2, 3), (3, 4), (4, 3)])
def test_the_permutation_ceiling_against_brute_force(v, n):
    every = np.array(list(itertools.product(range(v), repeat=n)))
    assert permutation_ceiling(every, v) == pytest.approx(_permutation_ceiling_by_brute_force(v, n))


def test_previous_token_task_and_a_short_positions_run():
    tokens, targets = previous_token_task(np.random.default_rng(4), 5, 6, 9)
    assert np.all(targets[:, 0] == 0) and np.array_equal(targets[:, 1:], tokens[:, :-1])
    r = train_positions(steps=60, batch=16, vocab_size=8, context=6, d_model=16, fresh=200)
    data = r.as_dict()
    assert set(data["with_positions"]) == {"accuracy", "final_loss"}
    assert set(data["without_positions"]) == {"accuracy", "ceiling", "final_loss"}
    wo = data["without_positions"]
    assert wo["accuracy"] <= wo["ceiling"] + 0.05  # it cannot beat order-blindness
    assert data["with_positions"]["accuracy"] > wo["ceiling"] + 0.1  # positions break it


def test_unscaled_scores_saturate_and_starve_the_gradient():
    r = train_scaling(widths=(64,), steps=4, batch=4, runs=1, context=8, vocab_size=8)
    data = r.as_dict()
    s, u = data["scaled"], data["unscaled"]
    assert {"steps_to_target", "saturated_rows", "median_ds"} <= set(s) & set(u)
    assert u["saturated_rows"] > s["saturated_rows"] + 0.2
    assert u["median_ds"] < 0.5 * s["median_ds"]
    assert s["steps_to_target"] is None  # 4 steps reach no loss of 1.0


def test_steps_to_target_is_the_first_smoothed_loss_at_the_target():
    r = train_scaling(widths=(8,), steps=12, batch=4, runs=1, context=8, vocab_size=4,
                      target_loss=50.0)  # fmt: skip
    assert r.scaled["steps_to_target"] == 1  # the first step is already under 50 nats


def test_training_labs_are_declared():
    for name in ("train-induction", "train-scaling", "train-positions"):
        assert LABS[name].name == name
    assert LABS["train-induction"].param("save").web is False
    assert LABS["train-induction"].cost(steps=10).seconds < LABS["train-induction"].cost().seconds
