"""FlashAttention's own test grids (tests/test_flash_attn.py), ported onto attnlab.flash.

Each case runs in float64 against the independent reference (tests/flash_reference.py) to 1e-10,
and in float32 under FlashAttention's own rule: attnlab's float32 error against the float64
reference is at most twice the error of a plain float32 implementation (``plain`` below, which
scales k instead of q as FlashAttention's ``reorder_ops`` does).

The default run takes a fixed rotation through each grid (every value of every axis appears);
``pytest -m grid tests/flash/test_flash_grid.py`` (or ATTNLAB_FULL_GRID=1) runs the whole grids.
"""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest

from attnlab.flash import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_varlen_func,
)
from flash_reference import allowed_table, reference, reference_batch
from tolerances import F64

OUTPUT_PAIRS = [
    (113, 203), (128, 217), (113, 211), (108, 256), (256, 512),
    (512, 256), (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048),
]  # fmt: skip
HEAD_DIMS = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
MHA = {"mha": (4, 4), "gqa": (4, 2), "mqa": (4, 1)}
OUTPUT_AXES = [
    OUTPUT_PAIRS,
    HEAD_DIMS,
    [False, True],
    [False, True],
    [False, True],
    [0.0, 50.0],
    sorted(MHA),
    [False, True],
]  # pair, d, causal, local, alibi, softcap, mha_type, kvpacked
VARLEN_AXES = [
    [(1, 147)] + OUTPUT_PAIRS, [32, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],
    [False, True], [False, True], [False, True], [0.0, 50.0], sorted(MHA),
]  # fmt: skip
OUTPUT_GRID = list(itertools.product(*OUTPUT_AXES))
VARLEN_GRID = list(itertools.product(*VARLEN_AXES))


def default_sample(axes, count, largest=512):
    """A fixed rotation through the grid: case j takes value (j // (i + 1)) of axis i (pairs
    above ``largest`` left out), so each value of every axis appears and the options mix."""
    pairs = [pair for pair in axes[0] if max(pair) <= largest]
    return [
        (pairs[j % len(pairs)],)
        + tuple(axis[(j // i) % len(axis)] for i, axis in enumerate(axes[1:], 1))
        for j in range(count)
    ]


def full_grid(request):
    """Skip unless the whole grids were asked for: ``-m grid``, or ATTNLAB_FULL_GRID=1 as
    tests/api/test_peer_grids.py reads it."""
    asked = "grid" in (request.config.option.markexpr or "")
    if not asked and os.environ.get("ATTNLAB_FULL_GRID") != "1":
        pytest.skip("the whole grid runs with `pytest -m grid` (or ATTNLAB_FULL_GRID=1)")


def torch_ref(torch, q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, slopes=None):
    """FlashAttention's attention_ref in torch on tensors (B, N, h, d), in their own dtype, k
    scaled instead of q (its reorder_ops); rows that see no key give 0."""
    n, h, d = q.shape[1:]
    m, g = k.shape[1], h // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)  # (B, M, h, d)
    s = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(d))  # (B, h, N, M)
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    ok = torch.from_numpy(allowed_table(n, m, causal, window))  # (N, M)
    if slopes is not None:
        dist = np.abs(np.arange(n)[:, None] + m - n - np.arange(m)[None, :])
        s = s - torch.from_numpy(slopes[:, :, None, None] * dist).to(s.dtype)
    seen = ok.any(dim=-1, keepdim=True)  # (N, 1)
    s = s.masked_fill(~ok, -math.inf).masked_fill(~seen, 0.0)  # no NaN from an empty row
    w = torch.softmax(s, dim=-1).masked_fill(~seen, 0.0)
    return torch.einsum("bhts,bshd->bthd", w, v)


def torch_plain(torch, q, k, v, **ref):
    """FlashAttention's PyTorch comparator: the same maths in float32 (upcast=False)."""
    t = (torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in (q, k, v))
    return torch_ref(torch, *t, **ref).double().numpy()


def torch_grads(torch, arrays, dout, **ref):
    """(dq, dk, dv) of torch_ref by autograd, in the arrays' dtype."""
    t = [torch.tensor(a, requires_grad=True) for a in arrays]
    torch_ref(torch, *t, **ref).backward(torch.from_numpy(dout.astype(arrays[0].dtype)))
    return [x.grad.double().numpy() for x in t]


def grads_within_rule(torch, f32, dout, factor, atol, **ref):
    """flash_attn_backward in float32 against the float64 gradients, under FlashAttention's rule."""
    want = torch_grads(torch, [a.astype(np.float64) for a in f32], dout, **ref)
    plain = torch_grads(torch, f32, dout, **ref)
    got = flash_attn_backward(
        dout.astype(np.float32), *f32, causal=ref.get("causal", False),
        window_size=ref.get("window", (-1, -1)), softcap=ref.get("softcap", 0.0),
        alibi_slopes=ref.get("slopes"),
    )  # fmt: skip
    for name, g, w, p in zip("qkv", got, want, plain, strict=True):
        assert g.dtype == np.float32
        err, plain_err = np.abs(g - w).max(), np.abs(p - w).max()
        assert err <= factor * plain_err + atol, f"d{name}: {err:.3g} > {factor} x {plain_err:.3g}"


def within_rule(got, want, plain, factor=2.0):
    """FlashAttention's rule: error <= factor x the plain same-dtype implementation's error."""
    err, plain_err = np.abs(got - want).max(), np.abs(plain - want).max()
    assert err <= factor * plain_err, f"error {err:.3g} > {factor} x plain's {plain_err:.3g}"


def output_case(case, seed):
    (n, m), d, causal, local, alibi, softcap, mha, kvpacked = case
    rng = np.random.default_rng(seed)
    h, h_k = MHA[mha]
    q = rng.standard_normal((2, n, h, d)) * (softcap if softcap else 1.0)
    k, v = rng.standard_normal((2, 2, m, h_k, d))
    window = tuple(int(x) for x in rng.integers(0, m, 2)) if local else (-1, -1)
    slopes = rng.random((2, h)) * 0.3 if alibi else None
    ref = {"causal": causal, "window": window, "softcap": softcap, "slopes": slopes}
    return q, k, v, ref, kvpacked


def run_flash(q, k, v, ref, kvpacked):
    kwargs = {
        "causal": ref["causal"], "window_size": ref["window"], "softcap": ref["softcap"],
        "alibi_slopes": ref["slopes"],
    }  # fmt: skip
    if kvpacked:
        return flash_attn_kvpacked_func(q, np.stack([k, v], axis=2), **kwargs)
    return flash_attn_func(q, k, v, **kwargs)


def float32_problem(case, seed):
    """The float32 inputs, and the float64 problem they hold exactly (FlashAttention's
    reference upcasts the same low-precision inputs)."""
    q, k, v, ref, kvpacked = output_case(case, seed)
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    return f32, [a.astype(np.float64) for a in f32], ref, kvpacked


def check_output(case, seed):
    _, (q, k, v), ref, kvpacked = float32_problem(case, seed)
    want, _, _ = reference_batch(q, k, v, **ref)
    np.testing.assert_allclose(run_flash(q, k, v, ref, kvpacked), want, **F64)


def check_output_float32(torch, case, seed):
    f32, f64, ref, kvpacked = float32_problem(case, seed)
    want, _, _ = reference_batch(*f64, **ref)
    got = run_flash(*f32, ref, kvpacked)
    assert got.dtype == np.float32
    within_rule(got, want, torch_plain(torch, *f32, **ref))
    dout = np.random.default_rng(seed).standard_normal(got.shape)
    grads_within_rule(torch, f32, dout, factor=3.0, atol=0.0, **ref)  # its output test's rule


OUTPUT_SAMPLE = default_sample(OUTPUT_AXES, 12)


@pytest.mark.parametrize("case", OUTPUT_SAMPLE, ids=str)
def test_flash_attn_output(case):
    check_output(case, seed=0)


@pytest.mark.oracle
@pytest.mark.parametrize("case", OUTPUT_SAMPLE[::3], ids=str)
def test_flash_attn_output_float32_rule(torch, case):
    check_output_float32(torch, case, seed=0)


# Cases of the grid whose float32 sums run long: q kᵀ over d = 224 (OpenBLAS adds all of it in
# one chain, MKL under torch in two pieces) and P V over 211 keys. attnlab erred up to 2.7x
# torch's float32 error on them before kernels/_precision.matmul cut those sums.
LONG_SUMS = [
    ((113, 211), 224, False, False, False, 0.0, "mqa", False),
    ((113, 211), 224, False, False, True, 0.0, "gqa", False),
    ((113, 211), 224, False, True, False, 0.0, "mqa", False),
    ((113, 211), 224, True, True, True, 0.0, "mqa", False),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case", LONG_SUMS, ids=str)
def test_long_float32_sums_stay_within_the_rule(torch, case):
    check_output_float32(torch, case, seed=0)


@pytest.mark.oracle
@pytest.mark.parametrize(
    "case",
    [
        ((256, 512), 224, False, False, False, 0.0, "mqa", False),
        ((256, 512), 256, False, False, False, 0.0, "gqa", False),
    ],
    ids=str,
)
def test_long_float32_sums_stay_within_the_rule_blockwise(torch, case):
    # The blockwise tiles' q kᵀ over d = 224 or 256 keys: 2.5x torch's error in one chain.
    import attnlab as al

    f32, f64, ref, _ = float32_problem(case, seed=0)
    want, _, _ = reference_batch(*f64, **ref)
    q, k, v = (np.swapaxes(a, 1, 2) for a in f32)  # (B, h, N, d), k and v with h_k heads
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    got = np.swapaxes(al.attention(q, k, v, method="blockwise"), 1, 2)
    within_rule(got, want, torch_plain(torch, *f32, **ref))


@pytest.mark.grid
@pytest.mark.oracle
def test_flash_attn_output_full(torch, request):
    full_grid(request)
    for case in OUTPUT_GRID:
        check_output(case, seed=0)
        check_output_float32(torch, case, seed=0)


def check_varlen(case, seed):
    (s_q, s_k), d, causal, local, alibi, softcap, mha = case
    rng = np.random.default_rng(seed)
    h, h_k = MHA[mha]
    # FlashAttention's "random" padding: each length within 20 of the padded length.
    lens_q = rng.integers(max(1, s_q - 20), s_q + 1, 3)
    lens_k = rng.integers(max(1, s_k - 20), s_k + 1, 3)
    cq, ck = (np.concatenate([[0], np.cumsum(x)]) for x in (lens_q, lens_k))
    q = rng.standard_normal((cq[-1], h, d)) * (softcap if softcap else 1.0)
    k, v = rng.standard_normal((2, ck[-1], h_k, d))
    window = tuple(int(x) for x in rng.integers(0, s_k, 2)) if local else (-1, -1)
    slopes = rng.random((3, h)) * 0.3 if alibi else None
    kwargs = {"causal": causal, "window_size": window, "softcap": softcap, "alibi_slopes": slopes}
    want = np.zeros(q.shape[:2] + (d,))
    for b in range(3):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        want[rq], _, _ = reference(
            q[rq],
            k[rk],
            v[rk],
            causal=causal,
            window=window,
            softcap=softcap,
            slopes=None if slopes is None else slopes[b],
        )
    out = flash_attn_varlen_func(q, k, v, cq, ck, s_q, s_k, **kwargs)
    np.testing.assert_allclose(out, want, **F64)


@pytest.mark.parametrize("case", default_sample(VARLEN_AXES, 6, largest=256), ids=str)
def test_flash_attn_varlen_output(case):
    check_varlen(case, seed=1)


@pytest.mark.grid
def test_flash_attn_varlen_output_full(request):
    full_grid(request)
    for case in VARLEN_GRID:
        check_varlen(case, seed=1)


@pytest.mark.oracle
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("seqlen", [1, 2, 5, 17, 128])
def test_flash_attn_overflow(torch, seqlen, d, causal):
    """FlashAttention's bwd_overflow case (q·5, k·3, v·3) in float32, forward and backward,
    each under its rule."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, seqlen, 5, d)) * 5
    k, v = rng.standard_normal((2, 2, seqlen, 5, d)) * 3
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    want, _, _ = reference_batch(*f32, causal=causal)
    within_rule(flash_attn_func(*f32, causal=causal), want, torch_plain(torch, *f32, causal=causal))
    dout = rng.standard_normal(q.shape)
    grads_within_rule(torch, f32, dout, factor=5.0, atol=1e-3, causal=causal)  # its rule here
