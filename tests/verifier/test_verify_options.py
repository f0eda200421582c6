"""attnlab.verify with FlashAttention's options: each one honoured, and each one forgotten fails.

Kernel outputs come from tests/verify_reference.py (independent numpy).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.verifier import verify
from verify_reference import inputs, reference


def _passes(report):
    assert report.passed, report.summary()
    return report


def _cast(d: dict, dtype=np.float32) -> dict:
    return {name: x.astype(dtype) for name, x in d.items()}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("softcap", 3.0),
        ("alibi_slopes", np.array([0.5, 0.25, 0.125, 0.0625])),
        ("alibi_slopes", np.linspace(0.1, 0.8, 8).reshape(2, 4)),
        ("sinks", np.array([0.5, -1.0, 2.0, 0.0])),
        ("window_size", (3, 2)),
        ("window_size", (-1, 4)),
        ("window_size", (5, -1)),
    ],
)
def test_each_option_honoured_and_forgotten(option, value):
    q, k, v = inputs(np.random.default_rng(20), n=18, m=26)
    q *= 3  # large scores: a cap, a bias or a sink changes the answer visibly
    options = {option: value}
    right = _cast(reference(q, k, v, **options))
    forgot = _cast(reference(q, k, v))
    _passes(verify(q, k, v, right["out"], **options))
    assert not verify(q, k, v, forgot["out"], **options).passed


def test_window_off_by_one_edge_fails():
    q, k, v = inputs(np.random.default_rng(21), n=30, m=30)
    right = _cast(reference(q, k, v, window_size=(4, 0)))["out"]
    wrong = _cast(reference(q, k, v, window_size=(3, 0)))["out"]  # one key short on the left
    assert verify(q, k, v, right, window_size=(4, 0)).passed
    report = verify(q, k, v, wrong, window_size=(4, 0))
    assert not report.passed
    assert report.tensors["out"].worst["row"] >= 4  # rows 0..3 see every key they may


def test_window_size_may_be_stored_as_whole_floats():
    q, k, v = inputs(np.random.default_rng(28))
    out = _cast(reference(q, k, v, window_size=(3, 1)))["out"]
    _passes(verify(q, k, v, out, window_size=np.array([3.0, 1.0])))


def test_causal_overrides_the_windows_right_edge():
    q, k, v = inputs(np.random.default_rng(22))
    out = _cast(reference(q, k, v, causal=True, window_size=(6, 0)))["out"]
    assert verify(q, k, v, out, causal=True, window_size=(6, -1)).passed


def test_lse_checked_and_a_wrong_row_named():
    q, k, v = inputs(np.random.default_rng(23))
    got = _cast(reference(q, k, v, causal=True))
    report = _passes(verify(q, k, v, got["out"], lse=got["lse"], causal=True))
    assert list(report.tensors) == ["out", "lse"]
    got["lse"][1, 2, 9] += 1e-3  # (B, h, N): batch 1, head 2, row 9
    report = verify(q, k, v, got["out"], lse=got["lse"], causal=True)
    w = report.tensors["lse"].worst
    assert not report.passed and (w["batch"], w["head"], w["row"]) == (1, 2, 9)
    assert "column" not in w


def test_rows_with_no_key_are_zero_and_their_lse_may_be_plus_or_minus_inf():
    # causal with N > M, bottom-right: the first N - M rows see no key (FlashAttention: 0).
    q, k, v = inputs(np.random.default_rng(24), n=12, m=8)
    got = _cast(reference(q, k, v, causal=True))
    assert np.isneginf(got["lse"][:, :, :4]).all() and (got["out"][:, :4] == 0).all()
    plus = got["lse"].copy()
    plus[np.isneginf(plus)] = np.inf  # what FlashAttention 2 writes there
    for lse in (got["lse"], plus):
        assert verify(q, k, v, got["out"], lse=lse, causal=True).passed
    bad = got["lse"].copy()
    bad[0, 1, 2] = 0.0  # a finite lse on a row that sees no key
    report = verify(q, k, v, got["out"], lse=bad, causal=True)
    assert not report.passed and report.tensors["lse"].worst["row"] == 2


@pytest.mark.parametrize(
    ("option", "value"),
    [("softcap", 2.5), ("alibi_slopes", np.array([0.3, 0.2, 0.1, 0.05])), ("sinks", [1.0] * 4)],
)
def test_gradients_with_options(option, value):
    rng = np.random.default_rng(25)
    q, k, v = inputs(rng, n=14, m=20)
    q *= 3
    do = rng.standard_normal(q.shape).astype(np.float32)
    got = _cast(reference(q, k, v, do, **{option: value}))
    grads = {"do": do, "dq": got["dq"], "dk": got["dk"], "dv": got["dv"]}
    _passes(verify(q, k, v, got["out"], **grads, **{option: value}))
    forgot = _cast(reference(q, k, v, do))
    report = verify(q, k, v, got["out"], do=do, dq=forgot["dq"], dk=got["dk"], dv=got["dv"],
                    **{option: value})  # fmt: skip
    assert [n for n, t in report.tensors.items() if not t.passed] == ["dq"]


def test_a_row_with_no_key_keeps_its_sink_in_the_lse():
    q, k, v = inputs(np.random.default_rng(26), n=12, m=8)
    sinks = np.array([0.5, -1.0, 2.0, 0.0])
    got = _cast(reference(q, k, v, causal=True, sinks=sinks))
    assert (got["lse"][:, :, :4] == sinks[None, :, None]).all()  # log(exp(sink)), no key
    report = _passes(verify(q, k, v, got["out"], lse=got["lse"], causal=True, sinks=sinks))
    assert report.tensors["lse"].max_abs_error < 1e-6
    got["lse"][0, 1, 2] = -np.inf  # as if the sink were forgotten on that empty row
    report = verify(q, k, v, got["out"], lse=got["lse"], causal=True, sinks=sinks)
    assert not report.passed and report.tensors["lse"].worst["row"] == 2


def test_where_the_plain_float16_answer_overflows_it_sets_no_bound():
    rng = np.random.default_rng(27)
    q, k, v = (rng.standard_normal((1, 16, 2, 16)) for _ in range(3))
    q, k = (200 * q).astype(np.float16), (200 * k).astype(np.float16)  # scores past 65,504
    v = v.astype(np.float16)
    out = reference(q, k, v)["out"].astype(np.float16)  # a kernel that sums in float32
    report = _passes(verify(q, k, v, out))
    assert np.isfinite(report.tensors["out"].baseline_error)
    out[0, 5, 1, 3] = np.nan
    report = verify(q, k, v, out)
    assert not report.passed and report.tensors["out"].worst["row"] == 5
