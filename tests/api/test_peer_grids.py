"""The peers' own test grids, run against attnlab: FlashAttention's ``test_flash_attn.py``,
PyTorch's SDPA math-backend grids and JAX's ``nn_test`` attention cases.

Only the grids and the tolerance rules are the peers'; every reference is written here (the
torch formula of ``variant_refs``, torch's own math backend where it is the reference, JAX
where it is). Each grid is sampled with a fixed rotation, so the default run stays short and
still reaches every axis of the grid; ATTNLAB_FULL_GRID=1 runs every case. Times on the
project's shared 2-core machine (torch and JAX imports included): the default sample ~95 s
(FlashAttention float64 6 cases ~30 s, float32 rule 8 + 8 with gradients + 8 found ~25 s,
overflow 10 ~6 s, SDPA 8 ~3 s, JAX 4 ~30 s, mostly compiling). The full grids, estimated from the sample's mean per case:
FlashAttention 6,688 cases at 5-45 s each in float64 (about a day; select with -k) and ~1.5 s
each in float32, its overflow grid 60 cases ~40 s, SDPA 1,512 cases ~9 min, JAX 32 ~4 min.

float64 cases: forward 1e-10, gradients 1e-9. float32 cases: FlashAttention 3's rule
(hopper/test_flash_attn.py, test_flash_attn_output), for the output and for dq, dk, dv:
error against the float64 result <= rtol x the error of the same torch formula run in float32
+ atol, rtol 2 (3 with a softcap), atol twice the float64 result's own float32 rounding
(max |fl32(ref + 0.3 - 0.3) - ref|), for the gradients plus 3e-4 with a softcap. Softcap cases
draw q scaled by softcap / 4, as that test does, so that the cap bends the scores. Where the
exact gradient is 0 (one key per row) torch's float32 error is 0 and so is the allowance.
``benchmarks/flash_grid_sweep.py`` runs the rule over any slice of the grid and prints each
failing check; ``FA_FOUND`` keeps cases it found failing in every run. The overflow cases keep
FlashAttention 2's rule for them (tests/test_flash_attn.py, test_flash_attn_bwd_overflow).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

import attnlab as al
from tolerances import F32
from variant_refs import Case, loop_variant, masks_of, torch_variant

FULL = os.environ.get("ATTNLAB_FULL_GRID") == "1"
F64 = {"rtol": 0.0, "atol": 1e-10}
GRAD = {"rtol": 0.0, "atol": 1e-9}


def rotation(cases: list, take: int, small=None) -> list:
    """Every case with ATTNLAB_FULL_GRID=1; else ``take`` of them (of those ``small`` keeps)
    at a fixed stride coprime to their count, so the picks are distinct and walk the axes."""
    if FULL:
        return cases
    cases = [c for c in cases if small is None or small(c)]
    if len(cases) <= take:
        return cases
    stride = len(cases) // take
    while np.gcd(stride, len(cases)) != 1:
        stride += 1
    return [cases[(i * stride) % len(cases)] for i in range(take)]


def _small(case) -> bool:  # the default run's FlashAttention cases: at most 256 x 512 scores
    return case[0] * case[1] <= 256 * 512


# -- FlashAttention -----------------------------------------------------------------------------
FA_SEQLENS = [
    (1, 1), (1, 147), (64, 128), (128, 192), (239, 1), (799, 3), (113, 203), (113, 128),
    (128, 217), (113, 211), (108, 256), (256, 512), (384, 256), (640, 128), (512, 256),
    (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048),
]  # fmt: skip
FA_HEADDIMS = [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256]
FA_FEATURES = list(itertools.product([False, True], repeat=5))  # causal local alibi cap sinks
FA_HEADS = ["mha", "mqa", "gqa"]
FA_CASES = [
    (sq, sk, d, feats, FA_HEADS[i % 3])
    for i, ((sq, sk), d, feats) in enumerate(
        itertools.product(FA_SEQLENS, FA_HEADDIMS, FA_FEATURES)
    )
]


def fa_case(sq, sk, d, feats, heads, dtype=np.float64) -> tuple[Case, int]:
    """A case as FlashAttention's tests draw it: (B, h) heads, bottom-right causal and local
    windows, ALiBi slopes, a softcap, learnable sinks; k and v with h_k heads."""
    causal, local, alibi, cap, sinks = feats
    rng = np.random.default_rng(sq * 7919 + sk * 31 + d)
    b = 2 if sq * sk <= 256 * 512 else 1
    h = 4
    hk = {"mha": 4, "mqa": 1, "gqa": 2}[heads]
    q = rng.normal(size=(b, h, sq, d))
    if cap:  # scores spread over the cap's range, so that it bends them (as FlashAttention 3)
        q *= 15.0 / 4
    k, v = (rng.normal(size=(b, hk, sk, d)) for _ in range(2))
    c = Case(
        q=q.astype(dtype), k=k.astype(dtype), v=v.astype(dtype), scale=d**-0.5,
        causal=causal, bottom_right=True,
    )  # fmt: skip
    if local:
        left, right = (int(x) for x in rng.integers(0, sk, size=2))
        c.window = (left, 0 if causal else right)
    if alibi:
        c.slopes = rng.uniform(0, 1, size=(b, h)) * 0.3
    if cap:
        c.softcap = 15.0
    if sinks:
        c.sinks = rng.normal(size=h)
    return c, h // hk


def _grouped(c: Case, group: int) -> Case:
    """The case with k and v repeated over each group of query heads (GQA, MQA)."""
    if group == 1:
        return c
    out = Case(**{**c.__dict__})
    out.k, out.v = (np.repeat(a, group, axis=1) for a in (c.k, c.v))
    return out


def _torch_reference(torch, c: Case, group: int, g=None):
    """(output, lse, and with g the gradients of q, k, v) by torch autograd, k and v grouped
    inside the graph so their gradients sum over the group as in FlashAttention."""
    t = {n: torch.tensor(getattr(c, n), requires_grad=g is not None) for n in ("q", "k", "v")}
    rep = {
        "q": t["q"],
        "k": t["k"].repeat_interleave(group, dim=1),
        "v": t["v"].repeat_interleave(group, dim=1),
    }
    if c.sinks is not None:
        rep["sinks"] = torch.tensor(c.sinks.astype(c.q.dtype))
    out, lse = torch_variant(torch, c, rep)
    if g is None:
        return out.detach().numpy(), lse.detach().numpy()
    out.backward(torch.tensor(g))
    return out.detach().numpy(), lse.detach().numpy(), [t[n].grad.numpy() for n in "qkv"]


@pytest.mark.oracle
@pytest.mark.parametrize("case", rotation(FA_CASES, 6, _small), ids=str)
def test_flash_attention_grid_float64(torch, case):
    c, group = fa_case(*case)
    wide = _grouped(c, group)
    rng = np.random.default_rng(0)
    g = rng.normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    out_ref, lse_ref, grads_ref = _torch_reference(torch, c, group, g)
    for method in ("dense", "blockwise"):
        out, lse = al.attention(
            wide.q, wide.k, wide.v, masks_of(wide), scale=c.scale, softcap=c.softcap,
            sinks=c.sinks, return_lse=True, fully_masked="zero", method=method,
        )  # fmt: skip
        np.testing.assert_allclose(out, out_ref, **F64)
        np.testing.assert_allclose(lse, lse_ref, **F64)
        grads = al.attention_backward(
            wide.q, wide.k, wide.v, g, masks_of(wide), scale=c.scale, softcap=c.softcap,
            sinks=c.sinks, fully_masked="zero", method=method,
        )  # fmt: skip
        grads = [grads[0]] + [
            a.reshape(a.shape[0], -1, group, *a.shape[2:]).sum(2) for a in grads[1:]
        ]
        for name, a, b in zip("qkv", grads, grads_ref, strict=True):
            np.testing.assert_allclose(a, b, **GRAD, err_msg=f"d{name} {method}")


def _rule(got, plain, ref, rtol: float, extra: float = 0.0) -> tuple[float, bool]:
    """FlashAttention's check of one tensor: |got - ref| at most rtol times the plain float32
    formula's |plain - ref|, plus twice the rounding of ref itself (ref + 0.3 - 0.3 in float32)
    and ``extra``. Returns ((error - allowance) / plain error, whether it passes)."""
    ref32 = ref.astype(np.float32)
    atol = 2 * float(np.abs((ref32 + np.float32(0.3) - np.float32(0.3)) - ref).max()) + extra
    err, err_plain = float(np.abs(got - ref).max()), float(np.abs(plain - ref).max())
    ok = err <= rtol * err_plain + atol
    ratio = (err - atol) / err_plain if err_plain else (0.0 if ok else np.inf)
    return ratio, ok


def flash_rule_checks(torch, case, method: str, grads: bool = True) -> list:
    """[(name, ratio, passed)] for the output and, with ``grads``, dq, dk, dv of one float32
    case: FlashAttention 3's rule (hopper/test_flash_attn.py, test_flash_attn_output): rtol 2,
    3 with a softcap; atol twice the reference's own float32 rounding, for the gradients plus
    3e-4 with a softcap. k and v gradients are summed over each group of query heads."""
    c, group = fa_case(*case, dtype=np.float32)
    for name in ("slopes", "sinks"):  # every input as float32 holds it, the reference's too
        if getattr(c, name) is not None:
            setattr(c, name, getattr(c, name).astype(np.float32).astype(np.float64))
    c64 = Case(**{**c.__dict__, **{n: getattr(c, n).astype(np.float64) for n in "qkv"}})
    wide = _grouped(c, group)
    sinks = None if c.sinks is None else c.sinks.astype(np.float32)
    rtol = 2.0 if c.softcap is None else 3.0
    kw = dict(scale=c.scale, softcap=c.softcap, sinks=sinks, fully_masked="zero", method=method)
    out = al.attention(wide.q, wide.k, wide.v, masks_of(wide), **kw)
    if not grads:
        ref, _ = _torch_reference(torch, c64, group)
        plain, _ = _torch_reference(torch, c, group)
        return [("out", *_rule(out, plain, ref, rtol))]
    g = np.random.default_rng(1).normal(size=out.shape).astype(np.float32)
    ref, _, grads_ref = _torch_reference(torch, c64, group, g.astype(np.float64))
    plain, _, grads_plain = _torch_reference(torch, c, group, g)
    got = al.attention_backward(wide.q, wide.k, wide.v, g, masks_of(wide), **kw)
    got = [got[0]] + [a.reshape(a.shape[0], -1, group, *a.shape[2:]).sum(2) for a in got[1:]]
    extra = 0.0 if c.softcap is None else 3e-4
    checks = [("out", *_rule(out, plain, ref, rtol))]
    for name, a, p, r in zip(("dq", "dk", "dv"), got, grads_plain, grads_ref, strict=True):
        checks.append((name, *_rule(a, p, r, rtol, extra)))
    return checks


@pytest.mark.oracle
@pytest.mark.parametrize("case", rotation(FA_CASES, 4, _small), ids=str)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_flash_attention_grid_float32_rule(torch, case, method):
    failed = [
        check for check in flash_rule_checks(torch, case, method, grads=False) if not check[2]
    ]
    assert not failed, failed


@pytest.mark.oracle
@pytest.mark.parametrize("case", rotation(FA_CASES[1::2], 4, _small), ids=str)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_flash_attention_grid_float32_gradient_rule(torch, case, method):
    """The output and dq, dk, dv of a float32 case (another sample than the output's)."""
    failed = [check for check in flash_rule_checks(torch, case, method) if not check[2]]
    assert not failed, failed


# Cases the whole float32 grid failed (benchmarks/flash_grid_sweep.py), run in every default
# run: one key per row (dq exactly 0 in exact arithmetic and in torch's float32, so the rule
# allows no error), three keys (the backward's row term rounded apart from dP).
FA_FOUND = [
    (1, 1, 32, (False, False, False, False, False), "mha"),
    (239, 1, 64, (True, True, False, False, False), "mqa"),
    (799, 3, 128, (True, False, False, False, False), "mha"),
    (799, 3, 160, (False, True, False, False, False), "mha"),
]


@pytest.mark.oracle
@pytest.mark.parametrize("case", FA_FOUND, ids=str)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_flash_attention_grid_float32_found_cases(torch, case, method):
    failed = [check for check in flash_rule_checks(torch, case, method) if not check[2]]
    assert not failed, failed


OVERFLOW = list(itertools.product([1, 2, 5, 17, 128], [16, 32, 64], [False, True]))


@pytest.mark.oracle
@pytest.mark.parametrize("seqlen, d, causal", OVERFLOW if FULL else OVERFLOW[::6], ids=str)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_flash_attention_overflow_cases_float32(torch, seqlen, d, causal, method):
    """``test_flash_attn_bwd_overflow``'s inputs (q · 5, k and v · 3, 5 heads), float32:
    output and gradients within twice the plain float32 implementation's error."""
    rng = np.random.default_rng(seqlen * 100 + d)
    q = (rng.normal(size=(2, 5, seqlen, d)) * 5).astype(np.float32)
    k, v = ((rng.normal(size=(2, 5, seqlen, d)) * 3).astype(np.float32) for _ in range(2))
    g = rng.normal(size=(2, 5, seqlen, d)).astype(np.float32)
    c = Case(q=q, k=k, v=v, scale=d**-0.5, causal=causal)
    c64 = Case(**{**c.__dict__, "q": q.astype(float), "k": k.astype(float), "v": v.astype(float)})
    out64, _, grads64 = _torch_reference(torch, c64, 1, g.astype(float))
    out32, _, grads32 = _torch_reference(torch, c, 1, g)
    out = al.attention(q, k, v, masks_of(c), method=method)
    grads = al.attention_backward(q, k, v, g, masks_of(c), method=method)
    assert np.abs(out - out64).max() <= 2 * np.abs(out32 - out64).max()
    for a, b32, b64 in zip(grads, grads32, grads64, strict=True):
        # FlashAttention's gradient rule: 5x the plain error, plus 1e-3 (a single key's
        # gradient is 0 in exact arithmetic, so the plain error may be exactly 0).
        assert np.abs(a - b64).max() <= 5 * np.abs(b32 - b64).max() + 1e-3


# -- PyTorch SDPA -------------------------------------------------------------------------------
SDPA_CASES = list(
    itertools.product(
        [1, 8],  # batch
        [4, 8, 64, 143, 256, 512],  # seq_len_q
        [4, 8, 64, 128, 256, 587],  # seq_len_k
        [8, 16, 32, 64, 72, 96, 128],  # head_dim
        [False, True],  # is_causal
        ["none", "bool", "float"],  # attn_mask
    )
)


@pytest.mark.oracle
@pytest.mark.parametrize("case", rotation(SDPA_CASES, 8), ids=str)
def test_sdpa_math_grid(torch, case):
    """PyTorch's math backend (float64) is the reference; SDPA's signature on both sides."""
    b, sq, sk, d, causal, kind = case
    rng = np.random.default_rng(sq + 10 * sk + d)
    q, k, v = (rng.normal(size=(b, 2, n, d)) for n in (sq, sk, sk))
    mask = None
    if kind == "bool" and not causal:
        mask = rng.random((sq, sk)) < 0.8
        mask[:, 0] = True
    elif kind == "float" and not causal:
        mask = rng.normal(size=(b, 1, sq, sk))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=None if mask is None else torch.tensor(mask), is_causal=causal
    )
    g = rng.normal(size=want.shape)
    want.backward(torch.tensor(g))
    got = al.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    np.testing.assert_allclose(got, want.detach().numpy(), **F64)
    mask_spec = al.masks.Causal() if causal else mask
    grads = al.attention_backward(q, k, v, g, mask_spec, method="blockwise", block_size=64)
    for a, t in zip(grads, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(a, t.grad.numpy(), **GRAD)


# -- JAX ----------------------------------------------------------------------------------------
JAX_MODES = ["none", "causal", "padding", "sliding_window", "bias", "causal+padding",
             "bias+causal", "causal+sliding_window"]  # fmt: skip
JAX_CASES = list(itertools.product(JAX_MODES, [1, 2], [np.float32, np.float64]))


@pytest.mark.jax
@pytest.mark.parametrize("mode, groups, dtype", rotation(JAX_CASES, 4), ids=str)
def test_jax_nn_attention_cases(jax_x64, mode, groups, dtype):
    """``nn_test``'s shapes (B, T, S, N, H) = (2, 16, 16, 4, 32) with K/V heads N/groups; JAX's
    own result the reference (its softmax runs in float32: F32's tolerance), and the same case
    by the torch-free loop of ``variant_refs``' formula at float64's."""
    jax = jax_x64
    rng = np.random.default_rng(len(mode) + groups)
    B, T, S, N, H = 2, 16, 16, 4, 32
    q = rng.normal(size=(B, N, T, H)).astype(dtype)
    k, v = (rng.normal(size=(B, N // groups, S, H)).astype(dtype) for _ in range(2))
    kw, c = {}, Case(q=q, k=np.repeat(k, groups, 1), v=np.repeat(v, groups, 1), scale=H**-0.5)
    if "causal" in mode:
        kw["is_causal"], c.causal = True, True
    if "padding" in mode:
        lengths = np.array([S - 3, S // 2], np.int32)
        kw["key_value_seq_lengths"], c.lengths = lengths, tuple(int(x) for x in lengths)
    if "sliding_window" in mode:
        kw["local_window_size"], c.window = (3, 2), (3, 0 if c.causal else 2)
    if "bias" in mode:
        c.bias = rng.normal(size=(B, N, T, S)).astype(dtype)
        kw["bias"] = np.swapaxes(c.bias, 1, 2).swapaxes(1, 2)
    jq, jk, jv = (np.swapaxes(a, 1, 2) for a in (q, k, v))  # JAX's (B, T, N, H)
    want = np.swapaxes(np.asarray(jax.nn.dot_product_attention(jq, jk, jv, **kw)), 1, 2)
    got = al.attention(c.q, c.k, c.v, masks_of(c), scale=c.scale)
    np.testing.assert_allclose(got, want, **F32)
    if dtype == np.float64:
        np.testing.assert_allclose(got, loop_variant(c)[0], **F64)
