"""The saturation lab (§6.3): about 35% of unscaled trials saturate, none scaled, p(1-p) ≈ 0.002."""

from __future__ import annotations

import copy
from decimal import Decimal, localcontext

import numpy as np
import pytest

from attnlab import softmax
from attnlab.errors import AttnlabError
from attnlab.labs import saturation
from attnlab.labs._common import SATURATION, rng_for
from attnlab.labs.softmax_saturation import _step, _trial_stats

Z = 5.0  # standard errors of slack; see test_labs_variance.py


@pytest.fixture(scope="module")
def default():
    return saturation()


def _in_chapter_range(r) -> None:
    # The chapter measured 35% and a gradient term of 0.0020 (§6.3, lab 2b).
    assert abs(r.unscaled_share - 0.35) <= Z * r.unscaled_share_se, r.unscaled_share
    assert abs(r.gradient_term - 0.0020) <= Z * r.gradient_term_se, r.gradient_term
    # Scaled scores have spread 1: one key beating 63 others by the ~8.7 needed for 0.99 is
    # beyond reach, so the share is exactly 0, not merely small.
    assert r.scaled_share == 0.0


def test_default_lands_in_the_chapter_range(default):
    assert (default.d_k, default.keys, default.trials, default.threshold) == (128, 64, 500, 0.99)
    _in_chapter_range(default)
    assert default.unscaled_saturated == round(default.unscaled_share * 500)
    assert len(default.unscaled_p_max) == len(default.scaled_p_max) == 500


def test_saturated_trials_have_a_tiny_jacobian(default):
    # Saturation stalls learning because J = diag(p) - p pᵀ is nearly zero (§4.3, §6.3).
    assert default.jacobian_saturated < default.jacobian_scaled / 10
    assert default.gradient_term < default.scaled_gradient_term / 10
    # p_max > 0.99 caps the winner's term p(1 - p) below 0.99 · 0.01.
    assert default.gradient_term < 0.99 * 0.01


def test_jacobian_norm_is_the_norm_of_softmax_derivative():
    scores = np.random.default_rng(3).normal(size=(2, 6))
    p = softmax(scores)
    p_max, rest, fro = _trial_stats(p)
    eps = 1e-6
    for t in range(2):
        numeric = np.empty((6, 6))
        for j in range(6):
            bump = np.zeros(6)
            bump[j] = eps
            numeric[:, j] = (softmax(scores[t] + bump) - softmax(scores[t] - bump)) / (2 * eps)
        assert fro[t] == pytest.approx(np.linalg.norm(numeric), rel=1e-6)
    assert np.array_equal(p_max, p.max(axis=-1))
    np.testing.assert_allclose(rest, 1 - p_max, rtol=1e-12)


def test_same_seed_same_numbers_other_seed_other_numbers_in_range(default):
    assert saturation() == default
    other = saturation(seed=1)
    assert other.unscaled_p_max != default.unscaled_p_max
    _in_chapter_range(other)


def test_more_trials_extend_fewer(default):
    # Trial t uses the t-th block of the stream, whatever the trial count or chunking.
    assert saturation(trials=40).unscaled_p_max == default.unscaled_p_max[:40]


def test_no_saturated_trial_gives_none_not_nan():
    r = saturation(d_k=1, keys=64, trials=20)
    assert r.unscaled_saturated == 0
    assert r.gradient_term is None and r.jacobian_saturated is None
    assert r.as_dict()["gradient_term"] is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": "high"}, "threshold"),
        ({"keys": 1}, "keys"),
        ({"trials": 0}, "trials"),
        ({"d_k": 0}, "d_k"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_arguments_raise_attnlab_errors(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        saturation(**kwargs)


# -- the Jacobian norm of a saturated softmax, stably ---------------------------------


def _exact_jacobian_norm(scores) -> float:
    """||diag(p) - p pᵀ||_F from the scores in 60-digit decimals: no float rounding at all."""
    with localcontext() as ctx:
        ctx.prec = 60
        top = max(scores)
        e = [(Decimal(s) - Decimal(top)).exp() for s in scores]
        p = [x / sum(e) for x in e]
        fro2 = sum(((p[i] if i == j else 0) - p[i] * p[j]) ** 2
                   for i in range(len(p)) for j in range(len(p)))  # fmt: skip
        return float(fro2.sqrt())


@pytest.mark.parametrize(
    "scores",
    [[0.0, -40.0], [0.0, -40.0, -45.0, -60.0], [3.0, -25.0, -19.5], [1.0, 0.5, -0.3, 0.2]],
)
def test_jacobian_norm_matches_exact_arithmetic_even_when_p_max_rounds_to_1(scores):
    _, rest, fro = _trial_stats(softmax(np.array([scores])))
    assert fro[0] == pytest.approx(_exact_jacobian_norm(scores), rel=1e-12)
    assert rest[0] > 0  # the other weights, summed: never 1 - p_max, which is 0 here


def test_a_single_fully_saturated_trial_is_summarised_not_divided_by_zero():
    # At this seed one key wins by ~30, 1 - p_max is below 1e-9, and the old closed
    # form cancelled to exactly 0, so summary() divided by zero.
    r = saturation(d_k=128, keys=2, trials=1, seed=2)
    assert r.unscaled_saturated == 1 and 0 < 1 - r.unscaled_p_max[0] < 1e-9
    x = rng_for(2, SATURATION, 128, 2).standard_normal((1, 3, 128))  # the trial's draws
    scores = (x[0, 1:] @ x[0, 0]).tolist()  # (M,) raw scores, as the lab computes them
    assert r.jacobian_saturated == pytest.approx(_exact_jacobian_norm(scores), rel=1e-9)
    assert 0 < r.gradient_term < 1e-12
    lines = r.summary()
    assert len(lines) == 2 and "times smaller" in lines[1]
    assert r.as_dict()["jacobian_saturated"] > 0


def test_a_chunk_reads_its_stream_state_and_never_changes_it():
    # A chain of Dask tasks hands each chunk the state the one before left, possibly as the
    # same object: a chunk must leave it alone, and the same state must give the same chunk.
    state = rng_for(0, SATURATION, 32, 8).bit_generator.state
    before = copy.deepcopy(state)
    (sums, moments, kept), after = _step(32, 8, 100, 0.99, 40, 0, state)
    assert state == before and after != before
    (sums2, moments2, kept2), after2 = _step(32, 8, 100, 0.99, 40, 0, state)
    assert np.array_equal(sums, sums2) and moments == moments2 and kept == kept2
    assert after2 == after
    # Chunk 1 from chunk 0's state is the second chunk of the lab's own run.
    rng = rng_for(0, SATURATION, 32, 8)
    rng.standard_normal((40, 9, 32))  # chunk 0's trials
    assert rng.bit_generator.state == after
