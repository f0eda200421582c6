"""The variants backward: attention_backward with softcap, ALiBi, windows, sinks, a float
bias, a saved lse, fully_masked and wrt, against torch.autograd through ``variant_refs``'s
formula (float64, 1e-9), on the dense and blockwise kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_variants import COMBOS, combo_id, make_case

import attnlab as al
from variant_refs import Case, masks_of, torch_variant

GRAD = {"rtol": 0.0, "atol": 1e-9}
WRT = ("q", "k", "v", "bias", "sinks")


def torch_grads(torch, c: Case, g: np.ndarray, names) -> dict:
    leaves = {"q": c.q, "k": c.k, "v": c.v}
    if c.sinks is not None:
        leaves["sinks"] = c.sinks
    if c.bias is not None:
        leaves["bias"] = c.bias
    tensors = {n: torch.tensor(a, requires_grad=True) for n, a in leaves.items()}
    out, _ = torch_variant(torch, c, tensors)
    out.backward(torch.tensor(g))
    return {n: tensors[n].grad.numpy() for n in names}


def attnlab_grads(c: Case, g, names, **kw):
    return al.attention_backward(
        c.q, c.k, c.v, g, masks_of(c), scale=c.scale, softcap=c.softcap, sinks=c.sinks,
        fully_masked="zero", wrt=names, **kw,
    )  # fmt: skip


@pytest.mark.oracle
@pytest.mark.parametrize("variants, base", COMBOS[::2], ids=combo_id)
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_gradients_of_each_variant_match_torch(torch, variants, base, method):
    c = make_case(variants, base, seed=9, n=6, m=10, bottom_right="alibi" in variants)
    g = np.random.default_rng(1).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    names = [w for w in WRT if w in ("q", "k", "v") or getattr(c, w) is not None]
    want = torch_grads(torch, c, g, names)
    got = attnlab_grads(c, g, tuple(names), method=method, block_size=(2, 4))
    for name, a in zip(names, got, strict=True):
        assert a.shape == want[name].shape, name
        np.testing.assert_allclose(a, want[name], **GRAD, err_msg=name)


@pytest.mark.oracle
@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_gradients_with_every_variant_at_once(torch, method):
    c = make_case({"softcap", "alibi", "sinks", "bias", "window"}, "padding", seed=4, n=9, m=12)
    c.slopes = np.random.default_rng(2).uniform(0.1, 0.5, size=(2, 3))  # (B, h) slopes
    g = np.random.default_rng(3).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    want = torch_grads(torch, c, g, WRT)
    # In any order: wrt says which, and in what order.
    order = ("sinks", "v", "bias", "q", "k")
    got = attnlab_grads(c, g, order, method=method, block_size=(4, 5), threads=2)
    for name, a in zip(order, got, strict=True):
        np.testing.assert_allclose(a, want[name], **GRAD, err_msg=name)


@pytest.mark.oracle
@pytest.mark.parametrize("method", ["dense", "blockwise", "auto"])
def test_a_capped_bias_of_the_scores_own_shape_has_its_own_gradient(torch, method):
    # A bias as large as the score table needs no sum back to its shape, so its gradient is
    # the kernel's own dS table: the cap's factor 1 - tanh² must not reach it afterwards.
    c = make_case({"softcap", "bias"}, "none", seed=5, n=9, m=9)
    c.softcap = 3.0
    c.bias = np.random.default_rng(5).normal(size=c.q.shape[:-1] + (c.k.shape[-2],))
    g = np.random.default_rng(6).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    want = torch_grads(torch, c, g, WRT[:4])
    got = attnlab_grads(c, g, WRT[:4], method=method)
    for name, a in zip(WRT[:4], got, strict=True):
        np.testing.assert_allclose(a, want[name], **GRAD, err_msg=name)


@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_a_saved_lse_gives_the_same_gradients(method):
    c = make_case({"softcap", "sinks", "alibi"}, "causal", seed=6, n=20, m=20)
    g = np.random.default_rng(4).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    _, lse = al.attention(
        c.q, c.k, c.v, masks_of(c), scale=c.scale, softcap=c.softcap, sinks=c.sinks,
        return_lse=True,
    )  # fmt: skip
    fresh = attnlab_grads(c, g, WRT[:3] + ("sinks",), method=method, block_size=8)
    saved = attnlab_grads(c, g, WRT[:3] + ("sinks",), method=method, block_size=8, lse=lse)
    for a, b in zip(fresh, saved, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_the_blockwise_kernel_reads_a_saved_lse():
    # A wrong lse changes the blockwise gradients: the row sums really come from it.
    c = make_case({"softcap"}, "none", seed=7)
    g = np.ones(c.q.shape[:-1] + (c.v.shape[-1],))
    _, lse = al.attention(c.q, c.k, c.v, scale=c.scale, softcap=c.softcap, return_lse=True)
    right = attnlab_grads(c, g, ("v",), method="blockwise", lse=lse)[0]
    wrong = attnlab_grads(c, g, ("v",), method="blockwise", lse=lse + 1.0)[0]
    np.testing.assert_allclose(wrong, right * np.exp(-1.0), rtol=1e-12)


@pytest.mark.parametrize("method", ["dense", "blockwise"])
def test_fully_masked_zero_rows_get_zero_gradient(method):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 2))
    g = rng.normal(size=(2, 4, 2))
    mask = al.masks.Padding([0, 5])  # batch element 0 allows no key
    with pytest.raises(al.errors.FullyMaskedRowError):
        al.attention_backward(q, k, v, g, mask, method=method)
    dq, dk, dv = al.attention_backward(q, k, v, g, mask, method=method, fully_masked="zero")
    assert not dq[0].any() and not dk[0].any() and not dv[0].any()
    want = al.attention_backward(q[1], k[1], v[1], g[1])
    for a, b in zip((dq[1], dk[1], dv[1]), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_the_bias_gradient_sums_to_the_masks_shape():
    c = make_case({"bias"}, "none", seed=8)
    c.bias = c.bias[:1, :, :1, :]  # (1, 1, 1, M): one bias per key, broadcast everywhere
    g = np.random.default_rng(5).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    full = make_case({"bias"}, "none", seed=8)
    full.bias = np.broadcast_to(c.bias, full.q.shape[:2] + (full.q.shape[2], c.k.shape[2]))
    full.bias = np.ascontiguousarray(full.bias)
    for method in ("dense", "blockwise"):
        (small,) = attnlab_grads(c, g, ("bias",), method=method, block_size=3)
        (big,) = attnlab_grads(full, g, ("bias",), method=method, block_size=3)
        assert small.shape == c.bias.shape
        np.testing.assert_allclose(small, big.sum(axis=(0, 1, 2), keepdims=True), atol=1e-12)


X = np.ones((2, 3, 4, 5))


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"wrt": ("q", "x")}, al.AttnlabError, "wrt"),
        ({"wrt": ()}, al.AttnlabError, "wrt"),
        ({"wrt": ("sinks",)}, al.AttnlabError, "sinks"),
        ({"wrt": ("bias",)}, al.AttnlabError, "bias"),
        ({"lse": np.zeros((2, 3, 5))}, al.errors.ShapeError, "lse"),
        ({"lse": np.full((2, 3, 4), np.nan)}, al.AttnlabError, "lse"),
        ({"fully_masked": "keep"}, al.AttnlabError, "fully_masked"),
        ({"softcap": -2.0}, al.AttnlabError, "softcap"),
        ({"sinks": np.ones(2)}, al.errors.ShapeError, "sinks"),
    ],
    ids=str,
)
def test_bad_backward_arguments_are_named(kwargs, error, word):
    with pytest.raises(error, match=word):
        al.attention_backward(X, X, X, X, **kwargs)


def test_the_trace_keeps_the_gradients_of_softcap_and_sinks():
    c = make_case({"softcap", "sinks", "alibi"}, "causal", seed=12)
    g = np.random.default_rng(6).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    t = al.trace_attention(
        c.q, c.k, c.v, masks_of(c), scale=c.scale, softcap=c.softcap, sinks=c.sinks,
        grad_output=g,
    )  # fmt: skip
    want = attnlab_grads(c, g, ("q", "k", "v", "sinks"))
    for a, b in zip((t.grad_q, t.grad_k, t.grad_v, t.grad_sinks), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
