"""attnlab against ``jax.nn.dot_product_attention``, the second oracle.

JAX writes q as (B, T, N, H); attnlab as (B, h, N, d_k), heads leading: ``_jax`` swaps axes 1
and 2 on the way in and out. Every JAX mask here is spelled with JAX's own keywords, built from
their definitions (never from attnlab's rendering); attnlab gets them through ``from_jax``. JAX
runs its softmax in float32 whatever the input dtype (``_dot_product_attention_core``), so the
float64 comparisons use the float32 tolerance: a wrong mask is off by O(1), far outside it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.errors import FullyMaskedRowError
from attnlab.masks import Causal, Dense, Padding, SlidingWindow, from_jax, to_jax
from tolerances import F32

pytestmark = pytest.mark.jax

DTYPES = ["float32", "float64"]
KINDS = [
    "none",
    "causal",
    "window_left",
    "window_int",
    "window_left_right",
    "causal_window",
    "kv_lengths",
    "causal_kv_lengths",
    "window_kv_lengths",
    "mask_batch",
    "mask_heads",
    "bias",
]


def _jax(jax, q, k, v, **kwargs) -> np.ndarray:
    """JAX's attention on attnlab-layout arrays: q (B, h, T, d), k and v (B, h|1, S, d)."""
    q, k, v = (np.swapaxes(a, 1, 2) for a in (q, k, v))  # (B, T, h, d), (B, S, h|1, d)
    out = jax.nn.dot_product_attention(q, k, v, **kwargs)  # (B, T, h, d)
    return np.swapaxes(np.asarray(out), 1, 2)  # (B, h, T, d)


def _problem(rng, dtype, b=2, h=2, t=4, s=6, d=3):
    """Random q, k, v in attnlab's layout. JAX compiles once per shape and static keyword (about
    a second each on a busy CPU), so the tests share a few shapes and vary the values."""
    q, k, v = (rng.normal(size=(b, h, x, d)).astype(dtype) for x in (t, s, s))
    return q, k, v, t, s


def _jax_kwargs(kind: str, rng, b: int, h: int, t: int, s: int) -> dict:
    """A JAX mask of each kind, from JAX's documented meaning of its keywords (S >= T, so every
    band row keeps a key). Random values live in arrays, which JAX does not compile for."""
    left, right = 2, 1
    lengths = rng.integers(1, s + 1, size=b).astype(np.int32)
    if kind == "none":
        return {}
    if kind == "causal":
        return {"is_causal": True}
    if kind == "window_left":
        return {"local_window_size": (left, 0)}
    if kind == "window_int":
        return {"local_window_size": left}
    if kind == "window_left_right":
        return {"local_window_size": (left, right)}
    if kind == "causal_window":
        return {"is_causal": True, "local_window_size": (left, right)}
    if kind == "kv_lengths":
        return {"key_value_seq_lengths": lengths}
    if kind == "causal_kv_lengths":
        return {"is_causal": True, "key_value_seq_lengths": lengths}
    if kind == "window_kv_lengths":  # a left side of T - 1 keeps key 0 in every row
        return {"local_window_size": (t - 1, right), "key_value_seq_lengths": lengths}
    if kind in ("mask_batch", "mask_heads"):
        shape = (b, 1, t, s) if kind == "mask_batch" else (1, h, t, s)
        mask = rng.random(shape) < 0.5
        mask[..., rng.integers(0, s)] = True  # a key for every row
        return {"mask": mask}
    if kind == "bias":
        bias = rng.normal(size=(1, h, t, s))
        bias[rng.random(bias.shape) < 0.3] = -np.inf
        bias[..., 0] = 0.0
        return {"bias": bias}
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_from_jax_matches_jax(jax_x64, kind, dtype):
    rng = np.random.default_rng(KINDS.index(kind) * 2 + DTYPES.index(dtype))
    for _ in range(2):
        q, k, v, t, s = _problem(rng, dtype)
        kwargs = _jax_kwargs(kind, rng, 2, 2, t, s)
        if "bias" in kwargs:
            kwargs["bias"] = kwargs["bias"].astype(dtype)
        mask = from_jax(**kwargs, n=t, m=s)
        out = al.attention(q, k, v, mask=mask)
        assert out.dtype == np.dtype(dtype)
        ref = _jax(jax_x64, q, k, v, **kwargs)
        assert ref.dtype == np.dtype(dtype)
        np.testing.assert_allclose(out, ref, **F32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "spec",
    [
        Causal(),
        Causal(align="bottom_right"),
        SlidingWindow(2),
        SlidingWindow(2, align="bottom_right"),  # a window left of the diagonal: JAX's mask
        Padding([5, 2]),
        Causal(align="bottom_right") + Padding([6, 4]),
        SlidingWindow(3) + Padding([2, 6]),
        Dense(np.array([[True, False, True, True, False, True]])),
    ],
    ids=repr,
)
def test_to_jax_gives_jax_attnlabs_output(jax_x64, spec, dtype):
    rng = np.random.default_rng(3)
    q, k, v, t, s = _problem(rng, dtype)
    kwargs = to_jax(spec, t, s)
    np.testing.assert_allclose(
        _jax(jax_x64, q, k, v, **kwargs), al.attention(q, k, v, mask=spec), **F32
    )


def test_bottom_right_window_needs_jaxs_mask(jax):
    """A window whose left side would be negative is no JAX window: it goes to ``mask``."""
    kwargs = to_jax(SlidingWindow(2, align="bottom_right"), 1, 6)
    assert set(kwargs) == {"mask"}
    assert kwargs["mask"].shape == (1, 1, 1, 6)
    assert kwargs["mask"][0, 0, 0].tolist() == [False] * 4 + [True] * 2


def test_single_kv_head_broadcasts_like_jax_mqa(jax):
    rng = np.random.default_rng(5)
    q = rng.normal(size=(2, 4, 4, 3)).astype(np.float32)  # (B, h, T, d)
    k, v = (rng.normal(size=(2, 1, 6, 3)).astype(np.float32) for _ in range(2))  # one head
    out = al.attention(q, k, v, mask=from_jax(is_causal=True))
    np.testing.assert_allclose(out, _jax(jax, q, k, v, is_causal=True), **F32)


def test_fully_masked_row_jax_averages_v_attnlab_raises(jax):
    """JAX gives a row with no allowed key a uniform softmax, the mean of V; attnlab refuses."""
    rng = np.random.default_rng(1)
    q, k, v, t, s = _problem(rng, "float32")
    mask = np.ones((1, 1, t, s), dtype=bool)
    mask[..., 1, :] = False  # query 1 may see no key
    ref = _jax(jax, q, k, v, mask=mask)
    np.testing.assert_allclose(
        ref[:, :, 1], np.broadcast_to(v.mean(axis=-2), ref[:, :, 1].shape), **F32
    )
    with pytest.raises(FullyMaskedRowError, match="query row") as info:
        al.attention(q, k, v, mask=from_jax(mask))
    assert all(row[-1] == 1 for row in info.value.rows)


def test_query_lengths_jax_zeroes_rows_attnlab_raises(jax):
    """JAX zeroes the outputs of query rows past query_seq_lengths; attnlab blocks those rows
    and raises, and the real rows agree with JAX."""
    rng = np.random.default_rng(2)
    q, k, v, t, s = _problem(rng, "float32")
    kv = np.array([5, 3], dtype=np.int32)
    kwargs = {"query_seq_lengths": np.array([2, 2], dtype=np.int32), "key_value_seq_lengths": kv}
    ref = _jax(jax, q, k, v, **kwargs)
    assert not ref[:, :, 2:].any()
    mask = from_jax(**kwargs, n=t)
    assert mask.allowed(t, s, lead_ndim=2)[:, :, 2:].sum() == 0
    with pytest.raises(FullyMaskedRowError):
        al.attention(q, k, v, mask=mask)
    real = al.attention(q[:, :, :2], k, v, mask=from_jax(key_value_seq_lengths=kv))
    np.testing.assert_allclose(real, ref[:, :, :2], **F32)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(KINDS), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_from_jax_matches_jax_random(jax, kind, dtype, seed):
    """Random values on the parametrized tests' shapes (JAX's compiled programs are reused)."""
    rng = np.random.default_rng(seed)
    b, h = 2, 2
    q, k, v, t, s = _problem(rng, dtype, b=b, h=h)
    kwargs = _jax_kwargs(kind, rng, b, h, t, s)
    with jax.enable_x64(True):
        ref = _jax(jax, q, k, v, **kwargs)
    out = al.attention(q, k, v, mask=from_jax(**kwargs, n=t, m=s))
    np.testing.assert_allclose(out, ref, **F32)
