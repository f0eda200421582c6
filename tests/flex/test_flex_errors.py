"""Bad input to flex attention: one AttnlabError naming the argument, never a traceback from
inside attnlab and never NaN; and a hypothesis fuzz of hostile score_mods and mask_mods."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab import flex
from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError

RNG = np.random.default_rng(7)
Q, K, V = RNG.standard_normal((2, 4, 9, 3)), RNG.standard_normal((2, 2, 11, 3)), RNG.standard_normal((2, 2, 11, 5))  # fmt: skip
CAUSAL = al.create_block_mask(flex.causal(2), None, None, 9, 11, BLOCK_SIZE=4)


def boom(*args):
    raise KeyError("no such head")


BAD_CALLS = [
    ("score_mod", AttnlabError, dict(score_mod=boom)),
    ("score_mod", NonFiniteInputError, dict(score_mod=lambda s, b, h, q, kv: s + np.where(q == kv, np.nan, 0.0))),
    ("score_mod", NonFiniteInputError, dict(score_mod=lambda s, b, h, q, kv: np.where(q == 3, np.inf, s))),
    ("score_mod", ShapeError, dict(score_mod=lambda s, b, h, q, kv: s[..., :2])),
    ("score_mod", AttnlabError, dict(score_mod=lambda s, b, h, q, kv: s.astype(str))),
    ("score_mod", AttnlabError, dict(score_mod=lambda s, b, h, q, kv: None)),
    ("score_mod", AttnlabError, dict(score_mod=3.0)),
    ("score_mod", ShapeError, dict(score_mod=flex.alibi([0.5, 0.5]))),
    ("block_mask", ShapeError, dict(block_mask=al.create_block_mask(flex.causal(), None, None, 9, 9))),
    ("block_mask", ShapeError, dict(block_mask=al.create_block_mask(flex.causal(), 3, None, 9, 11))),
    ("block_mask", AttnlabError, dict(block_mask=np.ones((9, 11), bool))),
    ("heads", ShapeError, dict(enable_gqa=False)),
    ("scale", AttnlabError, dict(scale=float("nan"))),
    ("enable_gqa", AttnlabError, dict(enable_gqa="yes")),
    ("query", NonFiniteInputError, dict(query=np.where(Q > 2, np.nan, Q))),
    ("value", ShapeError, dict(value=V[:, :, :5])),
    ("query", ShapeError, dict(query=Q[0])),
    ("key", AttnlabError, dict(key=K.astype(np.float16))),
]  # fmt: skip


@pytest.mark.parametrize(("name", "error", "change"), BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])  # fmt: skip
def test_bad_input_is_one_error_naming_the_argument(name, error, change):
    call = dict(query=Q, key=K, value=V, block_mask=CAUSAL, enable_gqa=True) | change
    with pytest.raises(error, match=r"expected .*" + ("" if name == "heads" else name)) as info:
        al.flex_attention(**call)
    assert "but got" in str(info.value)


def test_a_mask_mod_that_returns_non_booleans_or_raises_is_refused():
    with pytest.raises(AttnlabError, match=r"expected mask_mod to return booleans.*int64"):
        al.create_block_mask(lambda b, h, q, kv: q - kv, None, None, 8, 8)
    with pytest.raises(AttnlabError, match=r"expected mask_mod.*but got ZeroDivisionError"):
        al.create_block_mask(lambda b, h, q, kv: 1 / 0, None, None, 8, 8)
    with pytest.raises(ShapeError, match="expected mask_mod to return an array broadcastable"):
        al.create_block_mask(lambda b, h, q, kv: np.ones((3, 3), bool), None, None, 8, 8)
    with pytest.raises(AttnlabError, match="expected BLOCK_SIZE"):
        al.create_block_mask(flex.causal(), None, None, 8, 8, BLOCK_SIZE=(4, 0))
    with pytest.raises(AttnlabError, match="expected Q_LEN to be a positive integer"):
        al.create_block_mask(flex.causal(), None, None, 0, 8)


@pytest.mark.parametrize("mod", [None, flex.alibi([0.1, 0.2, 0.3, 0.4]), lambda s, b, h, q, kv: s])
@pytest.mark.parametrize("turn", ["raises", "ints", "wrong shape"])
def test_a_mask_mod_that_turns_hostile_inside_a_kernel_is_one_error(method, mod, turn):
    # Fine while create_block_mask runs it, hostile when the kernel renders a partial tile.
    armed = []

    def rule(b, h, q, kv):
        return HOSTILE_MASK[turn](b, h, q, kv) if armed else kv <= q + 2

    bm = al.create_block_mask(rule, None, None, 9, 11, BLOCK_SIZE=4)
    armed.append(True)
    with pytest.raises(AttnlabError, match="expected mask_mod") as info:
        al.flex_attention(Q, K, V, mod, bm, enable_gqa=True)
    assert "but got" in str(info.value)
    if mod is None or isinstance(mod, flex._mods.ALiBi):
        with pytest.raises(AttnlabError, match="expected mask_mod"):
            al.flex_attention_backward(Q, K, V, np.ones((2, 4, 9, 5)), mod, bm, enable_gqa=True)


def test_backward_refuses_what_it_cannot_differentiate():
    g = np.ones((2, 4, 9, 5))
    with pytest.raises(
        AttnlabError, match=r"expected score_mod to be None or one of .*forward only"
    ):
        al.flex_attention_backward(Q, K, V, g, lambda s, b, h, q, kv: s, CAUSAL, enable_gqa=True)
    with pytest.raises(ShapeError, match=r"expected grad_out of the output's shape \(2, 4, 9, 5\)"):
        al.flex_attention_backward(Q, K, V, g[..., :4], None, CAUSAL, enable_gqa=True)


def test_named_mods_check_their_arguments():
    for make, bad, word in [
        (flex.softcap, 0.0, "cap"),
        (flex.alibi, [[np.inf]], "slopes"),
        (flex.relative_bias, [1.0, 2.0], "table"),
        (flex.sliding_window, -1, "left"),
        (flex.document, [0.5, 1.5], "q_docs"),
        (flex.causal, 1.5, "offset"),
    ]:
        with pytest.raises(AttnlabError, match=f"expected .*{word}"):
            make(bad)


# -- fuzz: hostile mods --------------------------------------------------------------------------

HOSTILE_SCORE = {
    "raises": lambda s, b, h, q, kv: {}["missing"],
    "nan somewhere": lambda s, b, h, q, kv: np.where((q + kv) % 3 == 0, np.nan, s),
    "+inf": lambda s, b, h, q, kv: s + np.where(q >= kv, np.inf, 0.0),
    "wrong shape": lambda s, b, h, q, kv: s[..., :1, :1].repeat(2, axis=-1),
    "transposed": lambda s, b, h, q, kv: np.swapaxes(s, -1, -2),
    "strings": lambda s, b, h, q, kv: np.full(s.shape, "x"),
    "object": lambda s, b, h, q, kv: object(),
    "complex": lambda s, b, h, q, kv: s + 1j,
    "recursion": lambda s, b, h, q, kv: (_ for _ in ()).throw(RecursionError("deep")),
}
HOSTILE_MASK = {
    "raises": lambda b, h, q, kv: [][0],
    "ints": lambda b, h, q, kv: (q >= kv).astype(int),
    "floats": lambda b, h, q, kv: np.where(q >= kv, 1.0, np.nan),
    "wrong shape": lambda b, h, q, kv: np.ones((2, 3, 5), bool),
    "None": lambda b, h, q, kv: None,
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    score=st.sampled_from(sorted(HOSTILE_SCORE) + [None]),
    mask=st.sampled_from(sorted(HOSTILE_MASK) + [None]),
    n=st.integers(1, 12),
    m=st.integers(1, 12),
    block=st.integers(1, 8),
    gqa=st.booleans(),
)
def test_hostile_mods_give_one_typed_error_never_a_traceback(score, mask, n, m, block, gqa):
    heads, kv_heads = (4, 2) if gqa else (2, 2)
    q = RNG.standard_normal((2, heads, n, 3))
    k, v = RNG.standard_normal((2, kv_heads, m, 3)), RNG.standard_normal((2, kv_heads, m, 2))
    try:
        bm = None
        if mask is not None:
            bm = al.create_block_mask(HOSTILE_MASK[mask], 2, heads, n, m, BLOCK_SIZE=block)
        mod = None if score is None else HOSTILE_SCORE[score]
        out, lse = al.flex_attention(q, k, v, mod, bm, enable_gqa=gqa, return_lse=True)
    except AttnlabError as exc:
        assert str(exc).startswith("expected ") and "\n" not in str(exc)
        return
    # Only harmless mods get here (a +inf or NaN on pairs the mask blocks, say): no NaN out.
    assert np.isfinite(out).all() and not np.isnan(lse).any() and not np.isposinf(lse).any()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scale_q=st.sampled_from([1e-300, 1e-30, 1.0, 1e30, 1e160, 1e300]),
    scale_v=st.sampled_from([1e-300, 1.0, 1e300]),
    mod=st.sampled_from(["none", "softcap", "alibi", "arbitrary"]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_extreme_inputs_give_finite_results_or_one_typed_error(scale_q, scale_v, mod, dtype):
    mods = {"none": None, "softcap": flex.softcap(5.0), "alibi": flex.alibi([1.0, 2.0]),
            "arbitrary": lambda s, b, h, q, kv: s - 0.5 * h}  # fmt: skip
    with np.errstate(over="ignore", under="ignore"):  # 1e300 is inf in float32: refused below
        q = (RNG.standard_normal((1, 2, 6, 3)) * scale_q).astype(dtype)
        k = (RNG.standard_normal((1, 2, 7, 3)) * scale_q).astype(dtype)
        v = (RNG.standard_normal((1, 2, 7, 2)) * scale_v).astype(dtype)
    bm = al.create_block_mask(flex.causal(1), None, None, 6, 7, BLOCK_SIZE=4)
    try:
        # Any RuntimeWarning is an error too (pytest's filterwarnings): no overflow goes unseen.
        out, lse = al.flex_attention(q, k, v, mods[mod], bm, return_lse=True)
    except AttnlabError as exc:
        assert str(exc).startswith("expected ") and "\n" not in str(exc)
        return
    assert np.isfinite(out).all() and np.isfinite(lse).all()
