"""The fast path's kept plans (``kernels/_small_plan.py``): what a call's shapes, mask, scale and
method decide is worked out once, and a later call that differs in any of them, or in the
settings the plan read, gets its own.

Oracles: the general path (bit for bit) and float64 attention.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal, Padding, SlidingWindow
from attnlab.kernels import _fused, _small, _small_plan, blockwise
from tolerances import F32, F64


def _inputs(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(4)]


@pytest.fixture(autouse=True)
def _no_plans():
    _small_plan._plans.clear()
    yield
    _small_plan._plans.clear()


def test_a_repeated_call_reuses_its_plan_and_keeps_its_answer():
    q, k, v, g = _inputs((1, 1, 4, 2))
    first = al.attention(q, k, v, Causal())
    assert len(_small_plan._plans) == 1
    plan = next(iter(_small_plan._plans.values()))
    again = al.attention(q, k, v, Causal())
    assert next(iter(_small_plan._plans.values())) is plan and len(_small_plan._plans) == 1
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(again, al.attention(q, k, v, Causal(), threads=1))
    al.attention_backward(q, k, v, g, Causal())  # dO's shape is part of the key
    assert len(_small_plan._plans) == 2


@pytest.mark.parametrize(
    "change",
    [
        {"mask": SlidingWindow(2)},
        {"mask": None},
        {"mask": Padding([3])},
        {"scale": 0.25},
        {"scale": 1},
        {"method": "dense"},
    ],
)
def test_any_change_of_mask_scale_or_method_gets_its_own_plan(change):
    q, k, v, _ = _inputs((1, 2, 6, 4))
    al.attention(q, k, v, Causal())  # a plan for the causal call is kept
    call = {"mask": Causal(), "scale": None, "method": "auto", **change}
    mask = call.pop("mask")
    got = al.attention(q, k, v, mask, **call)
    assert len(_small_plan._plans) == 2
    np.testing.assert_array_equal(got, al.attention(q, k, v, mask, threads=1, **call))
    wide = [a.astype(np.float64) for a in (q, k, v)]
    np.testing.assert_allclose(got, al.attention(*wide, mask, **call), **F32)


def test_a_scale_of_true_is_not_the_scale_one():
    q, k, v, _ = _inputs((1, 1, 4, 2))
    al.attention(q, k, v, scale=1)
    with pytest.raises(al.AttnlabError):
        al.attention(q, k, v, scale=True)  # the general path refuses a bool, as it always did


def test_an_array_mask_is_checked_afresh_each_call():
    q, k, v, _ = _inputs((2, 5, 3), dtype=np.float64)
    allowed = np.tri(5, dtype=bool)
    got = al.attention(q, k, v, allowed)
    assert not _small_plan._plans  # not hashable: nothing kept
    np.testing.assert_allclose(got, al.attention(q, k, v, Causal()), **F64)


def test_a_smaller_memory_budget_takes_effect_on_the_next_call(monkeypatch):
    q, k, v, _ = _inputs((1, 2, 8, 4))
    assert _small.small_attention(q, k, v, None, None, "auto", False) is not None
    monkeypatch.setattr(blockwise, "DEFAULT_MEMORY_BUDGET", 16)  # documented as reassignable
    assert _small.small_attention(q, k, v, None, None, "auto", False) is None


def test_the_kernel_setting_is_read_on_every_call(monkeypatch):
    pytest.importorskip("numba")
    q, k, v, _ = _inputs((2, 2, 64, 16))  # below the compiled pass's size under "auto"
    assert _small_plan.prepare(q, k, v, Causal(), None, "auto").kernel is None
    monkeypatch.setenv(_fused.ENV, "numba")
    assert _small_plan.prepare(q, k, v, Causal(), None, "auto").kernel is not None
    monkeypatch.setenv(_fused.ENV, "numpy")
    assert _small_plan.prepare(q, k, v, Causal(), None, "auto").kernel is None


def test_the_kept_plans_are_bounded(monkeypatch):
    monkeypatch.setattr(_small_plan, "_PLANS_AT_MOST", 4)
    for n in range(1, 12):
        q, k, v, _ = _inputs((1, n, 2))
        al.attention(q, k, v, Causal())
        assert len(_small_plan._plans) <= 4


def test_the_numbers_are_still_checked_on_every_call():
    q, k, v, _ = _inputs((1, 1, 4, 2))
    al.attention(q, k, v, Causal())
    q[0, 0, 1, 0] = np.nan
    with pytest.raises(al.NonFiniteInputError):
        al.attention(q, k, v, Causal())


@pytest.mark.parametrize("shape", [(1, 1, 4, 2), (64, 4, 32, 16)])
def test_calls_without_an_error_state_context_raise_no_floating_point_warning(shape):
    q, k, v, g = _inputs(shape)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out = al.attention(q, k, v, Causal())  # blocked pairs are -inf, their weights 0
        grads = al.attention_backward(q, k, v, g, Causal())
    assert np.isfinite(out).all() and all(np.isfinite(a).all() for a in grads)


def test_plans_with_large_mask_tables_are_not_kept():
    q, k, v, _ = _inputs((1, 1, 600, 2))  # a 600 x 600 causal table: 360,000 bytes of bools
    out = al.attention(q, k, v, Causal())
    assert not _small_plan._plans
    np.testing.assert_array_equal(out, al.attention(q, k, v, Causal(), threads=1))
    q, k, v, _ = _inputs((1, 1, 64, 2))
    al.attention(q, k, v, Causal())
    assert len(_small_plan._plans) == 1


@pytest.mark.parametrize("setting", ["numba", "numpy"])
def test_a_plan_made_under_a_kernel_setting_is_not_served_after_it_is_unset(monkeypatch, setting):
    # The compiled pass a plan holds depends on ATTNLAB_KERNEL. A plan made while it was set
    # and served after it was unset made results depend on what the process did before.
    if setting == "numba":
        pytest.importorskip("numba")
    q, k, v, _ = _inputs((8, 4, 128, 64))  # 2^19 score pairs: the compiled pass's range
    args = (Causal(), None, "auto")
    monkeypatch.setenv(_fused.ENV, setting)
    under = _small_plan.prepare(q, k, v, *args)[-1]
    monkeypatch.delenv(_fused.ENV)
    unset = _small_plan.prepare(q, k, v, *args)[-1]
    _small_plan._plans.clear()
    fresh = _small_plan.prepare(q, k, v, *args)[-1]
    assert unset is fresh
    if (under is None) != (fresh is None):  # the setting changed the plan: the case that bit
        assert unset is not under
