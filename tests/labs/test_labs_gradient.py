"""The gradient lab (§6.3): how much gradient reaches the scores and queries, scaled or not.

The lab's numbers come from ``trace_attention(..., grad_output=...)``; here they are checked
against two computations that share nothing with it: PyTorch's autograd on the same draws, and
central finite differences of a plain softmax loss. Then the trend the chapter predicts, the
seeds, the stream's layout and the bounds.
"""

from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import pytest

from attnlab import softmax
from attnlab.errors import AttnlabError
from attnlab.labs import LABS, gradient
from attnlab.labs._common import GRADIENT, rng_for
from attnlab.labs.score_gradients import THRESHOLD, _chunk, _draws
from tolerances import F64

KEYS, D_V = 8, 6


def _trials(seed: int, d_k: int, trials: int, keys: int = KEYS, d_v: int = D_V):
    """The lab's own draws for one width, taken from its stream in one go."""
    return _draws(rng_for(seed, GRADIENT, d_k, keys, d_v), trials, keys, d_k, d_v)


def _torch_norms(torch, q, k, v, g, scale: float) -> np.ndarray:
    """(3, T): p_max, ‖∂L/∂S‖, ‖∂L/∂q‖ per trial, L = Σ O ∘ dO, by autograd."""
    q = torch.tensor(q, dtype=torch.float64, requires_grad=True)  # (T, 1, d_k)
    k, v, g = (torch.tensor(a, dtype=torch.float64) for a in (k, v, g))
    s = q @ k.transpose(-1, -2) * scale  # (T, 1, M)
    s.retain_grad()
    p = torch.softmax(s, dim=-1)
    ((p @ v) * g).sum().backward()
    return np.stack([p.detach().amax(-1)[:, 0].numpy(), s.grad.norm(dim=-1)[:, 0].numpy(),
                     q.grad.norm(dim=-1)[:, 0].numpy()])  # fmt: skip


@pytest.mark.parametrize("d_k", [16, 256])
def test_medians_match_torch_autograd_on_the_same_draws(torch, d_k):
    trials, seed = 5, 4
    r = gradient(widths=(d_k,), keys=KEYS, trials=trials, seed=seed, d_v=D_V).rows[0]
    q, k, v, g = _trials(seed, d_k, trials)
    un = _torch_norms(torch, q, k, v, g, 1.0)
    sc = _torch_norms(torch, q, k, v, g, 1 / math.sqrt(d_k))
    got = [r.ds_unscaled, r.ds_scaled, r.dq_unscaled, r.dq_scaled]
    want = [np.median(un[1]), np.median(sc[1]), np.median(un[2]), np.median(sc[2])]
    np.testing.assert_allclose(got, want, **F64)
    np.testing.assert_allclose(got, want, rtol=1e-9)  # the small unscaled ones too
    assert r.unscaled_share == np.mean(un[0] > THRESHOLD)
    assert r.scaled_share == np.mean(sc[0] > THRESHOLD)


def _loss_of_scores(s, v, g) -> float:
    return float(np.sum((softmax(s) @ v) * g))  # (1, M) @ (M, d_v)


def _loss_of_query(q, k, v, g, scale) -> float:
    return _loss_of_scores(q @ k.T * scale, v, g)


@pytest.mark.parametrize("scaled", [False, True])
def test_one_trial_matches_central_finite_differences(scaled):
    d_k, seed, h = 16, 9, 1e-6
    r = gradient(widths=(d_k,), keys=KEYS, trials=1, seed=seed, d_v=D_V).rows[0]
    q, k, v, g = (a[0] for a in _trials(seed, d_k, 1))  # (1, d_k), (M, d_k), (M, d_v), (1, d_v)
    scale = 1 / math.sqrt(d_k) if scaled else 1.0
    s = q @ k.T * scale  # (1, M)
    ds = np.zeros_like(s)
    for j in range(s.shape[1]):
        e = np.zeros_like(s)
        e[0, j] = h
        ds[0, j] = (_loss_of_scores(s + e, v, g) - _loss_of_scores(s - e, v, g)) / (2 * h)
    dq = np.zeros_like(q)
    for i in range(d_k):
        e = np.zeros_like(q)
        e[0, i] = h
        dq[0, i] = _loss_of_query(q + e, k, v, g, scale) - _loss_of_query(q - e, k, v, g, scale)
        dq[0, i] /= 2 * h
    got = (r.ds_scaled, r.dq_scaled) if scaled else (r.ds_unscaled, r.dq_unscaled)
    # Central differences are good to ~h² plus rounding / h: about 1e-8 here.
    np.testing.assert_allclose(got, [np.linalg.norm(ds), np.linalg.norm(dq)], rtol=1e-6)


@pytest.fixture(scope="module")
def default_widths():
    return {seed: gradient(trials=300, seed=seed) for seed in (0, 1)}


@pytest.mark.parametrize("seed", [0, 1])
def test_unscaled_gradient_shrinks_as_width_grows_while_saturation_rises(default_widths, seed):
    r = default_widths[seed]
    assert [row.width for row in r.rows] == [16, 32, 64, 128, 256, 512]
    ds = [row.ds_unscaled for row in r.rows]
    assert all(a > b for a, b in itertools.pairwise(ds)), ds
    shares = [row.unscaled_share for row in r.rows]
    assert shares[-1] > shares[0] + 0.3 and shares == sorted(shares), shares
    # Scaled, nothing saturates and the gradient keeps its size at every width.
    assert all(row.scaled_share == 0 for row in r.rows)
    scaled = [row.ds_scaled for row in r.rows]
    assert max(scaled) < 1.5 * min(scaled), scaled
    last = r.rows[-1]
    assert last.ds_ratio < 0.05 and last.dq_ratio < 0.5
    for row in r.rows:  # the ratio columns are the columns they divide
        assert row.ds_ratio == row.ds_unscaled / row.ds_scaled
        assert row.dq_ratio == row.dq_unscaled / row.dq_scaled


def test_summary_and_table_carry_the_numbers(default_widths):
    r = default_widths[0]
    columns, rows = r.table()
    assert columns == [key for key, _ in LABS["gradient"].columns]
    assert "ds_ratio" in columns and len(rows) == 6
    words = " ".join(r.summary())
    assert f"{r.rows[-1].ds_unscaled:.3g}" in words and f"{r.rows[-1].ds_ratio:.3g}" in words
    data = json.loads(r.to_json())
    assert data["lab"] == "gradient" and data["threshold"] == THRESHOLD
    assert [row["width"] for row in data["rows"]] == list(r.widths)


def test_same_seed_same_numbers_and_rows_do_not_depend_on_other_widths():
    one = gradient(widths=(64,), trials=40, seed=3)
    assert one == gradient(widths=(64,), trials=40, seed=3)
    assert gradient(widths=(16, 64), trials=40, seed=3).rows[1] == one.rows[0]
    assert gradient(widths=(64,), trials=40, seed=4).rows != one.rows


def test_numbers_do_not_depend_on_the_chunk_size(monkeypatch):
    import importlib

    module = importlib.import_module("attnlab.labs.score_gradients")
    whole = gradient(widths=(32,), trials=30, seed=2)
    monkeypatch.setattr(module, "CHUNK_ELEMENTS", 1_000)  # a few trials per chunk
    assert module._trials_per_chunk(64, 32, 64) < 30
    assert gradient(widths=(32,), trials=30, seed=2) == whole


def test_a_chunk_reads_its_stream_state_and_never_changes_it():
    # On a cluster the chunks of a width are a chain of tasks, each handed the state the one
    # before left (maybe the very object): a chunk must leave it alone and go on from it.
    state = rng_for(0, GRADIENT, 16, KEYS, D_V).bit_generator.state
    before = copy.deepcopy(state)
    norms, after = _chunk(16, KEYS, D_V, 10, 4, 0, state)
    assert state == before and norms.shape == (2, 3, 4)
    again, _ = _chunk(16, KEYS, D_V, 10, 4, 0, state)
    last, _ = _chunk(16, KEYS, D_V, 10, 4, 2, after)  # the last chunk: 2 of the 10 trials
    assert np.array_equal(norms, again) and last.shape == (2, 3, 2)
    rng = rng_for(0, GRADIENT, 16, KEYS, D_V)
    _draws(rng, 4, KEYS, 16, D_V)  # chunk 0's trials, drawn from the width's own stream
    assert rng.bit_generator.state == after


def test_progress_counts_trials_over_all_widths():
    calls = []
    gradient(widths=(8, 16), trials=20, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (40, 40)


def test_the_estimate_grows_with_trials_and_width():
    cost = LABS["gradient"].cost
    assert cost(trials=100).seconds < cost(trials=10_000).seconds
    assert cost(widths=(16,)).seconds < cost(widths=(512,)).seconds


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"widths": ()}, "at least one entry in widths"),
        ({"widths": (0,)}, "every entry of widths"),
        ({"keys": 1}, "expected keys"),
        ({"trials": 0}, "expected trials"),
        ({"trials": 10**7}, "expected trials"),
        ({"seed": -2}, "expected seed"),
        ({"d_v": 0}, "expected d_v"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        gradient(**kwargs)
