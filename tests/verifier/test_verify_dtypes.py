"""Each tensor judged at its own stored dtype: an lse kept in float32 by a bfloat16 kernel is
held to a float32 plain attention, not to a bfloat16 one.

Kernel outputs come from tests/verify_reference.py (independent float64 numpy).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from attnlab.verifier import verify
from verify_reference import inputs, reference

BF16 = ml_dtypes.bfloat16


def _bf16_case(seed=0):
    q, k, v = inputs(np.random.default_rng(seed), n=64, m=64, dtype=BF16)
    exact = reference(q, k, v, causal=True)
    out = exact["out"].astype(BF16)
    lse = exact["lse"].astype(np.float32)  # FlashAttention keeps lse in float32
    return q, k, v, out, lse


def test_float32_lse_of_a_bfloat16_kernel_gets_a_float32_baseline():
    q, k, v, out, lse = _bf16_case()
    report = verify(q=q, k=k, v=v, out=out, lse=lse, causal=True)
    assert report.passed, report.summary()
    t = report.tensors["lse"]
    assert t.baseline_dtype == "float32" and report.tensors["out"].baseline_dtype == "bfloat16"
    assert t.baseline_error < 1e-5  # a float32 plain lse of bfloat16 inputs: a few float32 ulps
    d = report.as_dict()["tensors"]
    assert d["lse"]["baseline_dtype"] == "float32"
    assert d["out"]["baseline_dtype"] == "bfloat16"
    assert "baseline dtype" in report.COLUMNS


def test_lse_off_by_0_004_in_every_row_fails_against_the_float32_baseline():
    q, k, v, out, lse = _bf16_case(1)
    report = verify(q=q, k=k, v=v, out=out, lse=lse + np.float32(0.004), causal=True)
    assert not report.passed
    assert not report.tensors["lse"].passed and report.tensors["out"].passed
    assert report.tensors["lse"].max_abs_error > 0.0039


def test_lower_stored_dtype_keeps_the_kernel_dtype_baseline_rounded():
    # A float32 kernel storing a float16 output: its baseline is float32 work rounded to
    # float16 once, so the bound is float16's rounding, and a correct float16 output passes.
    q, k, v = inputs(np.random.default_rng(2))
    out = reference(q, k, v)["out"].astype(np.float16)
    report = verify(q=q, k=k, v=v, out=out)
    assert report.passed and report.tensors["out"].baseline_dtype == "float32"
