"""Multi-head attention (§6.6): torch.nn.MultiheadAttention, a per-head loop, shapes and seeds."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.masks import Causal, Padding
from reference import loop_batched
from tolerances import F64, for_dtype

B, N, M, E, H = 2, 3, 4, 8, 2
LENGTHS = [4, 2]
MASKS = ["none", "bool", "float", "key_padding", "bool+key_padding", "per_head", "causal"]


def _torch_masks(torch, kind: str, dtype, rng):
    """(torch kwargs, attnlab mask) for one kind. torch's bool masks mark the BLOCKED pairs."""
    blocked = rng.random((N, M)) < 0.4
    blocked[:, 0] = False
    padded = torch.arange(M)[None, :] >= torch.tensor(LENGTHS)[:, None]  # (B, M)
    if kind == "none":
        return {}, None
    if kind == "bool":
        return {"attn_mask": torch.from_numpy(blocked)}, ~blocked
    if kind == "float":
        bias = rng.normal(size=(N, M))
        bias[blocked] = -np.inf
        return {"attn_mask": torch.from_numpy(bias).to(dtype)}, bias
    if kind == "key_padding":
        return {"key_padding_mask": padded}, Padding(LENGTHS)
    if kind == "bool+key_padding":
        kwargs = {"attn_mask": torch.from_numpy(blocked), "key_padding_mask": padded}
        return kwargs, al.masks.Dense(~blocked) + Padding(LENGTHS)
    if kind == "per_head":
        per = rng.random((B, H, N, M)) < 0.4
        per[..., 0] = False
        # torch wants (B * h, N, M), batch-major: row b * h + i is batch b, head i.
        return {"attn_mask": torch.from_numpy(per.reshape(B * H, N, M))}, ~per
    blocked = torch.ones(N, M, dtype=torch.bool).triu(1)  # causal, N < M: top-left
    return {"attn_mask": blocked}, Causal()


@pytest.mark.oracle
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dims", [(None, None), (5, 7)], ids=["same-dims", "kdim-vdim"])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_from_torch_matches_torch(torch, kind, bias, dims, batch_first, dtype):
    kdim, vdim = dims
    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    module = torch.nn.MultiheadAttention(
        E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=batch_first, dtype=tdtype
    ).eval()
    if bias:  # torch starts its biases at zero; make them count
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    rng = np.random.default_rng(1)
    query = rng.normal(size=(B, N, E)).astype(dtype)  # batch-first, as attnlab takes it
    key = rng.normal(size=(B, M, kdim or E)).astype(dtype)
    value = rng.normal(size=(B, M, vdim or E)).astype(dtype)
    kwargs, mask = _torch_masks(torch, kind, tdtype, rng)

    def to_torch(a):  # seq-first modules take (N, B, E)
        return torch.from_numpy(a if batch_first else np.ascontiguousarray(a.swapaxes(0, 1)))

    with torch.no_grad():
        ref, ref_weights = module(
            to_torch(query),
            to_torch(key),
            to_torch(value),
            need_weights=True,
            average_attn_weights=False,
            **kwargs,
        )
    ref = ref.numpy() if batch_first else ref.numpy().swapaxes(0, 1)

    mha = al.MultiHeadAttention.from_torch(module)
    assert (mha.kdim, mha.vdim) == (kdim or E, vdim or E)
    assert (mha.b_q is None) == (not bias)
    out, weights = mha(query, key, value, mask=mask, return_weights=True)
    assert out.shape == (B, N, E) and weights.shape == (B, H, N, M)
    tol = for_dtype(dtype)
    np.testing.assert_allclose(out, ref, **tol)
    np.testing.assert_allclose(weights, ref_weights.numpy(), **tol)


# -- the functional form against a per-head loop -------------------------------------------------


def loop_multi_head(query, key, value, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, allowed=None):
    """§6.6 written out: project per head, attend (by loops), concatenate, mix with W^O."""
    heads = []
    for i in range(w_q.shape[0]):
        out, _ = loop_batched(
            query @ w_q[i] + b_q[i], key @ w_k[i] + b_k[i], value @ w_v[i] + b_v[i], allowed
        )
        heads.append(out)
    return np.concatenate(heads, axis=-1) @ w_o + b_o


@pytest.mark.parametrize("seed", range(3))
def test_functional_matches_a_loop_when_h_dv_differs_from_d_model(seed):
    rng = np.random.default_rng(seed)
    h, d_model, d_k, d_v, kdim, vdim, d_out = 3, 4, 5, 2, 3, 6, 7  # h·d_v = 6 != d_model
    query = rng.normal(size=(2, N, d_model))
    key, value = rng.normal(size=(2, M, kdim)), rng.normal(size=(2, M, vdim))
    w = {
        "w_q": rng.normal(size=(h, d_model, d_k)),
        "w_k": rng.normal(size=(h, kdim, d_k)),
        "w_v": rng.normal(size=(h, vdim, d_v)),
        "w_o": rng.normal(size=(h * d_v, d_out)),
        "b_q": rng.normal(size=(h, d_k)),
        "b_k": rng.normal(size=(h, d_k)),
        "b_v": rng.normal(size=(h, d_v)),
        "b_o": rng.normal(size=d_out),
    }
    out, weights = al.multi_head_attention(
        query, key, value, mask=Padding([4, 1]), return_weights=True, **w
    )
    ref = loop_multi_head(query, key, value, **w, allowed=lambda b, i, j: j < (4, 1)[b[0]])
    assert out.shape == (2, N, d_out) and weights.shape == (2, h, N, M)
    np.testing.assert_allclose(out, ref, **F64)
    np.testing.assert_array_equal(weights[1, :, :, 1:], 0.0)


# -- the class: shapes, defaults, seeds ---------------------------------------------------------


def test_default_widths_and_weight_shapes():
    mha = al.MultiHeadAttention(12, 3, seed=0)
    assert (mha.d_k, mha.d_v, mha.kdim, mha.vdim) == (4, 4, 12, 12)
    assert mha.w_q.shape == (3, 12, 4) and mha.w_k.shape == (3, 12, 4)
    assert mha.w_v.shape == (3, 12, 4) and mha.w_o.shape == (12, 12)
    assert mha.b_q.shape == (3, 4) and mha.b_o.shape == (12,)

    wide = al.MultiHeadAttention(6, 4, d_k=2, d_v=5, kdim=3, vdim=9, bias=False, seed=0)
    assert wide.w_q.shape == (4, 6, 2) and wide.w_k.shape == (4, 3, 2)
    assert wide.w_v.shape == (4, 9, 5) and wide.w_o.shape == (20, 6)  # h·d_v = 20 != 6
    assert wide.b_q is None and wide.b_o is None
    rng = np.random.default_rng(0)
    out, weights = wide(
        rng.normal(size=(5, 6)),
        rng.normal(size=(7, 3)),
        rng.normal(size=(7, 9)),
        return_weights=True,
    )
    assert out.shape == (5, 6) and weights.shape == (4, 5, 7)


def test_weights_keep_every_leading_axis():
    mha = al.MultiHeadAttention(8, 4, seed=1)
    x = np.random.default_rng(2).normal(size=(2, 3, 5, 8))  # (..., N, d_model)
    out, weights = mha(x, mask=Causal(), return_weights=True)
    assert out.shape == (2, 3, 5, 8)
    assert weights.shape == (2, 3, 4, 5, 5)  # (..., h, N, M)
    np.testing.assert_allclose(weights.sum(-1), 1.0, **F64)
    assert np.all(np.triu(weights, 1) == 0.0)


def test_key_and_value_default_to_query():
    mha = al.MultiHeadAttention(8, 2, seed=3)
    x = np.random.default_rng(4).normal(size=(4, 8))
    np.testing.assert_array_equal(mha(x), mha(x, x, x))
    np.testing.assert_array_equal(mha(x, x[:2]), mha(x, x[:2], x[:2]))


def test_seeds_are_reproducible():
    a, b = al.MultiHeadAttention(8, 2, seed=5), al.MultiHeadAttention(8, 2, seed=5)
    c = al.MultiHeadAttention(8, 2, seed=np.random.default_rng(5))
    for name in ("w_q", "w_k", "w_v", "w_o"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
    assert not np.array_equal(a.w_q, al.MultiHeadAttention(8, 2, seed=6).w_q)


def test_multi_head_self_attention_is_permutation_equivariant():
    mha = al.MultiHeadAttention(6, 3, seed=7)
    x = np.random.default_rng(8).normal(size=(5, 6))
    perm = np.random.default_rng(9).permutation(5)
    np.testing.assert_allclose(mha(x[perm]), mha(x)[perm], **F64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_output_and_weights_keep_the_input_dtype(dtype):
    mha = al.MultiHeadAttention(8, 2, seed=0)  # float64 weights
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype(dtype)
    out, weights = mha(x, return_weights=True)
    assert out.dtype == dtype and weights.dtype == dtype
    ref = mha(x.astype(np.float64))
    np.testing.assert_allclose(out, ref, **for_dtype(dtype))


def test_long_input_goes_blockwise_and_never_holds_the_head_table():
    # mha(x) used to build (h, N, M) weights even when only the output was wanted.
    import tracemalloc

    n, d_model, h = 4096, 64, 8
    mha = al.MultiHeadAttention(d_model, h, seed=0)
    x = np.random.default_rng(0).standard_normal((n, d_model))
    table = h * n * n * 8  # bytes of the (h, N, M) float64 table: 1 GiB
    tracemalloc.start()
    try:
        out = mha(x, mask=al.masks.Causal(), memory_budget=8 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < table / 16, f"peak {peak / 2**20:.0f} MiB against a {table / 2**20:.0f} MiB table"
    dense = mha(x, mask=al.masks.Causal(), method="dense")
    np.testing.assert_allclose(out, dense, rtol=1e-12, atol=1e-13)


def test_mha_weights_over_the_budget_are_refused_not_computed():
    mha = al.MultiHeadAttention(8, 2, seed=0)
    x = np.ones((64, 8))
    with pytest.raises(al.AttnlabError, match="memory budget"):
        mha(x, return_weights=True, memory_budget=1024)
    _, w = mha(x, return_weights=True, method="dense", memory_budget=1024)
    assert w.shape == (2, 64, 64)
