"""verify's mean-error rule: correct torch kernels pass it across a sample of the calibration
sweep (float16 and bfloat16, causal or not, MHA, GQA and MQA, N and M from 1 to 4,096, d from
32 to 256; the whole sweep is benchmarks/verify_mean_sweep.py), and a bfloat16 kernel that
accumulates P . V in bfloat16, which the max rule lets through, fails it."""

from __future__ import annotations

import random

import pytest

from attnlab.verifier import verify
from verify_kernels import bf16_pv_accumulation, inputs, sweep, sweep_case

pytestmark = pytest.mark.oracle

# A fixed sample: the tiny corners (one query, one key) always, the rest drawn with a seed,
# each case's h x N x M x d kept under 2^23 (a second or less of verify).
_ALL = list(sweep())
_TINY = [c for c in _ALL if c[3] <= 2 and c[4] <= 2 and c[5] in (32, 256)]
_REST = [c for c in _ALL if c not in _TINY and c[3] * c[4] * c[2][0] * c[5] <= 2**23]
SAMPLE = _TINY[::6] + random.Random(46).sample(_REST, 24)


@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: "-".join(map(str, c)).replace(" ", ""))
def test_correct_kernels_pass_both_rules(torch, case):
    causal = case[1]
    report = verify(**sweep_case(torch, *case), causal=causal, layout="bhsd")
    for name, t in report.tensors.items():
        assert t.mean_passed, (name, t.mean_ratio, t.mean_abs_error, t.mean_tolerance)
    assert report.passed, report.summary()


def test_bfloat16_accumulation_of_pv_fails_the_mean_rule_only(torch):
    x = inputs(torch, torch.bfloat16, h=8, h_kv=8, n=256, m=256, d=64, seed=1)
    report = verify(**bf16_pv_accumulation(torch, x), layout="bhsd")
    t = report.tensors["out"]
    assert t.max_abs_error <= t.tolerance  # the max rule alone lets it through
    assert not t.mean_passed and not report.passed
    assert t.mean_ratio > 3  # about 4; correct kernels stay under 1.2
    assert "mean error" in report.summary()


def test_the_same_sum_in_float32_passes(torch):
    # The planted kernel's only bug is its accumulator: the same inputs, summed in float32.
    x = inputs(torch, torch.bfloat16, h=8, h_kv=8, n=256, m=256, d=64, seed=1)
    from verify_kernels import correct

    assert verify(**correct(torch, x, lse=False), layout="bhsd").passed


def test_a_float32_lse_a_few_ulps_off_everywhere_is_left_to_the_max_rule():
    """The mean rule judges float16 and bfloat16 baselines only. A float32 lse three ulps off
    at every row (as torch's compiled FlexAttention with a softcap was on a GPU: mean error
    3.1 times a plain float32 attention's, max within the rule) is correct by the max rule, and
    its mean, though several times the baseline's, does not fail it."""
    import numpy as np

    import attnlab as al

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 256, 4, 32)).astype(np.float32) for _ in range(3))
    heads = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]  # (B, h, N, d)
    out, lse = al.attention(*(x.astype(np.float64) for x in heads), return_lse=True)
    lse32 = lse.astype(np.float32)  # (B, h, N)
    lse32 = lse32 + 3 * np.spacing(lse32) * rng.choice([-1, 1], lse32.shape)
    out32 = out.transpose(0, 2, 1, 3).astype(np.float32)
    report = verify(q=q, k=k, v=v, out=out32, lse=lse32.astype(np.float32))
    t = report.tensors["lse"]
    assert t.baseline_dtype == "float32" and not t.mean_rule
    assert t.mean_ratio > 2.5  # it would fail a mean rule at factor 2
    assert report.passed, report.summary()
    assert report.as_dict()["tensors"]["lse"]["mean_rule"] is False
