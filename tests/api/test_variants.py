"""The variants forward: softcap, ALiBi, two-sided windows, sinks, return_lse, fully_masked.

Each case is checked against a plain-loop reference and torch (both in ``variant_refs``,
independent of attnlab) on the dense and blockwise paths, alone and combined with Causal,
Padding, SlidingWindow and Dense masks; then the single-key exactness, and the errors.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnlab as al
from attnlab.masks import ALiBi, Causal, Dense, Padding, SlidingWindow
from tolerances import F64
from variant_refs import Case, loop_variant, masks_of, run_attnlab, torch_variant

VARIANTS = ["softcap", "alibi", "window", "sinks", "bias"]
BASES = ["none", "causal", "padding", "window"]
# Every variant alone and in pairs, each beside every base mask: 60 combinations.
COMBOS = [
    (frozenset(vs), base)
    for r in (1, 2)
    for vs in itertools.combinations(VARIANTS, r)
    for base in BASES
]


def make_case(variants, base, *, seed=0, n=7, m=11, bottom_right=False) -> Case:
    rng = np.random.default_rng(seed)
    B, h, d = 2, 3, 5
    c = Case(
        q=rng.normal(size=(B, h, n, d)) * 2,
        k=rng.normal(size=(B, h, m, d)) * 2,
        v=rng.normal(size=(B, h, m, 4)),
        scale=0.6,
        bottom_right=bottom_right,
    )
    if "softcap" in variants:
        c.softcap = 1.7
    if "alibi" in variants:
        c.slopes = rng.uniform(0.05, 1.0, size=h)
    if "window" in variants:
        c.window = (2, 3)
    if "sinks" in variants:
        c.sinks = rng.normal(size=h) * 2
    if "bias" in variants:
        c.bias = rng.normal(size=(B, 1, n, m))
    if base == "causal":
        c.causal = True
    elif base == "padding":
        c.lengths = (m - 3, 4)
    elif base == "window":
        c.window = (1, 0) if c.window is None else (min(1, c.window[0]), 0)
    return c


def combo_id(x) -> str:
    """A parameter's id, the same in every process (a frozenset's order follows string hashes,
    which each process seeds anew, and pytest-xdist's workers must collect the same ids)."""
    return "-".join(sorted(x)) if isinstance(x, frozenset) else str(x)


@pytest.mark.parametrize("variants, base", COMBOS, ids=combo_id)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_each_variant_matches_the_loop_reference(variants, base, method):
    c = make_case(variants, base, seed=len(variants) * 7 + BASES.index(base))
    out, lse = run_attnlab(c, method=method, block_size=(3, 4))
    want_out, want_lse = loop_variant(c)
    np.testing.assert_allclose(out, want_out, **F64)
    np.testing.assert_allclose(lse, want_lse, **F64)


@pytest.mark.oracle
@pytest.mark.parametrize("variants, base", COMBOS[::3], ids=combo_id)
@pytest.mark.parametrize("bottom_right", [False, True])
def test_each_variant_matches_torch(torch, variants, base, bottom_right):
    c = make_case(variants, base, seed=3, n=6, m=9, bottom_right=bottom_right)
    tensors = {"q": torch.tensor(c.q), "k": torch.tensor(c.k), "v": torch.tensor(c.v)}
    if c.sinks is not None:
        tensors["sinks"] = torch.tensor(c.sinks)
    if c.bias is not None:
        tensors["bias"] = torch.tensor(c.bias)
    want_out, want_lse = (t.numpy() for t in torch_variant(torch, c, tensors))
    for method in ("dense", "blockwise"):
        out, lse = run_attnlab(c, method=method, block_size=(2, 4))
        np.testing.assert_allclose(out, want_out, **F64)
        np.testing.assert_allclose(lse, want_lse, **F64)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_blockwise_equals_dense_with_every_variant(dtype, tol):
    c = make_case({"softcap", "alibi", "sinks", "bias"}, "causal", seed=5, n=40, m=53)
    c.q, c.k, c.v = (a.astype(dtype) for a in (c.q, c.k, c.v))
    dense = run_attnlab(c, method="dense")
    for block in [(1, 1), (8, 16), (64, 64)]:
        tiled = run_attnlab(c, method="blockwise", block_size=block, threads=2)
        for a, b in zip(tiled, dense, strict=True):
            assert a.dtype == dtype
            np.testing.assert_allclose(a, b, rtol=0, atol=tol)


def test_the_loop_reference_can_fail():
    c = make_case({"softcap"}, "causal")
    out, _ = run_attnlab(c, method="dense")
    c.softcap = 1.8  # a different cap: the reference sees the change
    want, _ = loop_variant(c)
    assert np.abs(out - want).max() > 1e-6


def test_large_sinks_and_softcap_stay_finite_on_both_paths():
    # A sink far above every score: the blockwise base moves up to it by a power of two.
    c = make_case({"sinks", "softcap"}, "none", seed=2)
    c.sinks = np.array([300.0, -300.0, 0.0])
    want_out, want_lse = loop_variant(c)
    for method in ("dense", "blockwise"):
        out, lse = run_attnlab(c, method=method, block_size=4)
        np.testing.assert_allclose(out, want_out, **F64)
        np.testing.assert_allclose(lse, want_lse, rtol=1e-14, atol=1e-10)


# -- masks ------------------------------------------------------------------------------------


def test_sliding_window_size_keeps_its_meaning():
    assert SlidingWindow(4) == SlidingWindow(left=3, right=0)
    i, j = np.arange(6)[:, None], np.arange(9)[None, :]
    np.testing.assert_array_equal(SlidingWindow(4).allowed(6, 9), (j <= i) & (j > i - 4))
    br = SlidingWindow(left=2, right=1, align="bottom_right").allowed(6, 9)
    np.testing.assert_array_equal(br, (j >= i + 3 - 2) & (j <= i + 3 + 1))
    assert repr(SlidingWindow(left=2, right=None)) == "SlidingWindow(left=2, right=None)"
    assert SlidingWindow(left=None, right=None).allowed(3, 4).all()


@pytest.mark.parametrize("left", [None, 0, 1, 5])
@pytest.mark.parametrize("right", [None, 0, 2, 7])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_window_tile_states_agree_with_the_table(left, right, align):
    mask = SlidingWindow(left=left, right=right, align=align)
    n, m = 13, 17
    table = mask.allowed(n, m)
    for r0, r1, c0, c1 in itertools.product(
        range(0, n, 4), range(1, n + 1, 5), range(0, m, 3), range(1, m + 1, 4)
    ):
        if r1 <= r0 or c1 <= c0:
            continue
        tile = table[r0:r1, c0:c1]
        want = "blocked" if not tile.any() else "open" if tile.all() else "partial"
        assert mask.tile_state((r0, r1), (c0, c1), n, m).value == want


def test_alibi_is_minus_slope_times_distance_per_head():
    slopes = np.array([0.25, 1.0])
    table = ALiBi(slopes, align="bottom_right").additive(3, 5, lead_ndim=2)  # (2, 3, 5)
    i, j = np.arange(3)[:, None] + 2, np.arange(5)[None, :]
    np.testing.assert_array_equal(table, -slopes[:, None, None] * np.abs(i - j))
    assert ALiBi([0.5]) == ALiBi(np.array([0.5])) and ALiBi([0.5]) != ALiBi([0.5], "bottom_right")


# -- exact edges --------------------------------------------------------------------------------

ONE_KEY = {
    "one key": (None, 1),
    "causal row 0": (Causal(), 6),
    "window of 1": (SlidingWindow(1), 6),
    "padding to 1": (Padding([1, 1]), 6),
    "bool table": (Dense(np.eye(5, 6, dtype=bool)), 6),
}


@pytest.mark.parametrize("name", list(ONE_KEY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["dense", "blockwise"])
@pytest.mark.parametrize("scale_up", [1.0, 40.0])
def test_a_row_with_one_allowed_key_returns_its_value_exactly(name, dtype, method, scale_up):
    mask, m = ONE_KEY[name]
    rng = np.random.default_rng(11)
    q = (rng.normal(size=(2, 3, 5, 16)) * scale_up).astype(dtype)
    k = (rng.normal(size=(2, 3, m, 16)) * scale_up).astype(dtype)
    v = rng.normal(size=(2, 3, m, 8)).astype(dtype)
    out = al.attention(q, k, v, mask, method=method, block_size=(2, 4))
    allowed = (
        np.ones((5, m), bool)
        if mask is None
        else np.broadcast_to(mask.allowed(5, m, lead_ndim=2), (2, 3, 5, m))
    )
    rows = np.argwhere(np.broadcast_to(allowed, (2, 3, 5, m)).sum(-1) == 1)
    assert len(rows)
    for b, h, i in rows:
        j = int(np.flatnonzero(np.broadcast_to(allowed, (2, 3, 5, m))[b, h, i])[0])
        assert np.array_equal(out[b, h, i], v[b, h, j]), (b, h, i)


@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_fully_masked_zero_gives_zero_and_minus_inf(method):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 2))
    mask = Padding([0, 5])  # batch element 0 allows no key
    with pytest.raises(al.errors.FullyMaskedRowError):
        al.attention(q, k, v, mask, method=method)
    out, lse = al.attention(
        q, k, v, mask, method=method, fully_masked="zero", return_lse=True, sinks=0.5
    )
    assert (out[0] == 0).all() and np.isneginf(lse[0]).all()
    np.testing.assert_allclose(out[1], al.attention(q[1], k[1], v[1], sinks=0.5), **F64)


# -- errors -------------------------------------------------------------------------------------

X = np.ones((2, 3, 4, 5))
BAD = [
    ({"softcap": 0.0}, al.AttnlabError, "softcap"),
    ({"softcap": -1}, al.AttnlabError, "softcap"),
    ({"softcap": float("inf")}, al.AttnlabError, "softcap"),
    ({"softcap": "2"}, al.AttnlabError, "softcap"),
    ({"sinks": np.ones(4)}, al.errors.ShapeError, "sinks"),
    ({"sinks": np.ones((3, 3))}, al.errors.ShapeError, "sinks"),
    ({"sinks": [np.nan, 0, 0]}, al.AttnlabError, "sinks"),
    ({"fully_masked": "keep"}, al.AttnlabError, "fully_masked"),
    ({"mask": ALiBi(np.ones(4))}, al.errors.ShapeError, "ALiBi"),
]


@pytest.mark.parametrize("kwargs, error, word", BAD, ids=str)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_bad_variant_arguments_are_named(kwargs, error, word, method):
    with pytest.raises(error, match=word):
        al.attention(X, X, X, method=method, **kwargs)


@pytest.mark.parametrize(
    "make, word",
    [
        (lambda: SlidingWindow(left=-1), "left"),
        (lambda: SlidingWindow(right=-2), "right"),
        (lambda: SlidingWindow(3, left=1), "size"),
        (lambda: SlidingWindow(left=1, align="middle"), "align"),
        (lambda: ALiBi(np.ones((1, 2, 3))), "slopes"),
        (lambda: ALiBi([1.0, np.inf]), "slopes"),
        (lambda: ALiBi([1.0], align="centre"), "align"),
    ],
)
def test_bad_mask_arguments_are_named(make, word):
    with pytest.raises(al.AttnlabError, match=word):
        make()


def test_trace_keeps_the_capped_table_and_the_lse():
    c = make_case({"softcap", "sinks"}, "causal")
    t = al.trace_attention(c.q, c.k, c.v, masks_of(c), scale=c.scale, softcap=1.7, sinks=c.sinks)
    np.testing.assert_allclose(t.capped, 1.7 * np.tanh(t.scaled / 1.7), **F64)
    want_out, want_lse = loop_variant(c)
    np.testing.assert_allclose(t.output, want_out, **F64)
    np.testing.assert_allclose(t.lse, want_lse, **F64)
    assert [s[0] for s in t.stages()][:4] == ["scores", "scaled", "capped", "masked"]
