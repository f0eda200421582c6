"""Each training lab's claim and its verdict: held when the numbers show the chapter's sentence,
and said to fall short otherwise, with the numbers why.

The verdicts are checked on results whose numbers are set by hand (so the expected verdict is
read off the numbers, not off the code), and on short real runs that cannot have learned. The
runs at the CLI's defaults, which do show the claims (docs/training.md), take minutes: they run
with ``pytest -m grid`` only.
"""

from __future__ import annotations

import dataclasses

import pytest

from attnlab.labs import LABS, train_induction, train_positions, train_scaling
from attnlab.labs._common import Claim
from attnlab.labs.induction import HeadRow
from conftest import TRAINING_SMALL


@pytest.fixture(scope="module")
def small():
    return {name: LABS[name](**TRAINING_SMALL[name]) for name in TRAINING_SMALL
            if LABS[name].training}  # fmt: skip


def _heads(prev0: float, ind1: float) -> tuple[HeadRow, ...]:
    """Layer 0 head 0 with a previous-token score, layer 1 head 0 with an induction score."""

    def pattern(p, i):
        return "other" if max(p, i) < 0.4 else ("previous-token" if p >= i else "induction")

    return (HeadRow(0, 0, prev0, 0.0, pattern(prev0, 0.0)),
            HeadRow(1, 0, 0.0, ind1, pattern(0.0, ind1)))  # fmt: skip


@pytest.mark.parametrize(("accuracy", "prev0", "ind1", "held"), [
    (0.96, 0.84, 0.9, True),  # the default run's numbers: both heads, 98% of the ceiling
    (0.002, 0.1, 0.05, False),  # the page's old 50 steps: the plateau, no head
    (0.96, 0.84, 0.1, False),  # accurate but no induction head: not the claim
    (0.70, 0.84, 0.9, False),  # heads, but 72% of the ceiling
])  # fmt: skip
def test_the_induction_verdict(small, accuracy, prev0, ind1, held):
    r = dataclasses.replace(small["train-induction"], layers=2, accuracy=accuracy, ceiling=0.978,
                            head_rows=_heads(prev0, ind1), steps=50)  # fmt: skip
    claim = r.claim()
    assert isinstance(claim, Claim) and claim.held is held
    assert f"{accuracy:.1%}" in claim.why and "97.8%" in claim.why
    assert ("default of 600 steps" in claim.why) is not held  # says how to show it


@pytest.mark.parametrize(("scaled", "unscaled", "held"), [
    (194, None, True), (150, 260, True), (260, 150, False), (None, None, False),
])  # fmt: skip
def test_the_scaling_verdict(small, scaled, unscaled, held):
    base = small["train-scaling"]
    r = dataclasses.replace(base, scaled={**base.scaled, "steps_to_target": scaled},
                            unscaled={**base.unscaled, "steps_to_target": unscaled})  # fmt: skip
    claim = r.claim()
    assert claim.held is held
    assert ("cannot be told apart" in claim.why) is (scaled is None)


@pytest.mark.parametrize(("with_", "without", "ceiling", "held"), [
    (1.0, 0.211, 0.216, True), (0.25, 0.2, 0.216, False), (1.0, 0.3, 0.216, False),
])  # fmt: skip
def test_the_positions_verdict(small, with_, without, ceiling, held):
    base = small["train-positions"]
    r = dataclasses.replace(base, with_positions={**base.with_positions, "accuracy": with_},
                            without_positions={**base.without_positions, "accuracy": without,
                                               "ceiling": ceiling})  # fmt: skip
    claim = r.claim()
    assert claim.held is held
    assert f"{ceiling:.1%}" in claim.why


def test_runs_too_short_to_learn_fall_short_and_say_so(small):
    for name, r in small.items():
        claim = r.claim()
        assert claim.held is False, name
        assert claim.claim and claim.why, name


def test_a_short_positions_run_that_learned_holds():
    # 60 steps of a small encoder are enough to break the order-blind ceiling by a wide margin.
    r = train_positions(steps=60, batch=16, vocab_size=8, context=6, d_model=16, fresh=200)
    w, wo = r.with_positions["accuracy"], r.without_positions
    assert (w > wo["ceiling"] + 0.05 and wo["accuracy"] <= wo["ceiling"] + 0.01) is r.claim().held


def test_labs_without_a_claim_say_none():
    assert all(LABS[name].training for name in ("train-induction", "train-scaling",
                                                "train-positions"))  # fmt: skip
    variance = LABS["variance"](widths=(8,), draws=200)
    assert variance.claim() is None


@pytest.mark.grid
@pytest.mark.parametrize("run", [train_induction, train_scaling, train_positions])
def test_the_clis_defaults_show_each_claim(request, run):
    if "grid" not in (request.config.option.markexpr or ""):
        pytest.skip("the default-size runs (minutes) run with `pytest -m grid`")
    claim = run().claim()
    assert claim.held, claim.why
