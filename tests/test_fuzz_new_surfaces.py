"""Hypothesis over the surfaces added beside the models and kernels: hooks that misbehave,
``generate`` with careless arguments, ``merge_attention_states`` with mismatched or hostile
states, FlashMLA's paged cache with block tables out of range, and FP8 descales of every
wrong shape and value.

Each property: an answer (finite where the inputs are) or one ``AttnlabError`` naming what is
wrong, never another exception, a NaN or a hang. ``ATTNLAB_HYPOTHESIS_PROFILE=fuzz`` (``make
fuzz``) scales the example counts; docs/reliability.md records a run.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
import attnlab.models as m
from attnlab.errors import AttnlabError
from attnlab.flash import flash_attn_func, flash_mla_with_kvcache

FUZZ = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
WEIRD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=5), st.lists(st.integers(-3, 3), max_size=3),
)  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = m.write_tiny_gpt2(tmp_path_factory.mktemp("fuzz") / "gpt2", layers=2, d_model=16,
                               heads=2, positions=24)  # fmt: skip
    return m.load(folder, dtype="float64")


def _answer_or_refusal(fn):
    """The call's answer, or None when it refused with an AttnlabError (anything else raises)."""
    try:
        return fn()
    except AttnlabError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()[:200]
        return None


# -- hooks ------------------------------------------------------------------------------------

HOOKED = ["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_pattern",
          "blocks.1.hook_mlp_out", "ln_final.hook_normalized", "hook_embed"]  # fmt: skip


@st.composite
def _hook(draw):
    kind = draw(st.sampled_from(["raise", "nan", "inf", "shape", "type", "keep", "scale"]))

    def fn(value, name):
        if kind == "raise":
            raise RuntimeError("a hook that fails")
        if kind in ("nan", "inf"):
            out = np.array(value, copy=True)
            out.flat[0] = np.nan if kind == "nan" else np.inf
            return out
        if kind == "shape":
            return np.zeros(value.shape[:-1] + (value.shape[-1] + 1,))
        if kind == "type":
            return "not an array"
        return None if kind == "keep" else value * 0.5

    return kind, fn


@FUZZ
@given(name=st.sampled_from(HOOKED), hook=_hook())
def test_a_hook_that_misbehaves_is_one_error_naming_it(model, name, hook):
    kind, fn = hook
    ids = np.arange(1, 9)
    run = _answer_or_refusal(lambda: model.run(ids, hooks={name: fn}))
    if kind in ("keep", "scale"):
        assert run is not None and np.isfinite(run.logits).all()
    else:
        with pytest.raises(AttnlabError, match=name.replace(".", r"\.")):
            model.run(ids, hooks={name: fn})


@FUZZ
@given(name=st.one_of(st.text(max_size=30), st.sampled_from(["blocks.9.hook_z", "hook_embedd"])))
def test_an_unknown_hook_name_is_refused_with_close_matches(model, name):
    ids = np.arange(1, 6)
    known = set(model.run(ids, cache=True).cache)
    if name in known:
        assert model.run(ids, hooks={name: lambda v, n: v}) is not None
        return
    with pytest.raises(AttnlabError, match="hook"):
        model.run(ids, hooks={name: lambda v, n: v})


# -- generate -----------------------------------------------------------------------------------


@FUZZ
@given(
    new=st.one_of(st.integers(-3, 6), WEIRD),
    temperature=st.one_of(st.floats(-2, 3), WEIRD),
    top_k=st.one_of(st.none(), st.integers(-2, 300), WEIRD),
    top_p=st.one_of(st.none(), st.floats(-0.5, 1.5), WEIRD),
    seed=st.one_of(st.none(), st.integers(0, 2**32), WEIRD),
)
def test_generate_answers_or_refuses_careless_arguments(
    model, new, temperature, top_k, top_p, seed
):
    prompt = np.array([[1, 2, 3, 4]])
    out = _answer_or_refusal(
        lambda: model.generate(
            prompt, new, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
        )
    )
    if out is not None:
        assert out.shape[0] == 1 and out.shape[1] >= 4
        assert np.array_equal(out[:, :4], prompt)
        assert out.min() >= 0 and out.max() < model.shape.vocab


# -- merge_attention_states ---------------------------------------------------------------------


@st.composite
def _states(draw):
    s = draw(st.integers(1, 4))
    n, d = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    outs = np.array(draw(st.lists(st.floats(-1e3, 1e3), min_size=s * n * d, max_size=s * n * d)))
    lse_values = st.one_of(st.floats(-50, 50), st.just(-math.inf), st.just(math.inf),
                           st.just(math.nan))  # fmt: skip
    lses = np.array(draw(st.lists(lse_values, min_size=s * n, max_size=s * n)))
    outs, lses = outs.reshape(s, n, d), lses.reshape(s, n)
    broken = draw(st.sampled_from(["none", "lse_shape", "out_shape"]))
    if broken == "lse_shape":
        lses = lses[..., :-1] if n > 1 else lses[:, :, None]
    elif broken == "out_shape":
        outs = outs[:, :, None]
    return outs, lses, broken


@FUZZ
@given(case=_states(), base=st.sampled_from(["e", "2", "10", 2, None]))
def test_merge_answers_finite_or_refuses(case, base):
    outs, lses, broken = case
    got = _answer_or_refusal(lambda: al.merge_attention_states(outs, lses, base=base))
    if got is None:
        return
    assert broken == "none" and base in ("e", "2")
    assert not np.isnan(lses).any() and not np.isposinf(lses).any()
    out, lse = got
    assert np.isfinite(out).all() and not np.isnan(lse).any()


# -- FlashMLA's paged cache ----------------------------------------------------------------------


@FUZZ
@given(
    table=st.lists(st.integers(-3, 8), min_size=2, max_size=2),
    seqlen=st.integers(-2, 40),
    head_dim_v=st.one_of(st.integers(-1, 40), WEIRD),
)
def test_flash_mla_block_tables_out_of_range_are_refused(table, seqlen, head_dim_v):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 4, 32)).astype(np.float32)  # (b, s_q, h_q, d)
    cache = rng.standard_normal((4, 16, 1, 32)).astype(np.float32)  # (blocks, 16, 1, d)
    got = _answer_or_refusal(
        lambda: flash_mla_with_kvcache(
            q, cache, np.array([table], np.int32), np.array([seqlen], np.int32), head_dim_v
        )
    )
    if got is not None:  # a sequence with no cached key: out 0 (lse +inf, FlashMLA's way)
        out, _lse = got
        used = -(-seqlen // 16)
        assert 0 <= seqlen <= 32 and all(0 <= b < 4 for b in table[:used])
        assert np.isfinite(np.asarray(out, np.float64)).all()


# -- FP8 descales -------------------------------------------------------------------------------


@FUZZ
@given(descale=st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3),
    st.sampled_from(["shape", "negative", "nan_entry", "good", "per_head"]), WEIRD))  # fmt: skip
def test_fp8_descales_of_every_wrong_kind_are_refused(descale):
    rng = np.random.default_rng(1)
    fp8 = ml_dtypes.float8_e4m3fn
    q = rng.standard_normal((2, 5, 4, 16)).astype(fp8)  # (B, N, h, d)
    k, v = (rng.standard_normal((2, 6, 2, 16)).astype(fp8) for _ in range(2))
    if isinstance(descale, str) and descale in ("shape", "negative", "nan_entry", "good",
                                                "per_head"):  # fmt: skip
        table = {"shape": np.ones((3, 2)), "negative": -np.ones((2, 2)),
                 "nan_entry": np.array([[1.0, np.nan], [1.0, 1.0]]), "good": np.full((2, 2), 0.5),
                 "per_head": np.ones((2, 4))}  # fmt: skip
        descale = table[descale]
    got = _answer_or_refusal(lambda: flash_attn_func(q, k, v, q_descale=descale, k_descale=descale,
                                                     v_descale=descale))  # fmt: skip
    if got is not None:
        assert np.isfinite(np.asarray(got, np.float64)).all()


def test_a_key_value_cache_past_half_the_memory_is_refused_before_allocating(model, monkeypatch):
    """A rotary model has no position limit, so max_new_tokens alone sizes the cache: it is
    checked against the machine's memory first (here a machine of 4 KiB)."""
    from attnlab.models.inside import generate

    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1}
    monkeypatch.setattr(generate.os, "sysconf", lambda name: pages[name])
    with pytest.raises(AttnlabError, match="key/value cache"):
        model.generate(np.array([[1, 2, 3]]), 8)


@pytest.mark.parametrize("seed", [-1, 2**200, 1.5, "7", True])
def test_a_seed_numpy_cannot_take_is_refused_by_name(model, seed):
    with pytest.raises(AttnlabError, match="seed"):
        model.generate(np.array([[1, 2, 3]]), 2, temperature=1.0, seed=seed)


def test_a_descale_that_overflows_float64_is_refused_by_name():
    """e4m3 holds up to 448: times a descale of 1e308 the dequantised value passes float64's
    range (the fuzz found numpy's overflow warning here). One error names the descale."""
    fp8 = ml_dtypes.float8_e4m3fn
    q = np.full((1, 2, 2, 4), 448.0).astype(fp8)
    with pytest.raises(AttnlabError, match="k_descale"):
        flash_attn_func(q, q, q, k_descale=1e308)
