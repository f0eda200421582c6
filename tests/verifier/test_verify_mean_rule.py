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
