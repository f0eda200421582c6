"""A fuzz of the public entry points against PyTorch: shapes, dtypes, every mask kind
and sums of them, scales, extreme magnitudes, both methods and odd tile sizes. Every good input
agrees with torch within the named tolerance and holds no NaN; every bad one is an AttnlabError.

torch masks are built from their definitions with torch ops, never from attnlab's rendering.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import for_dtype

pytestmark = pytest.mark.oracle
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARTS = ["causal", "window", "padding", "bool", "bias"]


def _torch_part(torch, kind, n, m, lead, extra):
    """The torch spelling of one mask part: a bool table (True = may attend) or a float bias."""
    i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
    if kind == "causal":
        return j <= i
    if kind == "window":
        return (j <= i) & (j > i - extra["window"])
    if kind == "padding":
        pad = torch.arange(m) < torch.from_numpy(extra["lengths"])[:, None]  # (B, M)
        return pad.reshape((-1,) + (1,) * (len(lead) - 1) + (1, m))  # (B, ..., 1, M)
    if kind == "bool":
        return torch.from_numpy(extra["table"].copy())
    return torch.from_numpy(extra["bias"].copy())  # (N, M) float, -inf where blocked


def _attnlab_part(kind, extra):
    return {
        "causal": lambda: Causal(),
        "window": lambda: SlidingWindow(extra["window"]),
        "padding": lambda: Padding(extra["lengths"]),
        "bool": lambda: Dense(extra["table"]),
        "bias": lambda: Dense(extra["bias"]),
    }[kind]()


@st.composite
def problems(draw):
    dtype = np.dtype(draw(st.sampled_from(["float32", "float64"])))
    parts = draw(st.lists(st.sampled_from(PARTS), max_size=3, unique=True))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    if "padding" in parts and not lead:
        lead = (2,)
    n = draw(st.integers(1, 9))
    m = draw(st.integers(n, 11))  # N <= M: banded parts leave every row a key
    d_k, d_v = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    magnitude = draw(st.sampled_from([1.0, 1e-20, 30.0, 1e3]))
    scale = draw(st.one_of(st.none(), st.floats(1e-3, 4.0)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = (rng.normal(size=lead + (n, d_k)) * magnitude).astype(dtype)
    k = (rng.normal(size=lead + (m, d_k)) * magnitude).astype(dtype)
    v = rng.normal(size=lead + (m, d_v)).astype(dtype)
    table = rng.random(lead + (n, m)) < 0.6
    table[..., 0] = True  # key 0 stays open: every part allows it for every row
    bias = rng.normal(size=(n, m))
    bias[rng.random((n, m)) < 0.3] = -np.inf
    bias[:, 0] = 0.0
    extra = {
        "window": int(rng.integers(1, 4)),
        "lengths": rng.integers(1, m + 1, size=lead[0]) if lead else None,
        "table": table,
        "bias": bias,
    }
    method = draw(st.sampled_from(["dense", "blockwise"]))
    block = draw(st.sampled_from([None, 1, 3, (2, 5), (7, 1)]))
    return dtype, parts, lead, q, k, v, scale, extra, method, block


def _torch_mask(torch, parts, n, m, lead, extra, dtype):
    if not parts:
        return None
    total = torch.zeros((n, m), dtype=dtype)
    for kind in parts:
        part = _torch_part(torch, kind, n, m, lead, extra)
        if part.dtype == torch.bool:
            part = torch.where(part, 0.0, float("-inf")).to(dtype)
        total = total + part.to(dtype)
    return total


@FUZZ
@given(problems())
def test_attention_sums_of_masks_both_methods_match_torch(torch, problem):
    dtype, parts, lead, q, k, v, scale, extra, method, block = problem
    n, m = q.shape[-2], k.shape[-2]
    mask = None
    for kind in parts:
        part = _attnlab_part(kind, extra)
        mask = part if mask is None else mask + part
    if mask is not None:
        # A window beside padding or a table can leave a row nothing: attnlab must say so.
        allowed = np.broadcast_to(mask.allowed(n, m, lead_ndim=len(lead)), lead + (n, m))
        if not allowed.any(axis=-1).all():
            with pytest.raises(al.FullyMaskedRowError):
                al.attention(q, k, v, mask, scale=scale, method=method, block_size=block)
            return
    kw = {} if method == "dense" else {"block_size": block}
    out = al.attention(q, k, v, mask, scale=scale, method=method, **kw)
    assert out.dtype == dtype and not np.isnan(out).any()
    t = [torch.from_numpy(a.copy()) for a in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *t, attn_mask=_torch_mask(torch, parts, n, m, lead, extra, t[0].dtype), scale=scale
    ).numpy()
    np.testing.assert_allclose(out, ref, **for_dtype(dtype))


@st.composite
def bad_calls(draw):
    """One thing wrong with an otherwise good call."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    fault = draw(
        st.sampled_from(
            [
                "nan q", "inf v", "width", "rows", "mask shape", "int mask", "nan mask",
                "method", "block", "threads", "budget", "scale", "string q", "batch",
                "empty mask row", "window", "padding",
            ]
        )
    )  # fmt: skip
    kw: dict = {}
    mask = None
    if fault == "nan q":
        q[rng.integers(0, 3), rng.integers(0, 4)] = np.nan
    elif fault == "inf v":
        v[rng.integers(0, 5), 0] = -np.inf
    elif fault == "width":
        k = rng.normal(size=(5, 3))
    elif fault == "rows":
        v = rng.normal(size=(4, 2))
    elif fault == "mask shape":
        mask = np.ones((3, 4), bool)
    elif fault == "int mask":
        mask = np.ones((3, 5), np.int64)
    elif fault == "nan mask":
        mask = np.full((3, 5), np.nan)
    elif fault == "method":
        kw["method"] = draw(st.sampled_from(["fast", "", None, 3]))
    elif fault == "block":
        kw |= {
            "method": "blockwise",
            "block_size": draw(st.sampled_from([0, -1, 2.5, (1,), 2**40])),
        }
    elif fault == "threads":
        kw["threads"] = draw(st.sampled_from([0, -2, 1.5, True]))
    elif fault == "budget":
        kw["memory_budget"] = draw(st.sampled_from([0, -1, float("nan"), "lots"]))
    elif fault == "scale":
        kw["scale"] = draw(st.sampled_from([float("nan"), float("inf"), "x", [1.0]]))
    elif fault == "string q":
        q = [["a"] * 4] * 3
    elif fault == "batch":
        q, k = rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 5, 4))
    elif fault == "empty mask row":
        mask = np.ones((3, 5), bool)
        mask[rng.integers(0, 3)] = False
    elif fault == "window":
        size = draw(st.sampled_from([0, -3, 2**70]))
        return fault, q, k, v, lambda: SlidingWindow(size), kw
    else:
        lengths = draw(st.sampled_from([[-1], [1.5], [1e30]]))
        return fault, q, k, v, lambda: Padding(lengths), kw
    return fault, q, k, v, lambda: mask, kw


@FUZZ
@given(bad_calls(), st.sampled_from(["attention", "sdpa", "mha"]))
def test_every_bad_input_is_an_attnlab_error(call, entry):
    _fault, q, k, v, mask_of, kw = call
    with pytest.raises(al.AttnlabError):
        mask_thunk = mask_of()  # a mask spec may refuse its own arguments
        if entry == "attention":
            al.attention(q, k, v, mask_thunk, **kw)
        elif entry == "sdpa":
            extra = {"scale": kw["scale"]} if "scale" in kw else {}
            if set(kw) - {"scale"}:
                raise al.AttnlabError("sdpa takes no method options")  # nothing to test there
            al.scaled_dot_product_attention(q, k, v, mask_thunk, **extra)
        else:
            mha = al.MultiHeadAttention(4, 2, kdim=4, vdim=2, seed=0)
            mha(q, k, v, mask_thunk, **{key: val for key, val in kw.items() if key != "scale"})
            if "scale" in kw:  # MHA has no scale argument: the fault is elsewhere
                raise al.AttnlabError("no scale")


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 7),
    st.integers(1, 7),
    st.booleans(),
    st.sampled_from(["dense", "blockwise"]),
    st.integers(0, 2**32 - 1),
)
def test_multi_head_attention_matches_torch_module(
    torch, heads, per_head, n, m, causal, method, seed
):
    d_model = heads * per_head
    torch.manual_seed(seed % 2**31)
    module = torch.nn.MultiheadAttention(d_model, heads, batch_first=True, dtype=torch.float64)
    module.eval()
    mha = al.MultiHeadAttention.from_torch(module)
    rng = np.random.default_rng(seed)
    m = max(m, n) if causal else m
    query, key = rng.normal(size=(2, n, d_model)), rng.normal(size=(2, m, d_model))
    mask = Causal() if causal else None
    allowed = torch.ones(n, m, dtype=torch.bool).tril() if causal else None
    out = mha(query, key, key, mask, method=method)
    with torch.no_grad():
        ref, _ = module(
            torch.from_numpy(query),
            torch.from_numpy(key),
            torch.from_numpy(key),
            attn_mask=None if allowed is None else ~allowed,  # nn.MHA's bool mask: True = block
            need_weights=False,
        )
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref.numpy(), **for_dtype(np.float64))
