"""attnlab.core.reference, the executable spec, against torch autograd: every combination of
the variants (softcap, ALiBi, two-sided window, sinks, a float bias) over every base mask, in
float64, forward, lse and every gradient (q, k, v, bias, sinks).

torch computes the formula of ``variant_refs.torch_variant``, written in torch ops apart from
attnlab; the reference is handed attnlab's mask specs, bool tables and float tables.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_variants import BASES, VARIANTS, make_case

from attnlab.core import reference
from variant_refs import Case, masks_of, torch_variant

TIGHT = {"rtol": 0.0, "atol": 1e-12}
ALL = [
    frozenset(vs) for r in range(len(VARIANTS) + 1) for vs in itertools.combinations(VARIANTS, r)
]


def torch_all(torch, c: Case, g: np.ndarray) -> tuple:
    """(output, lse, gradients by name) of the torch formula, by autograd."""
    leaves = {"q": c.q, "k": c.k, "v": c.v}
    leaves.update({n: getattr(c, n) for n in ("sinks", "bias") if getattr(c, n) is not None})
    t = {n: torch.tensor(a, requires_grad=True) for n, a in leaves.items()}
    out, lse = torch_variant(torch, c, t)
    out.backward(torch.tensor(g))
    return out.detach().numpy(), lse.detach().numpy(), {n: t[n].grad.numpy() for n in t}


def check(torch, c: Case, mask, seed: int) -> None:
    g = np.random.default_rng(seed).normal(size=c.q.shape[:-1] + (c.v.shape[-1],))
    want_out, want_lse, want = torch_all(torch, c, g)
    kw = {"scale": c.scale, "softcap": c.softcap, "sinks": c.sinks}
    out, lse = reference.attention(c.q, c.k, c.v, mask, return_lse=True, **kw)
    np.testing.assert_allclose(out, want_out, **TIGHT)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    np.testing.assert_allclose(lse, want_lse, **TIGHT)
    got = reference.gradients(c.q, c.k, c.v, g, mask, **kw)
    for name in ("q", "k", "v", "bias", "sinks"):
        if name not in want:
            assert got[name] is None, name
            continue
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], **TIGHT, err_msg=name)


@pytest.mark.oracle
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("variants", ALL, ids=lambda vs: "-".join(sorted(vs)) or "plain")
def test_every_variant_combination_matches_torch_autograd(torch, variants, base):
    c = make_case(variants, base, seed=len(variants) * 5 + BASES.index(base), n=6, m=9)
    c.bottom_right = "alibi" in variants  # both alignments of ALiBi's distances
    check(torch, c, masks_of(c), seed=len(variants))


@pytest.mark.oracle
@pytest.mark.parametrize("variants", [frozenset(), frozenset({"sinks", "softcap", "alibi"})])
def test_rows_with_no_key_give_zero_and_minus_infinity(torch, variants):
    # bottom-right causal with more queries than keys: the first rows see no key at all
    c = make_case(variants, "causal", seed=3, n=9, m=5, bottom_right=True)
    check(torch, c, masks_of(c), seed=4)
    out, lse = reference.attention(
        c.q, c.k, c.v, masks_of(c), scale=c.scale, softcap=c.softcap, sinks=c.sinks,
        return_lse=True,
    )  # fmt: skip
    assert not out[..., :4, :].any() and np.isneginf(lse[..., :4]).all()


@pytest.mark.oracle
def test_bool_and_float_arrays_are_masks_as_in_attention(torch):
    c = make_case({"bias", "softcap"}, "none", seed=11, n=5, m=7)
    c.bias = c.bias.copy()
    c.bias[..., 1, 2:] = -np.inf  # blocked cells inside the float table itself
    check(torch, c, c.bias, seed=2)  # a raw float array: its gradient is "bias"
    c = make_case(set(), "padding", seed=12, n=5, m=7)
    allowed = np.arange(7)[None, None, None, :] < np.array(c.lengths)[:, None, None, None]
    check(torch, c, allowed, seed=3)  # a raw bool table: no bias gradient
