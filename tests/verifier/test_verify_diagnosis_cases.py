"""The diagnosis on the kinds of case the torch kernels do not cover, against the float64
reference of tests/verify_reference.py: varlen sequences of different lengths, ALiBi with a
causal diagonal, and the evidence's numbers, checked by hand."""

from __future__ import annotations

import numpy as np

from attnlab.verifier import verify
from verify_reference import reference


def _varlen(rng, lengths_q, lengths_k, h=4, h_kv=2, d=16):
    q = rng.standard_normal((sum(lengths_q), h, d)).astype(np.float32)
    k = rng.standard_normal((sum(lengths_k), h_kv, d)).astype(np.float32)
    v = rng.standard_normal((sum(lengths_k), h_kv, d)).astype(np.float32)
    return q, k, v, np.cumsum([0, *lengths_q]), np.cumsum([0, *lengths_k])


def test_a_varlen_kernel_with_twice_the_scale_is_named_scale():
    q, k, v, cq, ck = _varlen(np.random.default_rng(1), [5, 17, 9], [7, 17, 30])
    outs = [
        reference(
            q[None, cq[i] : cq[i + 1]], k[None, ck[i] : ck[i + 1]], v[None, ck[i] : ck[i + 1]],
            causal=True, softmax_scale=2 / 16**0.5,
        )["out"][0]
        for i in range(3)
    ]  # fmt: skip
    out = np.concatenate(outs).astype(np.float32)
    report = verify(q=q, k=k, v=v, out=out, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck)
    assert not report.passed
    first = report.diagnosis[0]
    assert first["cause"] == "scale" and first["explained"], report.diagnosis
    assert "2 x scale (0.5)" in first["evidence"]
    assert "<li><strong>scale</strong> (explains it)" in report._repr_html_()  # notebooks


def test_alibi_with_the_diagonal_one_key_late_is_named_causal_offset():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, n, 4, 16)).astype(np.float32) for n in (40, 56, 56))
    slopes = np.array([0.5, 0.25, 0.125, 0.0625])
    # the kernel's band: keys up to one past the diagonal, window (-1, 1) = causal, one late
    late = reference(q, k, v, window_size=(-1, 1), alibi_slopes=slopes)["out"]
    report = verify(q=q, k=k, v=v, out=late.astype(np.float32), causal=True, alibi_slopes=slopes)
    assert not report.passed
    assert report.diagnosis[0]["cause"] == "causal_offset", report.diagnosis
    assert report.diagnosis[0]["explained"]
    assert "one key later" in report.diagnosis[0]["evidence"]
    # the evidence's "falls from" is the report's largest error (a worst row is a probe row)
    assert (
        f"falls from {report.tensors['out'].max_abs_error:.3g}" in report.diagnosis[0]["evidence"]
    )


def test_a_correct_case_has_no_diagnosis():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 24, 2, 8)) for _ in range(3))
    out = reference(q, k, v, causal=True)["out"]
    report = verify(q=q, k=k, v=v, out=out, causal=True)
    assert report.passed and report.diagnosis == () and "diagnosis" not in report.as_dict()
