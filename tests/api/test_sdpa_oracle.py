"""attention() and scaled_dot_product_attention() against PyTorch's math, on random problems.

Every torch mask here is built from its definition with torch ops (tril, arange, PyTorch's own
causal_lower_right), never from attnlab's rendering, so a wrong attnlab table shows up.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.masks import Causal, Dense, Mask, Padding, SlidingWindow
from tolerances import F64, for_dtype

pytestmark = pytest.mark.oracle
FAST = settings(max_examples=40, deadline=None)

KINDS = [
    "none",
    "bool",
    "float",
    "is_causal",
    "dense",
    "causal",
    "bottom_right",
    "window",
    "padding",
    "causal+padding",
]


@dataclass
class Problem:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float | None
    kind: str
    n: int
    m: int
    table: np.ndarray  # a random bool mask with a key for every row
    bias: np.ndarray  # a random additive mask: finite biases and -inf
    lengths: np.ndarray | None
    window: int
    attn: dict = field(default_factory=dict)  # attnlab's mask argument

    def attnlab_mask(self):
        """The attnlab spelling of this problem's mask."""
        return {
            "none": None,
            "bool": self.table,
            "float": self.bias,
            "is_causal": Causal(),
            "dense": Dense(self.table),
            "causal": Causal(),
            "bottom_right": Causal("bottom_right"),
            "window": SlidingWindow(self.window),
            "padding": Padding(self.lengths) if self.lengths is not None else None,
            "causal+padding": Causal() + Padding(self.lengths)
            if self.lengths is not None
            else None,
        }[self.kind]

    def torch_kwargs(self, torch, dtype):
        """The same mask for torch.nn.functional.scaled_dot_product_attention."""
        n, m = self.n, self.m
        i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
        tril = torch.ones(n, m, dtype=torch.bool).tril()
        if self.kind == "none":
            return {}
        if self.kind in ("is_causal", "causal"):
            return {"is_causal": True}
        if self.kind in ("bool", "dense"):
            return {"attn_mask": torch.from_numpy(self.table.copy())}
        if self.kind == "float":
            return {"attn_mask": torch.from_numpy(self.bias.copy()).to(dtype)}
        if self.kind == "bottom_right":
            from torch.nn.attention.bias import causal_lower_right

            return {"attn_mask": causal_lower_right(n, m)}
        if self.kind == "window":
            return {"attn_mask": (j <= i) & (j > i - self.window)}
        lead_ones = (1,) * (self.q.ndim - 3)
        pad = torch.arange(m) < torch.from_numpy(self.lengths)[:, None]  # (B, M)
        pad = pad.reshape((-1, *lead_ones, 1, m))  # (B, ..., 1, M)
        return {"attn_mask": pad if self.kind == "padding" else pad & tril}


@st.composite
def problems(draw, dtypes=("float32", "float64")):
    kind = draw(st.sampled_from(KINDS))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    if "padding" in kind and not lead:
        lead = (2,)
    n = draw(st.integers(1, 6))
    # Banded masks need N <= M, or a query row would see no key at all.
    m = draw(st.integers(n if kind in ("bottom_right", "window") else 1, 7))
    d_k, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    scale = draw(st.one_of(st.none(), st.floats(0.05, 2.0)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k_lead = tuple(1 if rng.random() < 0.3 else d for d in lead)
    q = rng.normal(size=lead + (n, d_k)).astype(dtype)
    k = rng.normal(size=k_lead + (m, d_k)).astype(dtype)
    v = rng.normal(size=k_lead + (m, d_v)).astype(dtype)
    table = rng.random(lead + (n, m)) < 0.5
    table[..., rng.integers(0, m)] = True
    bias = rng.normal(size=(n, m))
    bias[rng.random((n, m)) < 0.3] = -np.inf
    bias[np.arange(n), rng.integers(0, m, size=n)] = 0.0
    lengths = rng.integers(1, m + 1, size=lead[0]) if lead else None
    return Problem(q, k, v, scale, kind, n, m, table, bias, lengths, int(rng.integers(1, 4)))


def _sdpa_torch(torch, p: Problem, **extra):
    t = [torch.from_numpy(a.copy()) for a in (p.q, p.k, p.v)]
    kwargs = p.torch_kwargs(torch, t[0].dtype) | extra
    return torch.nn.functional.scaled_dot_product_attention(*t, scale=p.scale, **kwargs).numpy()


@FAST
@given(problems())
def test_attention_matches_torch(torch, p):
    mask = p.attnlab_mask()
    out = al.attention(p.q, p.k, p.v, mask=mask, scale=p.scale)
    assert out.dtype == p.q.dtype
    ref = _sdpa_torch(torch, p)
    np.testing.assert_allclose(out, ref, **for_dtype(p.q.dtype))
    if isinstance(mask, Mask):
        # The spec rendered as a bool table means the same thing to torch.
        table = mask.allowed(p.n, p.m, lead_ndim=p.q.ndim - 2)
        t = [torch.from_numpy(a.copy()) for a in (p.q, p.k, p.v)]
        rendered = torch.nn.functional.scaled_dot_product_attention(
            *t, attn_mask=torch.from_numpy(table), scale=p.scale
        )
        np.testing.assert_allclose(rendered.numpy(), ref, **for_dtype(p.q.dtype))


@FAST
@given(problems())
def test_sdpa_matches_torch(torch, p):
    if p.kind == "is_causal":
        kwargs = {"is_causal": True}
    else:
        kwargs = {"attn_mask": p.attnlab_mask()}
    out = al.scaled_dot_product_attention(p.q, p.k, p.v, scale=p.scale, **kwargs)
    assert out.dtype == p.q.dtype
    np.testing.assert_allclose(out, _sdpa_torch(torch, p), **for_dtype(p.q.dtype))


def test_sdpa_positional_signature_is_torchs(torch):
    # torch's builtin has no inspectable signature; its docstring's first line spells it out.
    doc = torch.nn.functional.scaled_dot_product_attention.__doc__
    head = re.match(r"\s*scaled_dot_product_attention\((.*?)\)", doc, flags=re.S).group(1)
    torch_params = [p.split("=")[0].strip() for p in head.split(",")]
    ours = [
        p
        for p in inspect.signature(al.scaled_dot_product_attention).parameters.values()
        if p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    assert [p.name for p in ours] == torch_params
    defaults = dict(re.findall(r"(\w+)=([\w.]+)", head))
    for p in ours:
        if p.name in defaults:
            assert repr(p.default) == defaults[p.name]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grouped_query_attention(torch, seed, dtype):
    rng = np.random.default_rng(seed)
    kv_heads, group = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    hq, n, m, e, ev = kv_heads * group, 3, 5, 4, 2
    q = rng.normal(size=(2, hq, n, e)).astype(dtype)
    k = rng.normal(size=(2, kv_heads, m, e)).astype(dtype)
    v = rng.normal(size=(2, kv_heads, m, ev)).astype(dtype)
    causal = bool(seed % 2)
    out = al.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal, enable_gqa=True
    )
    assert out.shape == (2, hq, n, ev) and out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, ref.numpy(), **for_dtype(dtype))
    # Query head h reads key/value head h // group: consecutive query heads share one.
    for h in range(hq):
        one = al.attention(
            q[:, h], k[:, h // group], v[:, h // group], Causal() if causal else None
        )
        np.testing.assert_allclose(out[:, h], one, **for_dtype(dtype))


def test_fully_masked_row_zero_like_torch(torch):
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(2, 4, 3)) for _ in range(3))
    table = rng.random((2, 4, 4)) < 0.6
    table[..., 0] = True
    table[1, 2] = False  # batch 1, query 2 may attend to nothing
    with pytest.raises(al.FullyMaskedRowError, match=r"\(1, 2\)"):
        al.scaled_dot_product_attention(q, k, v, attn_mask=table)
    out = al.scaled_dot_product_attention(q, k, v, attn_mask=table, fully_masked="zero")
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=torch.from_numpy(table)
    ).numpy()
    np.testing.assert_array_equal(out[1, 2], 0.0)
    np.testing.assert_allclose(out, ref, **F64)


# -- dropout: seeded, and right on average -------------------------------------------------------


def _dropout_problem(reps: int):
    rng = np.random.default_rng(11)
    q, k = rng.normal(size=(4, 5)), rng.normal(size=(6, 5))
    return np.broadcast_to(q, (reps, 4, 5)), k, rng.normal(size=(6, 3))


def test_dropout_is_reproducible_with_a_seed():
    q, k, v = _dropout_problem(3)
    a = al.scaled_dot_product_attention(q, k, v, dropout_p=0.4, rng=123)
    b = al.scaled_dot_product_attention(q, k, v, dropout_p=0.4, rng=np.random.default_rng(123))
    c = al.scaled_dot_product_attention(q, k, v, dropout_p=0.4, rng=124)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    plain = al.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(al.scaled_dot_product_attention(q, k, v, None, 0.0, rng=5), plain)
    assert not np.allclose(a, plain)


def test_dropout_zeroes_a_fraction_p_and_rescales_the_rest():
    # With v = I the output is the (dropped-out) weight table itself.
    p, reps = 0.3, 500
    q, k, _ = _dropout_problem(reps)
    eye = np.eye(6)
    weights = al.scaled_dot_product_attention(q, k, eye)
    dropped = al.scaled_dot_product_attention(q, k, eye, dropout_p=p, rng=0)
    zeroed = dropped == 0.0
    assert abs(zeroed.mean() - p) < 0.02  # 12,000 draws: the standard error is about 0.004
    np.testing.assert_allclose(dropped[~zeroed], weights[~zeroed] / (1 - p), **F64)


def test_dropout_mean_approaches_the_plain_output():
    q, k, v = _dropout_problem(4000)
    plain = al.scaled_dot_product_attention(q[:1], k, v)[0]
    dropped = al.scaled_dot_product_attention(q, k, v, dropout_p=0.5, rng=1)
    np.testing.assert_allclose(dropped.mean(axis=0), plain, atol=0.05)
    assert np.abs(dropped - plain).max() > 0.1  # single runs do differ
