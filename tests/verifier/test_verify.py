"""attnlab.verify: the verdict on kernel outputs built from an independent numpy reference.

Every kernel output here comes from tests/verify_reference.py (dense numpy written from
FlashAttention's docs), never from verify's own truth, and each failing case is made by
changing one known place, which the report must name.
"""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

import attnlab as al
from attnlab.verifier import CaseError, verify
from attnlab.verifier._report import default_atol
from verify_reference import inputs, reference

BF16 = ml_dtypes.bfloat16


def _kernel(q, k, v, dtype=None, do=None, **options):
    """A correct kernel: the exact answer, stored in the dtype a kernel would return."""
    exact = reference(q, k, v, do, **options)
    dtype = dtype or q.dtype
    return {name: x.astype(dtype) for name, x in exact.items()}


def test_correct_float32_output_passes():
    q, k, v = inputs(np.random.default_rng(0))
    got = _kernel(q, k, v, causal=True)
    report = verify(q=q, k=k, v=v, out=got["out"], causal=True)
    assert report.passed and report.verdict == "pass"
    t = report.tensors["out"]
    assert t.max_abs_error <= t.tolerance
    assert 0 < t.baseline_error < 1e-5  # float32's plain error: a few ulps, not zero


@pytest.mark.parametrize(("batch", "row", "head"), [(0, 0, 0), (1, 17, 3), (1, 23, 2)])
def test_one_row_perturbed_fails_naming_batch_head_and_row(batch, row, head):
    q, k, v = inputs(np.random.default_rng(1))
    out = _kernel(q, k, v, causal=True)["out"]
    out[batch, row, head, :] += np.float32(1e-2)
    report = verify(q=q, k=k, v=v, out=out, causal=True)
    assert not report.passed
    worst = report.tensors["out"].worst
    assert (worst["batch"], worst["head"], worst["row"]) == (batch, head, row)
    assert f"batch {batch}, head {head}, row {row}" in report.summary()


def test_the_truth_is_the_independent_reference():
    # The worst entry's exact value is reported: it must be the reference's, in float64.
    q, k, v = inputs(np.random.default_rng(2), dtype=np.float64)
    exact = reference(q, k, v, window_size=(3, 2))["out"]
    out = exact.copy()
    out[1, 5, 2, 7] += 1.0
    w = verify(q=q, k=k, v=v, out=out, window_size=(3, 2)).tensors["out"].worst
    assert (w["batch"], w["row"], w["head"], w["column"]) == (1, 5, 2, 7)
    assert w["exact"] == pytest.approx(exact[1, 5, 2, 7], abs=1e-12)


def test_float64_kernel_is_held_to_float64():
    q, k, v = inputs(np.random.default_rng(3), dtype=np.float64)
    out = _kernel(q, k, v)["out"]
    assert verify(q=q, k=k, v=v, out=out).passed
    out[0, 3, 1, 0] += 1e-9  # invisible in float32, a million ulps in float64
    report = verify(q=q, k=k, v=v, out=out)
    assert not report.passed and report.tensors["out"].worst["row"] == 3


def test_bfloat16_output_rounded_from_float32_passes():
    q, k, v = inputs(np.random.default_rng(4))
    out = _kernel(q, k, v, dtype=BF16, causal=True)["out"]
    report = verify(q=q, k=k, v=v, out=out, causal=True)
    assert report.passed and report.tensors["out"].dtype == "bfloat16"


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_half_precision_kernels(dtype):
    q, k, v = inputs(np.random.default_rng(5), n=40, m=56, dtype=dtype)
    got = _kernel(q, k, v, causal=True)
    report = verify(q=q, k=k, v=v, out=got["out"], causal=True)
    assert report.passed, report.summary()
    assert report.dtype == np.dtype(dtype).name
    # The plain same-dtype answer errs far more than float32's: the bound scales with it.
    assert report.tensors["out"].baseline_error > 1e-4
    wrong = got["out"].astype(np.float32)
    wrong[1, 30, 0] *= -1  # one row's sign flipped
    report = verify(q=q, k=k, v=v, out=wrong.astype(dtype), causal=True)
    assert not report.passed and report.tensors["out"].worst["row"] == 30


def test_forgotten_causal_mask_fails():
    q, k, v = inputs(np.random.default_rng(6))
    out = _kernel(q, k, v)["out"]  # computed without the mask the case asks for
    report = verify(q=q, k=k, v=v, out=out, causal=True)
    assert not report.passed
    assert report.tensors["out"].worst["row"] < 23  # the last row sees every key either way


def _backward_case(seed=7, dtype=np.float32, **options):
    rng = np.random.default_rng(seed)
    q, k, v = inputs(rng, n=20, m=28, dtype=dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    return (q, k, v, do), _kernel(q, k, v, do=do, **options)


def test_correct_gradients_pass():
    (q, k, v, do), got = _backward_case(causal=True)
    report = verify(q, k, v, got["out"], do=do, dq=got["dq"], dk=got["dk"], dv=got["dv"],
                    causal=True)  # fmt: skip
    assert report.passed, report.summary()
    assert list(report.tensors) == ["out", "dq", "dk", "dv"]


@pytest.mark.parametrize("key_row", [0, 13, 27])
def test_dk_wrong_in_one_key_row_fails_naming_dk_and_the_row(key_row):
    (q, k, v, do), got = _backward_case(causal=False)
    dk = got["dk"].copy()
    dk[1, key_row, 0, :] += np.float32(1e-2)
    report = verify(q, k, v, got["out"], do=do, dq=got["dq"], dk=dk, dv=got["dv"])
    assert not report.passed
    assert [n for n, t in report.tensors.items() if not t.passed] == ["dk"]
    worst = report.tensors["dk"].worst
    assert (worst["batch"], worst["row"], worst["head"]) == (1, key_row, 0)
    assert "dk off by" in report.summary() and f"key row {key_row}" in report.summary()


def test_gradients_in_bfloat16_pass():
    (q, k, v, do), got = _backward_case(dtype=BF16, causal=True)
    report = verify(q, k, v, got["out"], do=do, dq=got["dq"], dk=got["dk"], dv=got["dv"],
                    causal=True)  # fmt: skip
    assert report.passed, report.summary()


def test_output_computed_without_the_cases_softcap_fails():
    q, k, v = inputs(np.random.default_rng(8), dtype=np.float32)
    q *= 4  # scores large enough for the cap to bite
    right = _kernel(q, k, v, softcap=5.0)["out"]
    forgot = _kernel(q, k, v)["out"]
    assert verify(q=q, k=k, v=v, out=right, softcap=5.0).passed
    report = verify(q=q, k=k, v=v, out=forgot, softcap=5.0)
    assert not report.passed


def test_bhsd_layout_and_gqa():
    q, k, v = inputs(np.random.default_rng(9), h=6, h_kv=2)
    out = _kernel(q, k, v, causal=True)["out"]
    swap = (0, 2, 1, 3)  # (B, N, h, d) <-> (B, h, N, d)
    report = verify(q=q.transpose(swap), k=k.transpose(swap), v=v.transpose(swap),
                    out=out.transpose(swap), layout="bhsd", causal=True)  # fmt: skip
    assert report.passed and report.shape["kv_heads"] == 2 and report.shape["heads"] == 6
    out[0, 4, 5] += 1
    report = verify(q=q, k=k, v=v, out=out, causal=True)  # bshd: head 5, row 4
    assert (report.tensors["out"].worst["head"], report.tensors["out"].worst["row"]) == (5, 4)


def test_cross_attention_causal_is_aligned_bottom_right():
    # FlashAttention aligns causal to the bottom-right corner when N < M.
    q, k, v = inputs(np.random.default_rng(10), n=8, m=20)
    out = _kernel(q, k, v, causal=True)["out"]
    assert verify(q=q, k=k, v=v, out=out, causal=True).passed


def test_varlen_names_the_sequence_and_its_row():
    rng = np.random.default_rng(11)
    lens_q, lens_k = [5, 9, 3], [7, 9, 4]
    cu_q, cu_k = np.cumsum([0, *lens_q]), np.cumsum([0, *lens_k])
    q = rng.standard_normal((cu_q[-1], 4, 8)).astype(np.float32)  # (T_q, h, d)
    k = rng.standard_normal((cu_k[-1], 2, 8)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], 2, 8)).astype(np.float32)
    out = np.concatenate([
        reference(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]],
                  v[None, cu_k[b]:cu_k[b + 1]], causal=True)["out"][0]
        for b in range(3)
    ]).astype(np.float32)  # fmt: skip
    report = verify(q=q, k=k, v=v, out=out, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert report.passed, report.summary()
    out[cu_q[1] + 6, 3] += 0.5  # sequence 1, its row 6
    w = verify(q=q, k=k, v=v, out=out, causal=True, cu_seqlens_q=cu_q,
               cu_seqlens_k=cu_k).tensors["out"].worst  # fmt: skip
    assert (w["batch"], w["row"], w["head"], w["token"]) == (1, 6, 3, cu_q[1] + 6)


def test_nan_in_the_output_fails_and_is_counted():
    q, k, v = inputs(np.random.default_rng(12))
    out = _kernel(q, k, v)["out"]
    out[0, 2, 1, 3] = np.nan
    report = verify(q=q, k=k, v=v, out=out)
    t = report.tensors["out"]
    assert not report.passed and t.nonfinite == 1 and t.max_abs_error == math.inf
    assert (t.worst["row"], t.worst["head"], t.worst["column"]) == (2, 1, 3)
    d = report.as_dict()["tensors"]["out"]
    # JSON has no inf or NaN: written as strings, which say which (null would not)
    assert d["max_abs_error"] == "inf" and d["worst"]["kernel"] == "nan"
    assert json.loads(json.dumps(d)) == d


def test_default_atol_is_two_ulps_at_the_scale():
    assert default_atol(np.dtype(np.float16), 0.5) == 2 * 2.0**-11  # 0.8 lies in [0.5, 1)
    assert default_atol(np.dtype(np.float32), 1.0) == 2 * 2.0**-23  # 1.3 lies in [1, 2)
    assert default_atol(np.dtype(BF16), 3.0) == 2 * 2.0**-7 * 2  # 3.3 lies in [2, 4)
    assert default_atol(np.dtype(np.float64), 0.0) == 2 * 2.0**-52 / 4  # 0.3 in [1/4, 1/2)


def test_factor_and_atol_move_the_bound():
    q, k, v = inputs(np.random.default_rng(13))
    out = _kernel(q, k, v)["out"]
    out[0, 0, 0, 0] += np.float32(1e-3)
    assert not verify(q=q, k=k, v=v, out=out).passed
    assert verify(q=q, k=k, v=v, out=out, atol=2e-3).passed
    report = verify(q=q, k=k, v=v, out=out, factor=0.0, atol=0.0)
    assert report.tensors["out"].tolerance == 0.0
    with pytest.raises(al.AttnlabError, match="factor"):
        verify(q=q, k=k, v=v, out=out, factor=-1.0)


def test_report_as_dict_and_html():
    q, k, v = inputs(np.random.default_rng(14))
    report = verify(q=q, k=k, v=v, out=_kernel(q, k, v)["out"])
    d = report.as_dict()
    assert d["verdict"] == "pass" and set(d["tensors"]) == {"out"}
    keys = {"max_abs_error", "mean_abs_error", "baseline_error", "ratio", "worst", "pass"}
    assert keys <= set(d["tensors"]["out"])
    assert {"batch", "head", "row", "column"} <= set(d["tensors"]["out"]["worst"])
    page = report._repr_html_()
    assert "<table>" in page and "pass" in page and "baseline error" in page


def test_attnlab_verify_is_the_function():
    assert al.verify is verify and "verify" in al.__all__


def test_a_long_case_never_holds_an_n_by_m_table():
    # 4,096 x 4,096: one float64 score table is 128 MiB. verify (truth, baseline, report,
    # forward and backward) must stay well under it: the blockwise path and row blocks.
    import tracemalloc

    rng = np.random.default_rng(15)
    n, d = 4096, 16
    q, k, v, do = (rng.standard_normal((1, n, 1, d)).astype(np.float32) for _ in range(4))
    table = n * n * 8
    tracemalloc.start()
    try:
        report = verify(q, k, v, out=q, do=do, dq=q, dk=k, dv=v, causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert set(report.tensors) == {"out", "dq", "dk", "dv"}
    assert peak < table / 2, f"peak {peak / 2**20:.0f} MiB"


def test_a_bad_case_raises_case_error_naming_the_array():
    q, k, v = inputs(np.random.default_rng(16))
    with pytest.raises(CaseError, match=r"^v: missing array"):
        verify(q=q, k=k, out=q)
    with pytest.raises(CaseError, match=r"^out: expected shape"):
        verify(q=q, k=k, v=v, out=q[:, :5])
    assert issubclass(CaseError, al.AttnlabError)


def test_verify_fits_80_lines_signature_included():
    # its parameters are packed several to a line; the body only gathers the entries
    import inspect

    assert len(inspect.getsourcelines(verify)[0]) < 80
