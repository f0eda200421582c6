"""The baseline's fast rounding equals numpy's float16 cast and ml_dtypes' bfloat16 cast,
bit for bit, on the values where rounding is delicate and on random tables; the compiled
(numba) passes equal numpy's, bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.verifier import _rounding
from attnlab.verifier._rounding import NUMPY, round_in_place

BF16 = np.dtype(ml_dtypes.bfloat16)


def _delicate() -> np.ndarray:
    """Ties and their neighbours at many scales, subnormals, the overflow edge, specials."""
    out = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, 65536, 70000, 3.4e38]
    out += [2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-26, 1e-40, 1e-45, 2.0**-133]
    base = np.float32(1.0)
    for e in range(-30, 17):
        one = np.float32(2.0**e)
        for ulps in range(0, 1 << 14, 1 << 10):  # steps across float16's and bfloat16's ties
            v = one * (base + np.float32(ulps) * np.float32(2.0**-23))
            out += [v, np.nextafter(v, np.float32(0)), np.nextafter(v, np.float32(np.inf))]
    x = np.array(out, np.float32)
    # NaNs with payloads: the low ones, and the high ones that adding the bias would carry
    # into the exponent (bfloat16: inf) or the sign (-0)
    nans = np.array([0x7F800001, 0x7F807FFF, 0x7F808000, 0x7FBFFFFF, 0x7FFFFFFF], np.uint32)
    return np.concatenate([x, -x, nans.view(np.float32), (nans | 0x80000000).view(np.float32)])


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_equals_the_cast_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    s = rng.standard_normal((4, 64, 700)).astype(np.float32) * 3
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)  # softmax weights: many below float16's normal range
    raw = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    raw = raw[np.isfinite(raw)]
    for x in (_delicate(), w, s * 1e4, raw):
        with np.errstate(over="ignore", invalid="ignore"):  # NaN payloads warn in casts
            want = x.astype(dtype).astype(np.float32)
        got = round_in_place(x.copy(), dtype)
        same = (want.view(np.uint32) == got.view(np.uint32)) | (np.isnan(want) & np.isnan(got))
        assert same.all(), (x[~same][:5], want[~same][:5], got[~same][:5])


def test_the_baseline_on_threads_is_bitwise_the_single_threads():
    from attnlab.verifier._baseline import baseline
    from attnlab.verifier._case import make_case

    rng = np.random.default_rng(1)
    b, n, h, h_kv, d = 2, 40, 6, 3, 8
    q, do = (rng.standard_normal((b, n, h, d)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((b, n, h_kv, d)).astype(np.float16) for _ in range(2))
    entries = {"q": q, "k": k, "v": v, "out": q, "lse": np.zeros((b, h, n), np.float32)}
    entries.update(do=do, dq=q, dk=k, dv=v, causal=True, softcap=np.float32(3.0))
    entries.update(alibi_slopes=rng.random(h), sinks=rng.standard_normal(h))
    case = make_case(entries)
    one = baseline(case, 2**16, threads=1)  # small budget: many row blocks
    for threads in (2, 3):
        many = baseline(case, 2**16, threads=threads)
        for name in one:
            assert np.array_equal(one[name], many[name], equal_nan=True), (name, threads)


def _compiled():
    pytest.importorskip("numba")
    compiled = _rounding._compiled()
    assert compiled is not None and compiled is not NUMPY
    return compiled


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _tables(rng) -> list[np.ndarray]:
    """(rows, cols) float32 tables: softmax-like weights, scores, raw bits, delicate values."""
    s = rng.standard_normal((64, 700)).astype(np.float32) * 3
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    raw = rng.integers(0, 2**32, 64 * 700, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edge = _delicate()
    edge = np.resize(edge, (8, -(-edge.size // 8)))  # (8, cols): every delicate value
    return [w, s, s * 1e4, raw.reshape(64, 700), edge]


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_the_compiled_rounding_is_numpys_bit_for_bit(dtype):
    compiled = _compiled()
    for x in _tables(np.random.default_rng(2)):
        want = NUMPY.round(x.copy(), dtype)
        got = compiled.round(x.copy(), dtype)
        assert _same_bits(want, got), x[want.view(np.uint32) != got.view(np.uint32)][:5]


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_the_compiled_softmax_steps_are_numpys_bit_for_bit(dtype):
    compiled = _compiled()
    rng = np.random.default_rng(3)
    for x in _tables(rng):
        rows = x.shape[0]
        w = rng.random(x.shape).astype(np.float32)
        w[0] = x[-1]  # specials and subnormals as the multiplier too
        total = (rng.random((rows, 1)) * 10 + 1e-3).astype(np.float32)
        total[0] = 1.0
        d = rng.standard_normal((rows, 1)).astype(np.float32)
        with np.errstate(all="ignore"):
            want, got = x.copy(), x.copy()
            NUMPY.divide_round(want, total, dtype)
            compiled.divide_round(got, total, dtype)
            assert _same_bits(want, got)
            want, got = x.copy(), x.copy()
            NUMPY.grad_round(want, w, d, dtype)
            compiled.grad_round(got, w, d, dtype)
            assert _same_bits(want, got)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_the_baseline_with_the_compiled_passes_is_numpys(dtype, monkeypatch):
    from attnlab.verifier._baseline import baseline
    from attnlab.verifier._case import make_case

    _compiled()
    rng = np.random.default_rng(4)
    b, n, h, h_kv, d = 2, 70, 4, 2, 16
    q, do = (rng.standard_normal((b, n, h, d)).astype(dtype) * 4 for _ in range(2))
    k, v = (rng.standard_normal((b, n, h_kv, d)).astype(dtype) * 4 for _ in range(2))
    entries = {"q": q, "k": k, "v": v, "out": q, "lse": np.zeros((b, h, n), np.float32)}
    entries.update(do=do, dq=q, dk=k, dv=v, window_size=(20, 3), softcap=np.float32(6.0))
    entries.update(alibi_slopes=rng.random(h), sinks=rng.standard_normal(h))
    case = make_case(entries)
    answers = {}
    for mode in ("numpy", "numba"):
        monkeypatch.setenv("ATTNLAB_KERNEL", mode)
        answers[mode] = baseline(case, 2**15)
    for name, want in answers["numpy"].items():
        assert np.array_equal(want, answers["numba"][name], equal_nan=True), name


def test_a_large_baseline_takes_the_compiled_passes_a_small_one_numpys(monkeypatch):
    compiled = _compiled()
    monkeypatch.delenv("ATTNLAB_KERNEL", raising=False)
    assert _rounding.passes(_rounding.COMPILED_PAIRS - 1) is NUMPY
    assert _rounding.passes(_rounding.COMPILED_PAIRS) is compiled
    monkeypatch.setenv("ATTNLAB_KERNEL", "numpy")
    assert _rounding.passes(2**40) is NUMPY
