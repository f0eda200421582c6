"""The proof lab (§6.3): each step of the √d_k argument lands on its prediction, with correct SEs.

Four kinds of check: every measured step within Z standard errors of its prediction at several
seeds and widths; the standard errors against their closed forms (normal theory) and against
the actual spread of the measurements over many seeds; the numbers recomputed from the lab's
own random stream with plain numpy; and the JSON shape, the seeds, the threads and memory.
"""

from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import AttnlabError
from attnlab.labs import LABS, proof
from attnlab.labs._common import PROOF, rng_for
from attnlab.labs.sqrt_dk_proof import _pairs_per_chunk

# A draw further than 4 standard errors from the truth happens about once in 16,000.
Z = 4.0
# An estimated SE against the closed form: with 10^5 draws the estimate's own spread is under
# 1% (it rests on a 4th moment), so 5% is past 5 of its standard errors.
SE_RTOL = 0.05
# The spread of a measurement over SEEDS seeds against its mean reported SE: the ratio of two
# estimates, each good to ~5% at 300 seeds (more for the heavy-tailed variance of products).
SPREAD_BAND = (0.8, 1.25)
SEEDS = 300

STEPS = ["E(q_i)", "Var(q_i)", "E(q_i k_i)", "Var(q_i k_i)", "E(q·k)", "Var(q·k)", "Var(q·k/√d_k)"]


def _closed_form_se(d: int, n: int) -> list[float]:
    """Each step's SE for n pairs at width d under the normal model (see proof's docstring)."""
    entries = n * d  # the entry and product steps pool every coordinate
    return [
        1 / math.sqrt(entries),  # mean of q_i: σ = 1
        math.sqrt(2 / entries),  # variance of q_i: μ₄ − σ⁴ = 3 − 1
        1 / math.sqrt(entries),  # mean of q_i k_i: σ² = E[q²]E[k²] = 1
        math.sqrt(8 / entries),  # variance of q_i k_i: μ₄ = E[q⁴]E[k⁴] = 9, 9 − 1
        math.sqrt(d / n),  # mean of q·k: σ² = d
        math.sqrt((2 * d * d + 6 * d) / n),  # variance of q·k: E[z⁴] = 3d² + 6d, minus d²
        math.sqrt((2 + 6 / d) / n),  # the same divided by d
    ]


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("d_k", [16, 64, 512])
def test_every_step_lands_within_its_standard_errors(d_k, seed):
    r = proof(d_k=d_k, draws=10_000, seed=seed)
    assert [row.step for row in r.rows] == STEPS
    assert [row.predicted for row in r.rows] == [0.0, 1.0, 0.0, 1.0, 0.0, float(d_k), 1.0]
    for row in r.rows:
        assert abs(row.measured - row.predicted) <= Z * row.stderr, row
    assert max(r.deviations()) <= Z


def test_a_false_prediction_would_be_caught():
    # The test above can fail: Var(q·k) against 1 (no variances adding up) is dozens of SEs off.
    row = proof(d_k=64, draws=10_000).rows[5]
    assert abs(row.measured - 1.0) > 10 * Z * row.stderr


@pytest.mark.parametrize("d_k", [16, 64])
def test_standard_errors_match_their_closed_forms(d_k):
    n = 100_000
    r = proof(d_k=d_k, draws=n, seed=3)
    for row, theory in zip(r.rows, _closed_form_se(d_k, n), strict=True):
        assert row.stderr == pytest.approx(theory, rel=SE_RTOL), row.step


def test_closed_forms_spelled_out_at_d_k_64():
    # The two the issue names: the product's mean has SE 1/√n, the score's variance
    # √((2d² + 6d)/n) (E[z⁴] = 3d² + 6d for a sum of d products with 4th moment 9).
    se = _closed_form_se(64, 10_000)
    assert se[2] == pytest.approx(1 / math.sqrt(640_000))
    assert se[5] == pytest.approx(math.sqrt((2 * 64**2 + 6 * 64) / 10_000))
    assert se[5] ** 2 * 10_000 == pytest.approx(3 * 64**2 + 6 * 64 - 64**2)


def test_standard_errors_match_the_spread_over_many_seeds():
    # What an SE promises: rerun with other seeds, and the measurement moves by about that much.
    runs = [proof(d_k=4, draws=500, seed=s) for s in range(SEEDS)]
    for i, step in enumerate(STEPS):
        measured = np.array([r.rows[i].measured for r in runs])
        reported = np.mean([r.rows[i].stderr for r in runs])
        ratio = measured.std(ddof=1) / reported
        assert SPREAD_BAND[0] < ratio < SPREAD_BAND[1], (step, ratio)


def test_numbers_recomputed_from_the_stream_with_plain_numpy():
    d_k, draws, seed = 8, 70_000, 5  # three chunks, the last one partial
    per = _pairs_per_chunk(d_k)
    assert per < draws < 3 * per + 1
    q, k = [], []
    for j in range(-(-draws // per)):
        m = min(per, draws - j * per)
        qj, kj = rng_for(seed, PROOF, d_k, j).standard_normal((2, m, d_k))
        q.append(qj)
        k.append(kj)
    q, k = np.concatenate(q), np.concatenate(k)  # (n, d_k) each
    z = (q * k).sum(axis=1)  # (n,)
    samples = [q.ravel(), (q * k).ravel(), z, z / math.sqrt(d_k)]

    def var_se(x):  # two-pass central moments, not the lab's power sums
        n, s2 = len(x), x.var(ddof=1)
        m4 = np.mean((x - x.mean()) ** 4)
        return s2, math.sqrt((m4 - s2 * s2 * (n - 3) / (n - 1)) / n)

    expected = [
        (samples[0].mean(), samples[0].std(ddof=1) / math.sqrt(samples[0].size)),
        var_se(samples[0]),
        (samples[1].mean(), samples[1].std(ddof=1) / math.sqrt(samples[1].size)),
        var_se(samples[1]),
        (z.mean(), z.std(ddof=1) / math.sqrt(z.size)),
        var_se(z),
        var_se(samples[3]),
    ]
    r = proof(d_k=d_k, draws=draws, seed=seed)
    assert r.entries == draws * d_k
    for row, (measured, se) in zip(r.rows, expected, strict=True):
        assert row.measured == pytest.approx(measured, rel=1e-9, abs=1e-12), row.step
        assert row.stderr == pytest.approx(se, rel=1e-9), row.step


def test_json_shape_one_row_per_step_in_order():
    data = json.loads(proof(d_k=16, draws=2_000).to_json())
    assert data["lab"] == "proof" and data["d_k"] == 16 and data["draws"] == 2_000
    assert [row["step"] for row in data["rows"]] == STEPS
    for row in data["rows"]:
        assert list(row) == ["step", "claim", "predicted", "measured", "stderr"]
        assert isinstance(row["claim"], str) and row["stderr"] > 0
    assert [key for key, _ in LABS["proof"].columns] == list(data["rows"][0])


def test_the_cli_prints_the_same_json():
    result = CliRunner().invoke(app, ["lab", "proof", "--d-k", "16", "--draws", "3000", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == proof(d_k=16, draws=3_000).as_dict()


def test_same_seed_same_numbers_whatever_the_threads():
    one = proof(d_k=32, draws=50_000, seed=2, workers=1)
    assert one == proof(d_k=32, draws=50_000, seed=2, workers=2)  # bitwise: chunk order kept
    assert one != proof(d_k=32, draws=50_000, seed=3)


def test_progress_counts_pairs():
    calls = []
    proof(d_k=16, draws=40_000, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (40_000, 40_000) and all(t == 40_000 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_ten_times_the_draws_need_no_more_memory():
    per = _pairs_per_chunk(16)
    small = {"d_k": 16, "draws": 8 * per, "workers": 2}  # the window of chunks is full
    proof(**small)
    peak_small = _peak(lambda: proof(**small))
    peak_big = _peak(lambda: proof(**{**small, "draws": 80 * per}))
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big)
    # and the estimate says so up to 10^9 draws
    assert LABS["proof"].cost(draws=10**9).bytes == LABS["proof"].cost(draws=10**6).bytes


def test_the_estimate_grows_with_draws_and_width():
    cost = LABS["proof"].cost
    assert cost(draws=10**6).seconds < cost(draws=10**7).seconds
    assert cost(d_k=16).seconds < cost(d_k=512).seconds


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_k": 0}, "expected d_k"),
        ({"d_k": 2**17}, "expected d_k"),
        ({"draws": 1}, "expected draws"),
        ({"seed": -1}, "expected seed"),
        ({"d_k": 2.0}, "expected d_k to be an integer"),
        ({"workers": 0}, "expected workers"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(AttnlabError, match=match):
        proof(**kwargs)
