"""Dropout cases: exact under the kernel's keep mask, statistical without it.

The kernel outputs come from a dense float64 dropout attention written here from
FlashAttention's attention_ref (weights * keep / (1 - p) @ V) with the chain rule for the
gradients; it shares no code with attnlab.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.verifier import CaseError, verify
from verify_reference import allowed, inputs


def _dropped(q, k, v, do, keep, p, causal=True, scaled=True):
    """out and grads (B, N, h, d) of attention with dropout under ``keep`` (B, h, N, M)."""
    q, k, v, do = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v, do))
    scale = 1 / np.sqrt(q.shape[-1])
    s = np.where(allowed(q.shape[2], k.shape[2], causal=causal), q @ k.swapaxes(-1, -2) * scale,
                 -np.inf)  # fmt: skip
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)  # (B, h, N, M)
    z = keep / (1 - p) if scaled else keep.astype(float)
    out = (w * z) @ v
    dv = (w * z).swapaxes(-1, -2) @ do
    dpd = (do @ v.swapaxes(-1, -2)) * z
    ds = w * (dpd - (w * dpd).sum(-1, keepdims=True))
    dq, dk = ds @ k * scale, ds.swapaxes(-1, -2) @ q * scale
    back = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    return {"out": back(out), "dq": back(dq), "dk": back(dk), "dv": back(dv)}


def _case(seed=0, p=0.2, n=24, dtype=np.float32, **kw):
    rng = np.random.default_rng(seed)
    q, k, v = inputs(rng, n=n, m=n, h=2, h_kv=2, dtype=dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    keep = rng.random((q.shape[0], 2, n, n)) >= p
    got = _dropped(q, k, v, do, keep, p, **kw)
    entries = {"q": q, "k": k, "v": v, "do": do, "causal": True, "dropout_p": p}
    entries.update({name: x.astype(dtype) for name, x in got.items()})
    return entries, keep


def test_the_kernels_mask_judges_every_tensor_exactly():
    case, keep = _case()
    report = verify(**case, dropout_mask=keep)
    assert report.passed, report.summary()
    assert set(report.tensors) == {"out", "dq", "dk", "dv"}
    assert report.tensors["out"].max_abs_error < 1e-5


def test_flashattentions_sign_encoded_mask_is_read():
    case, keep = _case(1)
    s_dmask = np.where(keep, 0.5, -0.5).astype(np.float32)  # negative: dropped
    assert verify(**case, S_dmask=s_dmask).passed


def test_float16_kernel_under_its_mask_passes():
    case, keep = _case(2, dtype=np.float16)
    report = verify(**case, dropout_mask=keep)
    assert report.passed, report.summary()


@pytest.mark.parametrize("flip", ["mask", "scaling"])
def test_a_kernel_off_its_mask_or_scaling_fails(flip):
    case, keep = _case(3, scaled=flip != "scaling")
    if flip == "mask":
        keep = keep.copy()
        keep[1, 0, 10, :5] = ~keep[1, 0, 10, :5]  # five weights of one row judged otherwise
    report = verify(**case, dropout_mask=keep)
    assert not report.passed and not report.tensors["out"].passed
    if flip == "mask":
        w = report.tensors["out"].worst
        assert (w["batch"], w["head"], w["row"]) == (1, 0, 10)


def _no_mask(seed, p_used, p_said=0.1, scaled=True, n=256):
    case, _ = _case(seed, p=p_used, n=n, scaled=scaled)
    for name in ("do", "dq", "dk", "dv"):
        del case[name]
    case["dropout_p"] = p_said
    return verify(**case)


def test_without_a_mask_a_right_dropout_passes_statistically():
    report = _no_mask(4, 0.1)
    t = report.tensors["out"]
    assert report.passed, report.summary()
    assert abs(t.scaling - 1) < 0.05 and abs(t.spread - 1) < 0.2
    assert report.as_dict()["tensors"]["out"]["statistical"]["spread"] == t.spread


def test_without_a_mask_a_missing_scaling_fails():
    report = _no_mask(5, 0.1, scaled=False)
    assert not report.passed and "scaling" in report.summary()


def test_without_a_mask_the_wrong_keep_rate_fails():
    report = _no_mask(6, 0.3)  # the kernel drops 30 %, the case says 10 %
    assert not report.passed
    assert report.tensors["out"].spread > 2


def test_gradients_without_a_mask_are_refused():
    case, _ = _case(7)
    with pytest.raises(CaseError, match="dropout_p"):
        verify(**case)
