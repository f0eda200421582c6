"""Mask converters: structure read back exactly, round trips, the frameworks' own outputs, errors.

Framework masks are built here from their definitions with the framework's ops (torch.tril,
arange comparisons, the Hugging Face recipe written out), never from attnlab's rendering.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.errors import AttnlabError, FullyMaskedRowError, ShapeError
from attnlab.masks import (
    Causal,
    Dense,
    Padding,
    SlidingWindow,
    from_hf,
    from_hf_4d,
    from_jax,
    from_key_padding_mask,
    from_torch,
    to_jax,
    to_torch,
)
from tolerances import F64, for_dtype

FAST = settings(max_examples=60, deadline=None)
ALIGNS = ("top_left", "bottom_right")


@st.composite
def specs(draw):
    """A random spec on a random N x M table, for q of shape (B, h, N, d_k)."""
    n, m = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    b = draw(st.integers(1, 3))
    parts = []
    band = draw(st.sampled_from(["none", "causal", "window"]))
    align = draw(st.sampled_from(ALIGNS))
    if band == "causal":
        parts.append(Causal(align))
    elif band == "window":
        parts.append(SlidingWindow(draw(st.integers(1, 8)), align))
    if draw(st.booleans()):
        parts.append(Padding(draw(st.lists(st.integers(0, m + 2), min_size=b, max_size=b))))
    if draw(st.booleans()) or not parts:
        seed = draw(st.integers(0, 2**32 - 1))
        table = np.random.default_rng(seed).random((n, m)) < 0.7
        parts.append(Dense(table))
    spec = parts[0]
    for p in parts[1:]:
        spec = spec + p
    return spec, n, m


def _same_table(a, b, n, m):
    """a and b allow the same pairs (None, no mask, allows every pair)."""
    ta, tb = (np.ones((n, m), bool) if s is None else s.allowed(n, m, lead_ndim=2) for s in (a, b))
    shape = np.broadcast_shapes(ta.shape, tb.shape)
    assert np.array_equal(np.broadcast_to(ta, shape), np.broadcast_to(tb, shape))


# -- structure comes back as specs -----------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "n", "m"),
    [
        (Causal(), 4, 4),
        (Causal(), 3, 6),
        (Causal("bottom_right"), 3, 6),
        (SlidingWindow(2), 5, 5),
        (SlidingWindow(3, "bottom_right"), 2, 7),
        (Padding([3, 5]), 4, 5),
        (Causal() + Padding([3, 2]), 4, 4),
        (SlidingWindow(2) + Padding([4, 1, 3]), 4, 4),
    ],
    ids=repr,
)
def test_structure_comes_back_as_the_spec(spec, n, m):
    assert from_torch(to_torch(spec, n, m)) == spec
    assert from_torch(to_torch(spec, n, m, dtype=np.float32)) == spec
    assert from_jax(**to_jax(spec, n, m), n=n, m=m) == spec


def test_a_table_with_no_rule_stays_dense():
    table = np.array([[True, False, True], [False, True, True]])
    spec = from_torch(table)
    assert spec == Dense(table)
    per_head = np.ones((2, 2, 2, 3), dtype=bool)
    per_head[0, 1, :, 2] = False  # varies along the head axis: no Padding for that
    assert isinstance(from_torch(per_head), Dense)


def test_float_mask_with_biases_stays_additive():
    bias = np.array([[0.0, -1.5, -np.inf], [0.5, 0.0, 0.0]])
    assert from_torch(bias) == Dense(bias)


def test_hf_finfo_min_reads_as_blocked():
    lo = np.finfo(np.float16).min
    table = np.array([[0, lo], [0, 0]], dtype=np.float16)
    assert from_torch(table) == Causal()
    assert from_hf_4d(table[None, None]) == Causal()


@FAST
@given(specs())
def test_round_trips_keep_the_table(case):
    spec, n, m = case
    _same_table(from_torch(to_torch(spec, n, m)), spec, n, m)
    _same_table(from_jax(**to_jax(spec, n, m), n=n, m=m), spec, n, m)


@FAST
@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 2**32 - 1), st.booleans())
def test_key_padding_round_trip(b, m, seed, prefix):
    rng = np.random.default_rng(seed)
    if prefix:
        ignore = np.arange(m) >= rng.integers(0, m + 1, size=b)[:, None]  # (B, M)
    else:
        ignore = rng.random((b, m)) < 0.4
    spec = from_key_padding_mask(ignore)
    assert isinstance(spec, Padding) or not prefix
    allowed = spec.allowed(3, m, lead_ndim=2)  # (B, 1, N, M)
    assert np.array_equal(
        np.broadcast_to(allowed, (b, 1, 3, m)),
        np.broadcast_to(~ignore[:, None, None, :], (b, 1, 3, m)),
    )
    # True = ignore in torch's convention: the same table as from_hf's 1 = real token
    _same_table(from_hf((~ignore).astype(np.int64)), spec, 3, m)
    back = to_torch(spec, 1, m)  # (B, 1, 1, M), True = may attend
    assert np.array_equal(~back.reshape(b, m), ignore)


def test_key_padding_places_the_batch_axis():
    ignore = np.array([[True, False], [False, True]])  # not prefixes: a table
    assert from_key_padding_mask(ignore).array.shape == (2, 1, 1, 2)  # q (B, h, N, d_k)
    assert from_key_padding_mask(ignore, lead_ndim=1).array.shape == (2, 1, 2)  # q (B, N, d_k)
    assert from_key_padding_mask(np.array([False, True])).array.shape == (1, 2)  # unbatched


# -- against PyTorch ---------------------------------------------------------------------------


def _sdpa(torch, q, k, v, attn_mask):
    t = [torch.from_numpy(a) for a in (q, k, v)]
    mask = attn_mask  # a torch mask, or to_torch's numpy array, which from_numpy must take
    if isinstance(attn_mask, np.ndarray):
        mask = torch.from_numpy(attn_mask)
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=mask).numpy()


def _torch_masks(torch, b, n, m):
    """SDPA masks of each structure, from torch ops; (B, 1, N, M) or (N, M)."""
    i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
    lengths = torch.tensor([m, max(1, m - 2)])[:b]
    pad = (torch.arange(m) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, M)
    left = (torch.arange(m) >= (m - lengths)[:, None])[:, None, None, :]  # left padding
    tril = torch.ones(n, m, dtype=torch.bool).tril()
    return {
        "causal": tril,
        "bottom_right": j <= i + (m - n),
        "window": (j <= i) & (j > i - 2),
        "padding": pad,
        "left_padding": left,
        "causal+padding": pad & tril,
        "float_causal": torch.zeros(n, m).masked_fill(~tril, float("-inf")),
        "float_bias": torch.randn(n, m, generator=torch.Generator().manual_seed(0)),
    }


@pytest.mark.oracle
@pytest.mark.parametrize(
    "kind",
    [
        "causal",
        "bottom_right",
        "window",
        "padding",
        "left_padding",
        "causal+padding",
        "float_causal",
        "float_bias",
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_from_torch_gives_sdpas_output(torch, kind, dtype):
    rng = np.random.default_rng(0)
    b, h, n, m, d = 2, 3, 4, 6, 5
    q = rng.normal(size=(b, h, n, d)).astype(dtype)
    k, v = (rng.normal(size=(b, h, m, d)).astype(dtype) for _ in range(2))
    attn_mask = _torch_masks(torch, b, n, m)[kind]
    if attn_mask.dtype.is_floating_point:
        attn_mask = attn_mask.to(getattr(torch, dtype))
    spec = from_torch(attn_mask)
    if kind in ("causal", "bottom_right", "window", "padding", "causal+padding"):
        assert not isinstance(spec, Dense), spec  # a rule, so tiles can be skipped
    out = al.attention(q, k, v, mask=spec)
    np.testing.assert_allclose(out, _sdpa(torch, q, k, v, attn_mask), **for_dtype(dtype))
    back = to_torch(spec, n, m, dtype=bool if attn_mask.dtype == torch.bool else dtype)
    np.testing.assert_allclose(_sdpa(torch, q, k, v, back), out, **for_dtype(dtype))


@pytest.mark.oracle
@FAST
@given(specs())
def test_to_torch_gives_attnlabs_output(torch, case):
    spec, n, m = case
    rng = np.random.default_rng(n * 10 + m)
    b = len(spec.allowed(n, m, lead_ndim=2)) if spec.batched else 2
    q = rng.normal(size=(b, 2, n, 3))
    k, v = (rng.normal(size=(b, 2, m, 3)) for _ in range(2))
    try:
        out = al.attention(q, k, v, mask=spec)
    except FullyMaskedRowError:
        return  # SDPA gives NaN or zeros there: nothing to compare
    for dtype in (bool, np.float64):
        np.testing.assert_allclose(
            _sdpa(torch, q, k, v, to_torch(spec, n, m, dtype=dtype)), out, **F64
        )


@pytest.mark.oracle
@pytest.mark.parametrize("padding", ["right", "left"])
def test_multihead_key_padding_matches_torch(torch, padding):
    """nn.MultiheadAttention and attnlab, same weights and the same key_padding_mask."""
    torch.manual_seed(0)
    b, n, m, e, heads = 3, 4, 5, 8, 2
    module = torch.nn.MultiheadAttention(e, heads, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    rng = np.random.default_rng(4)
    query = rng.normal(size=(b, n, e))
    key, value = rng.normal(size=(b, m, e)), rng.normal(size=(b, m, e))
    lengths = torch.tensor([5, 3, 1])
    pos = torch.arange(m)[None, :]
    ignore = pos >= lengths[:, None] if padding == "right" else pos < m - lengths[:, None]
    with torch.no_grad():
        ref, _ = module(
            *(torch.from_numpy(a) for a in (query, key, value)), key_padding_mask=ignore
        )
    mask = from_key_padding_mask(ignore)
    assert isinstance(mask, Padding) == (padding == "right")
    out = al.MultiHeadAttention.from_torch(module)(query, key, value, mask=mask)
    np.testing.assert_allclose(out, ref.numpy(), **F64)


# -- Hugging Face masks, built as transformers builds them (no transformers package) ------------


def hf_4d(attention_mask: np.ndarray, n: int, dtype) -> np.ndarray:
    """transformers' ``_prepare_4d_causal_attention_mask`` for a prompt (no KV cache): a causal
    (N, M) table and the expanded (B, 1, N, M) padding, blocked pairs at finfo(dtype).min."""
    lo = np.finfo(dtype).min
    m = attention_mask.shape[-1]
    causal = np.triu(np.full((n, m), lo, dtype=dtype), k=1 + (m - n))  # (N, M)
    inverted = (1.0 - attention_mask[:, None, None, :].astype(dtype)) * lo  # (B, 1, 1, M)
    return np.where(inverted < 0, lo, causal[None, None]).astype(dtype)  # (B, 1, N, M)


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_hf_right_padding_matches_sdpa(torch, dtype):
    rng = np.random.default_rng(6)
    b, h, n, d = 2, 2, 5, 4
    attention_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # 1 = real token
    q, k, v = (rng.normal(size=(b, h, n, d)).astype(dtype) for _ in range(3))
    additive = hf_4d(attention_mask, n, dtype)
    assert from_hf_4d(additive) == Causal() + Padding([5, 3])
    assert from_hf(attention_mask) == Padding([5, 3])
    ref = _sdpa(torch, q, k, v, additive)
    for spec in (from_hf_4d(additive), Causal() + from_hf(attention_mask)):
        np.testing.assert_allclose(al.attention(q, k, v, mask=spec), ref, **for_dtype(dtype))


@pytest.mark.oracle
def test_hf_left_padding(torch):
    """Left padding: real rows agree with SDPA; the pad queries see no key, which attnlab
    refuses (HF's SDPA path unmasks such rows; their outputs are discarded anyway)."""
    rng = np.random.default_rng(7)
    b, h, n, d = 2, 2, 4, 3
    attention_mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]])
    q, k, v = (rng.normal(size=(b, h, n, d)) for _ in range(3))
    additive = hf_4d(attention_mask, n, np.float64)
    spec = from_hf_4d(additive)
    with pytest.raises(FullyMaskedRowError) as info:
        al.attention(q, k, v, mask=spec)
    assert {r[0] for r in info.value.rows} == {1} and {r[-1] for r in info.value.rows} == {0, 1}
    ref = _sdpa(torch, q, k, v, additive)
    out = al.attention(q[:, :, 2:], k, v, mask=Causal("bottom_right") + from_hf(attention_mask))
    np.testing.assert_allclose(out, ref[:, :, 2:], **F64)
    assert isinstance(from_hf(attention_mask), Dense)


# -- bad input names its argument ------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: from_torch(np.ones((2, 2), dtype=np.int64)),
            AttnlabError,
            "attn_mask of dtype bool",
        ),
        (
            lambda: from_torch(np.ones(3, dtype=bool)),
            ShapeError,
            r"attn_mask of shape .*got shape \(3,\)",
        ),
        (lambda: from_torch(np.array([[0.0, np.nan]])), AttnlabError, "attn_mask to hold finite"),
        (lambda: from_torch(np.array([["a"]])), AttnlabError, "attn_mask of a bool"),
        (
            lambda: from_key_padding_mask(np.zeros((2, 3), dtype=int)),
            AttnlabError,
            "key_padding_mask of dtype bool.*from_hf",
        ),
        (
            lambda: from_key_padding_mask(np.zeros((1, 2, 3), dtype=bool)),
            ShapeError,
            "key_padding_mask of shape",
        ),
        (
            lambda: from_key_padding_mask(np.zeros((2, 3), dtype=bool), lead_ndim=0),
            AttnlabError,
            "lead_ndim",
        ),
        (lambda: from_hf(np.array([[1, 2]])), AttnlabError, r"attention_mask of 1 .*got \[2\]"),
        (
            lambda: from_hf(np.array([[1.0, 0.0]])),
            AttnlabError,
            "attention_mask of 1 and 0.*from_hf_4d",
        ),
        (lambda: from_hf(np.array([1, 0])), ShapeError, r"attention_mask of shape \(B, M\)"),
        (lambda: from_hf_4d(np.zeros((2, 3))), ShapeError, r"mask of shape \(B, 1, N, M\)"),
        (
            lambda: from_hf_4d(np.zeros((1, 1, 2, 3), dtype=np.int32)),
            AttnlabError,
            "mask of dtype float",
        ),
        (lambda: from_jax(np.zeros((1, 1, 2, 2))), AttnlabError, "mask to be a bool array"),
        (lambda: from_jax(local_window_size=(1, "2")), AttnlabError, "local_window_size"),
        (lambda: from_jax(local_window_size=(1, 1)), ShapeError, "expected n"),
        (
            lambda: from_jax(query_seq_lengths=[1.5]),
            AttnlabError,
            "query_seq_lengths to be a 1-D integer",
        ),
        (lambda: from_jax(is_causal=1), AttnlabError, "is_causal to be a bool"),
        (lambda: to_torch(Causal(), 2, dtype=np.int32), AttnlabError, "dtype bool or a float"),
        (
            lambda: to_torch(np.array([[0.0, -1.0]]), 1, 2),
            AttnlabError,
            "dtype=bool.*finite biases",
        ),
        (
            lambda: to_jax(Dense(np.ones((1, 1, 1, 1, 2), dtype=bool)), 1, 2),
            ShapeError,
            "at most 4 axes",
        ),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert "expected" in str(info.value)
