"""The blockwise backward pass (kernels/blockwise_backward.py) against dense and torch at its edges.

What its design makes fragile, case by case: the exact sweep it falls back to when a row sum
against a base of 0 leaves the safe range (huge scales, scores of ±1e4 in float64, ±60..±130
log2 units in float32, rows that need it beside rows that do not); tiles kept between sweeps
or recomputed (the byte cap); masked tiles skipped, cut into strips, or multiplied by 0 (keys
no query sees must get gradients of exactly 0); large finite negative biases; broadcast lead
axes; tiny and odd tiles; threads; and errors, which must be the forward pass's, word for word.

Near-one-hot rows make the true dq and dk tiny beside the terms they cancel from, so gradients
are compared against an error scale: each gradient's formula with every term made positive,
times 1 + the largest |score| (log2 units) of a pair with weight, as rounding in a score grows
with it. A wrong term or a lost tile is an error of the order of that scale itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import as_mask
from attnlab.kernels import blockwise_backward
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64

LOG2E = 1.4426950408889634
# Relative to the error scale (see the module docstring). Measured on these cases: blockwise
# stays within 3e-16 (float64, against dense) and 7e-8 (float32, against float64 autograd).
SCALED = {np.float64: 1e-13, np.float32: 5e-6}
# The (block_size, threads) pairs each case runs with: single rows and keys, odd sizes, a
# query block taller than the inputs, unequal pairs.
TILINGS = [(1, 1), (3, 2), (7, 1), (130, 2), ((5, 11), 2), (None, 2)]


def _swap(a):
    return np.swapaxes(a, -1, -2)


def _lead(q, k, v) -> tuple[int, ...]:
    return np.broadcast_shapes(np.shape(q)[:-2], np.shape(k)[:-2], np.shape(v)[:-2])


def _error_scales(q, k, v, g, mask, scale) -> tuple[float, float, float]:
    """(dq, dk, dv)'s error scales, in float64 (see the module docstring)."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    n, m, lead = q.shape[-2], k.shape[-2], _lead(q, k, v)
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ _swap(k) * c
    if mask is not None:
        s = s + as_mask(mask).additive(n, m, lead_ndim=len(lead))
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    grow = 1 + LOG2E * float(np.abs(s[p > 0]).max())
    adp = np.abs(g) @ _swap(np.abs(v))  # |dO| |V|ᵀ
    ads = p * (adp + (p * adp).sum(-1, keepdims=True))  # |dS| bound
    terms = (ads @ np.abs(k) * abs(c), _swap(ads) @ np.abs(q) * abs(c), _swap(p) @ np.abs(g))
    return tuple(float(t.max()) * grow for t in terms)


def _assert_scaled(got, want, scales, dtype) -> None:
    for a, b, s in zip(got, want, scales, strict=True):
        assert a.shape == b.shape and a.dtype == np.dtype(dtype)
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=0, atol=SCALED[dtype] * max(s, 1e-300))


def _backward(q, k, v, g, mask=None, scale=None, method="blockwise", block=None, threads=1):
    return al.attention_backward(
        q, k, v, g, mask, scale=scale, method=method, block_size=block, threads=threads
    )


def _autograd(torch, q, k, v, g, mask, scale):
    """(dq, dk, dv) from float64 autograd through softmax(q kᵀ · scale + mask) v."""
    tq, tk, tv = (torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (q, k, v))
    c = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = tq @ tk.transpose(-1, -2) * c
    if mask is not None:
        n, m = q.shape[-2], k.shape[-2]
        s = s + torch.tensor(as_mask(mask).additive(n, m, lead_ndim=len(_lead(q, k, v))))
    out = torch.softmax(s, dim=-1) @ tv
    out.backward(torch.tensor(np.asarray(g, np.float64)))
    return tuple(t.grad.numpy() for t in (tq, tk, tv))


def _mask(kind: str, rng, lead, n: int, m: int, dtype):
    """A mask of each kind, leaving every row at least one key (N <= M for the banded ones)."""
    keep_one = (np.arange(n), rng.integers(0, m, size=n))
    if kind == "none":
        return None
    if kind == "causal":
        return Causal()
    if kind == "bottom_right":
        return Causal(align="bottom_right")
    if kind == "window":
        return SlidingWindow(int(rng.integers(1, 6)), align="bottom_right")
    if kind == "padding+causal":
        return Padding(rng.integers(n, m + 1, size=lead[0]).tolist()) + Causal()
    if kind == "bool":
        allowed = rng.random((n, m)) < 0.4
        allowed[keep_one] = True
        return Dense(allowed)
    if kind in ("bias-1e30", "bias-1e4"):  # large finite negatives: weight ~0, not blocked
        big = -1e30 if kind == "bias-1e30" else -1e4
        bias = np.where(rng.random((n, m)) < 0.5, big, rng.normal(size=(n, m)))
        bias[keep_one] = 0.0
        return Dense(bias.astype(dtype))
    if kind == "shift-1e4":  # every key of a row shifted by the same -1e4: softmax unchanged
        return Dense(np.full((n, 1), -1e4, dtype))
    raise AssertionError(kind)


KINDS = [
    "none",
    "causal",
    "bottom_right",
    "window",
    "padding+causal",
    "bool",
    "bias-1e30",
    "bias-1e4",
    "shift-1e4",
]


# -- huge and tiny scales: the exact sweep, whole blocks or some rows of one ---------------------


@pytest.mark.parametrize("scale", [1e-6, 30.0, 1000.0])
@pytest.mark.parametrize("kind", KINDS)
def test_float64_any_scale_matches_dense(kind, scale):
    rng = np.random.default_rng(KINDS.index(kind) * 7 + int(scale) % 97)
    lead, n, m, d_k, d_v = (2,), 29, 37, 5, 3
    q = rng.normal(size=(*lead, n, d_k)) * 3  # scale 1000: scores of several 1e3..1e4
    k, v = rng.normal(size=(m, d_k)), rng.normal(size=(*lead, m, d_v))
    g = rng.normal(size=(*lead, n, d_v))
    g[0, ::4] = 0.0  # rows with no upstream gradient
    mask = _mask(kind, rng, lead, n, m, np.float64)
    dense = _backward(q, k, v, g, mask, scale, method="dense")
    scales = _error_scales(q, k, v, g, mask, scale)
    for block, threads in TILINGS:
        got = _backward(q, k, v, g, mask, scale, block=block, threads=threads)
        _assert_scaled(got, dense, scales, np.float64)


def _rows_at(rng, n: int, d_k: int, m: int, target: float, dtype):
    """q, k whose scores reach ±target (log2 units, scale 1) in every other row, with the rows
    between at ordinary sizes: one block may hold rows for both sweeps."""
    q, k = rng.normal(size=(n, d_k)), rng.normal(size=(m, d_k))
    peak = np.abs(q @ k.T).max(axis=1, keepdims=True)
    sign = rng.choice([-1.0, 1.0], size=(n, 1))
    factor = np.where(np.arange(n)[:, None] % 2 == 0, target / LOG2E / peak, 1.0) * sign
    return (q * factor).astype(dtype), k.astype(dtype)


# float32: the base of 0 is safe while a row sum is in [2^-16, 2^64]; float64: [2^-128, 2^512].
TARGETS = [(np.float32, t) for t in (10, 60, 66, 80, 100, 120, 127, 130, 1e4)] + [
    (np.float64, t) for t in (500, 511, 513, 1e4)
]


@pytest.mark.parametrize(("dtype", "target"), TARGETS)
@pytest.mark.parametrize("kind", ["none", "bottom_right", "bool", "bias-1e30"])
def test_extreme_scores_match_autograd(torch, dtype, target, kind):
    rng = np.random.default_rng(int(target) + len(kind))
    n, m, d_k, d_v = 23, 31, 3, 4
    q, k = _rows_at(rng, n, d_k, m, target, dtype)
    v, g = (rng.normal(size=(x, d_v)).astype(dtype) for x in (m, n))
    mask = _mask(kind, rng, (), n, m, dtype)
    want = _autograd(torch, q, k, v, g, mask, 1.0)
    scales = _error_scales(q, k, v, g, mask, 1.0)
    for block, threads in TILINGS:
        got = _backward(q, k, v, g, mask, 1.0, block=block, threads=threads)
        _assert_scaled(got, want, scales, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_fully_shifted_row_matches_autograd(torch, dtype):
    # -1e4 on every key of some rows: exp2 of every score underflows against a base of 0, so
    # those rows take the exact sweep; the answer is the unshifted one.
    rng = np.random.default_rng(3)
    n, m = 40, 50
    q, k = rng.normal(size=(2, n, 4)).astype(dtype), rng.normal(size=(2, m, 4)).astype(dtype)
    v, g = rng.normal(size=(2, m, 3)).astype(dtype), rng.normal(size=(2, n, 3)).astype(dtype)
    shift = np.where(np.arange(n)[:, None] % 3 == 0, -1e4, 0.0).astype(dtype)
    mask = Dense(shift) + Causal(align="bottom_right")
    want = _autograd(torch, q, k, v, g, Causal(align="bottom_right"), None)  # shift-free
    scales = _error_scales(q, k, v, g, mask, None)  # its 1 + 1e4 · log2 e: float32's rounding
    for block, threads in TILINGS:
        got = _backward(q, k, v, g, mask, block=block, threads=threads)
        _assert_scaled(got, want, scales, dtype)


# -- kept tiles, recomputed tiles, strips ---------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 4096, None, 2**40])
@pytest.mark.parametrize("kind", ["none", "causal", "bottom_right", "padding+causal", "bias-1e4"])
def test_kept_and_recomputed_tiles_match_dense(monkeypatch, keep, kind):
    # The byte cap decides which tiles sweep B2 recomputes: none (2**40), some, or all (0).
    # N = 300 under the default 512-row blocks: halved blocks, causal strips.
    if keep is not None:
        monkeypatch.setattr(blockwise_backward, "_KEEP_BYTES", keep)
    rng = np.random.default_rng(len(kind))
    lead, n, m = (2,), 300, 310
    for dtype in (np.float64, np.float32):
        q = rng.normal(size=(*lead, n, 16)).astype(dtype)
        k = rng.normal(size=(*lead, m, 16)).astype(dtype)
        v, g = (rng.normal(size=(*lead, x, 8)).astype(dtype) for x in (m, n))
        mask = _mask(kind, rng, lead, n, m, dtype)
        dense = _backward(q, k, v, g, mask, method="dense")
        tol = BLOCKWISE_F64 if dtype == np.float64 else BLOCKWISE_F32
        for block in (None, (64, 48), (300, 7)):
            got = _backward(q, k, v, g, mask, block=block, threads=2)
            for a, b in zip(got, dense, strict=True):
                assert a.dtype == b.dtype
                np.testing.assert_allclose(a, b, rtol=0, atol=tol["atol"] * max(1, np.abs(b).max()))


@pytest.mark.parametrize("keep", [0, None])
def test_large_values_beside_large_scores_match_autograd(torch, monkeypatch, keep):
    # float32, scores of ~60 log2 units: the base of 0 is safe for the row sums (2^60), but a
    # tile's p V (2^60 · 1e21) overflows where sweep B2 recomputes it: the exact sweep must
    # take over.
    monkeypatch.setattr(blockwise_backward, "_KEEP_BYTES", 32 * 2**20 if keep is None else keep)
    rng = np.random.default_rng(4)
    n, m = 20, 24
    q, k = _rows_at(rng, n, 3, m, 60.0, np.float32)
    v = (rng.normal(size=(m, 2)) * 1e21).astype(np.float32)
    g = rng.normal(size=(n, 2)).astype(np.float32)
    want = _autograd(torch, q, k, v, g, None, 1.0)
    scales = _error_scales(q, k, v, g, None, 1.0)
    for block, threads in TILINGS:
        got = _backward(q, k, v, g, None, 1.0, block=block, threads=threads)
        _assert_scaled(got, want, scales, np.float32)


# -- keys no query may see ------------------------------------------------------------------------


def _unseen_cases(rng, n: int, m: int, dtype):
    """(mask, per batch element the keys it blocks for every query)."""
    allowed = rng.random((n, m)) < 0.5
    allowed[:, [2, m - 3]] = False
    allowed[:, 0] = True
    cols = [[2, m - 3]] * 2
    tail = list(range(n, m))
    return [
        (Causal(), [tail, tail]),
        (Padding([4, 7]), [list(range(4, m)), list(range(7, m))]),
        (Padding([4, 7]) + Causal(), [list(range(4, m)), list(range(7, m))]),
        (SlidingWindow(3, align="bottom_right"), [list(range(m - n - 2))] * 2),
        (Dense(allowed), cols),
        (Dense(np.where(allowed, 0.0, -np.inf).astype(dtype)), cols),
        (Dense(np.where(allowed, 0.0, np.finfo(dtype).min).astype(dtype)), cols),
    ]


@pytest.mark.parametrize("scale", [1.0, 1000.0])  # the fast sweep, and the exact one
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_keys_no_query_sees_get_exactly_zero(dtype, scale):
    rng = np.random.default_rng(5)
    n, m = 9, 14
    q = (rng.normal(size=(2, n, 5)) * 3).astype(dtype)
    k = rng.normal(size=(2, m, 5)).astype(dtype)
    v, g = (rng.normal(size=(2, x, 3)).astype(dtype) for x in (m, n))
    for mask, unseen in _unseen_cases(rng, n, m, dtype):
        for block, threads in TILINGS:
            _, dk, dv = _backward(q, k, v, g, mask, scale, block=block, threads=threads)
            for b in range(2):
                assert not dk[b, unseen[b]].any(), (mask, block)
                assert not dv[b, unseen[b]].any(), (mask, block)
                seen = np.setdiff1d(np.arange(m), unseen[b])
                assert dv[b, seen].any()  # the test is not vacuous


# -- errors: the forward pass's, word for word ----------------------------------------------------


def _outcome(fn):
    try:
        fn()
    except al.AttnlabError as exc:
        return type(exc), str(exc)
    return None


def _empty_row_masks(n: int, m: int, dtype):
    allowed = np.ones((n, m), bool)
    allowed[4] = False
    last_block = np.ones((n, m), bool)
    last_block[-3:] = False  # a whole query block with no tile to visit
    additive = np.zeros((n, m), dtype)
    additive[n - 1] = -np.inf
    lowest = np.zeros((n, m), dtype)
    lowest[2] = np.finfo(dtype).min  # the finfo.min idiom blocks as -inf does
    return [
        Padding([0, m]),
        Padding([m, 0]) + Causal(),
        Dense(allowed),
        Dense(last_block),
        Dense(additive),
        Dense(lowest),
        Causal() + Dense(~np.tril(np.ones((n, m), bool))),
        SlidingWindow(2, align="bottom_right"),  # N > M: the first rows see nothing
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fully_masked_rows_raise_the_forward_error(dtype):
    rng = np.random.default_rng(6)
    n, m = 9, 9
    q = rng.normal(size=(2, n, 4)).astype(dtype)
    q[1, ::2] *= 400  # rows whose scores need the exact sweep, beside the empty ones
    k = rng.normal(size=(2, m, 4)).astype(dtype)
    v, g = (rng.normal(size=(2, x, 3)).astype(dtype) for x in (m, n))
    for mask in _empty_row_masks(n, m, dtype):
        kk, vv = (k[:, :5], v[:, :5]) if isinstance(mask, SlidingWindow) else (k, v)
        want = _outcome(lambda mask=mask, kk=kk, vv=vv: al.attention(q, kk, vv, mask))
        assert want is not None and want[0] is al.FullyMaskedRowError
        for block, threads in TILINGS:
            got = _outcome(
                lambda mask=mask, kk=kk, vv=vv, block=block, threads=threads: _backward(
                    q, kk, vv, g, mask, block=block, threads=threads
                )
            )
            assert got == want, (mask, block)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_inputs_and_overflowing_scores_raise(dtype):
    rng = np.random.default_rng(8)
    base = {x: rng.normal(size=(2, 6, 4)).astype(dtype) for x in "qkvg"}
    big = np.sqrt(np.finfo(dtype).max) * 4
    cases = [(name, bad) for name in "qkvg" for bad in (np.nan, np.inf, -np.inf)]
    cases += [("overflow", None)]
    for name, bad in cases:
        a = {x: y.copy() for x, y in base.items()}
        if name == "overflow":
            a["q"][0, 0, 0] = a["k"][0, 0, 0] = big  # finite inputs, a score past the range
        else:
            a[name][1, 2, 0] = bad
        dense = _outcome(lambda a=a: _backward(a["q"], a["k"], a["v"], a["g"], method="dense"))
        assert dense is not None and dense[0] is al.NonFiniteInputError
        for block, threads in TILINGS:
            tiled = _outcome(
                lambda a=a, block=block, threads=threads: _backward(
                    a["q"], a["k"], a["v"], a["g"], Causal(), block=block, threads=threads
                )
            )
            assert tiled is not None and tiled[0] is al.NonFiniteInputError, (name, bad, block)
            if name != "g":  # the forward pass refuses the same inputs with the same words
                assert tiled == _outcome(lambda a=a: al.attention(a["q"], a["k"], a["v"]))


# -- shapes: lead axes broadcast, N != M, d_k != d_v, sizes of 1 ----------------------------------

SHAPES = [
    # q's, k's and v's leading axes
    ((2, 3), (1, 3), ()),
    ((2, 3), (), (3,)),
    ((1, 3), (2, 1), (2, 3)),
    ((2, 1), (1, 3), (1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("q_lead", "k_lead", "v_lead"), SHAPES)
def test_broadcast_lead_axes_match_autograd(torch, dtype, q_lead, k_lead, v_lead):
    rng = np.random.default_rng(len(q_lead + k_lead + v_lead))
    n, m, d_k, d_v = 19, 26, 6, 2
    lead = np.broadcast_shapes(q_lead, k_lead, v_lead)
    q = rng.normal(size=(*q_lead, n, d_k)).astype(dtype)
    k = rng.normal(size=(*k_lead, m, d_k)).astype(dtype)
    v = rng.normal(size=(*v_lead, m, d_v)).astype(dtype)
    g = rng.normal(size=(*lead, n, d_v)).astype(dtype)
    bias = rng.normal(size=(lead[-1], 1, m)) * 2
    bias[..., rng.random(m) < 0.3] = -np.inf
    bias[..., -1] = 0.0
    allowed = rng.random((lead[0], 1, n, m)) < 0.5
    allowed[..., np.arange(n), np.arange(n) + m - n] = True  # the bottom-right diagonal
    masks = [
        None,
        Dense(bias.astype(dtype)) + Causal(align="bottom_right"),
        Dense(allowed),
        SlidingWindow(4, align="bottom_right") + Dense(allowed),
    ]
    if q_lead[0] == lead[0]:  # Padding's lengths index q's first axis
        masks.append(Padding(rng.integers(1, m + 1, size=lead[0]).tolist()))
    for mask in masks:
        want = _autograd(torch, q, k, v, g, mask, None)
        scales = _error_scales(q, k, v, g, mask, None)
        for block, threads in TILINGS[:4]:
            got = _backward(q, k, v, g, mask, block=block, threads=threads)
            _assert_scaled(got, want, scales, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sizes_of_one_and_single_key_rows_match_dense(dtype):
    rng = np.random.default_rng(9)
    n, m = 17, 21
    q = rng.normal(size=(2, 3, n, 5)).astype(dtype)
    k = rng.normal(size=(1, 3, m, 5)).astype(dtype)
    v, g = rng.normal(size=(m, 4)).astype(dtype), rng.normal(size=(2, 3, n, 4)).astype(dtype)
    cases = [
        (q[..., :1, :], k, v, g[..., :1, :], None),  # N = 1
        (q, k[..., :1, :], v[:1], g, None),  # M = 1
        (q[..., :1, :], k[..., :1, :], v[:1], g[..., :1, :], Causal()),  # N = M = 1
        (q, k, v, g, SlidingWindow(1)),  # one key per row: dq = 0
        (q, k, v, g, SlidingWindow(1, align="bottom_right")),
        (q, k, v, g, Padding([1, 2])),
        (q[..., :1], k[..., :1], v[:, :1], g[..., :1], Causal()),  # d_k = d_v = 1
    ]
    for scale in (None, 1000.0):
        for qq, kk, vv, gg, mask in cases:
            dense = _backward(qq, kk, vv, gg, mask, scale, method="dense")
            scales = _error_scales(qq, kk, vv, gg, mask, scale)
            for block, threads in TILINGS:
                got = _backward(qq, kk, vv, gg, mask, scale, block=block, threads=threads)
                _assert_scaled(got, dense, scales, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_upstream_gradients_zero_negative_and_large_match_dense(dtype):
    rng = np.random.default_rng(10)
    n, m = 33, 40
    q = rng.normal(size=(2, n, 4)).astype(dtype)
    k, v = rng.normal(size=(2, m, 4)).astype(dtype), rng.normal(size=(2, m, 3)).astype(dtype)
    g = rng.normal(size=(2, n, 3))
    for up in (np.zeros_like(g), -np.abs(g) * 1e6, np.where(rng.random((2, n, 1)) < 0.5, g, 0)):
        up = up.astype(dtype)
        for mask in (None, Causal(align="bottom_right")):
            dense = _backward(q, k, v, up, mask, method="dense")
            scales = _error_scales(q, k, v, up, mask, None)
            for block, threads in TILINGS:
                got = _backward(q, k, v, up, mask, block=block, threads=threads)
                _assert_scaled(got, dense, scales, dtype)
                if not up.any():
                    assert not any(x.any() for x in got)


def _near_the_ends(magnitude: str, dtype, rng):
    """q, k, v, dO whose rows sum far from 1 against the base of 0, with dO near an end of
    dtype's range: scores of 40 and a tiny dO, or scores near -10.5 over two keys and a huge
    dO."""
    finfo = np.finfo(dtype)
    if magnitude == "tiny":
        n, d = 64, 8
        q, k, v = rng.normal(size=(n, d)), rng.normal(size=(n, d)), rng.normal(size=(n, d))
        q *= 40.0 / (q @ k.T / np.sqrt(d)).max(axis=1, keepdims=True)
        size = float(finfo.tiny) * 2.0**12
    else:
        n, d = 16, 1
        q, k = np.ones((n, d)), np.array([[-10.4], [-10.5]])
        v = rng.normal(size=(2, 3))
        size = float(finfo.max) / 2.0**8
    g = rng.choice([-1.0, 1.0], size=(n, v.shape[1])) * size * rng.uniform(0.5, 1.0, (n, 1))
    return [a.astype(dtype) for a in (q, k, v, g)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("magnitude", ["tiny", "huge"])
def test_upstream_gradients_near_the_ends_of_the_range_match_autograd(torch, dtype, magnitude):
    # Found by this file's search: with row sums far from 1 against the base of 0, the fast
    # sweep's dO / l went subnormal (a tiny dO: half its value lost) or overflowed (a huge one:
    # NaN). Such rows now take the exact sweep, as accurate as the dense path.
    args = _near_the_ends(magnitude, dtype, np.random.default_rng(12))
    scale = None if magnitude == "tiny" else 1.0
    want = _autograd(torch, *args, None, scale)
    dense = _backward(*args, scale=scale, method="dense")
    for block, threads in TILINGS[:3]:
        got = _backward(*args, scale=scale, block=block, threads=threads)
        for a, b, c in zip(got, dense, want, strict=True):
            assert np.isfinite(a).all()
            # No worse than the dense path against the float64 oracle (plus a little).
            err = np.abs(a - c).max()
            assert err <= 2 * np.abs(b - c).max() + 1e-6 * np.abs(c).max(), err


# -- layouts, dtypes, threads ---------------------------------------------------------------------


def test_views_integers_and_mixed_dtypes_match_dense():
    rng = np.random.default_rng(11)
    q = rng.normal(size=(8, 20)).T[:, ::2]  # (20, 4), strided
    k = np.asfortranarray(rng.normal(size=(25, 4)))
    v = rng.normal(size=(3, 25))[:, ::-1].T  # (25, 3), negative strides
    g = rng.normal(size=(3, 20)).T
    ints = rng.integers(-3, 4, size=(20, 4)), rng.integers(-3, 4, size=(25, 4))
    cases = [
        (q, k, v, g),
        (*ints, v, g),  # integers compute in float64
        tuple(a.astype(np.float16) for a in (q, k, v, g)),  # float16 computes in float32
        (q.astype(np.float32), k, v, g),  # float64 wins
        (q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), g),  # g cast to f32
    ]
    mask = Causal(align="bottom_right")
    for qq, kk, vv, gg in cases:
        dense = _backward(qq, kk, vv, gg, mask, method="dense")
        dtype = dense[0].dtype.type
        scales = _error_scales(qq, kk, vv, gg, mask, None)
        for block, threads in TILINGS:
            got = _backward(qq, kk, vv, gg, mask, block=block, threads=threads)
            _assert_scaled(got, dense, scales, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_threads_on_small_tiles_match_dense(dtype):
    # Many work items racing for the dK / dV locks: 16 lead elements, 3 x 2 tiles, a k shared
    # by every lead element.
    rng = np.random.default_rng(12)
    q = rng.normal(size=(16, 50, 4)).astype(dtype)
    k = rng.normal(size=(1, 60, 4)).astype(dtype)
    v, g = rng.normal(size=(60, 3)).astype(dtype), rng.normal(size=(16, 50, 3)).astype(dtype)
    mask = Causal(align="bottom_right")
    dense = _backward(q, k, v, g, mask, method="dense")
    scales = _error_scales(q, k, v, g, mask, None)
    for threads in (1, 2, 3, 8):
        for _ in range(2):
            got = _backward(q, k, v, g, mask, block=(3, 2), threads=threads)
            _assert_scaled(got, dense, scales, dtype)


def test_auto_over_a_small_memory_budget_is_blockwise_and_matches_dense():
    rng = np.random.default_rng(13)
    q, k = rng.normal(size=(2, 40, 4)), rng.normal(size=(2, 50, 4))
    v, g = rng.normal(size=(2, 50, 3)), rng.normal(size=(2, 40, 3))
    dense = _backward(q, k, v, g, Causal(), method="dense")
    got = al.attention_backward(
        q, k, v, g, Causal(), method="auto", memory_budget=100, block_size=7, threads=2
    )
    _assert_scaled(got, dense, _error_scales(q, k, v, g, Causal(), None), np.float64)


def test_the_scaled_comparison_can_fail():
    # A gradient at a slightly wrong scale, or with one key's tile lost, is caught.
    rng = np.random.default_rng(14)
    q, k, v, g = (rng.normal(size=(12, 4)) for _ in range(4))
    for scale in (1.0, 30.0):
        right = _backward(q * 3, k, v, g, scale=scale, method="dense")
        scales = _error_scales(q * 3, k, v, g, None, scale)
        wrong = _backward(q * 3, k, v, g, scale=scale * (1 + 1e-6))
        with pytest.raises(AssertionError):
            _assert_scaled(wrong, right, scales, np.float64)
    right = _backward(q, k, v, g, method="dense")
    dq, dk, dv = _backward(q, k[:11], v[:11], g)  # key 11 lost
    lost = (dq, np.vstack([dk, np.zeros((1, 4))]), np.vstack([dv, np.zeros((1, 4))]))
    with pytest.raises(AssertionError):
        _assert_scaled(lost, right, _error_scales(q, k, v, g, None, None), np.float64)
