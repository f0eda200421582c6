"""DeepSeek's routing by hand: the correction bias moves the choice of group and expert but not
the gates, which are the plain sigmoid scores (normalised over the chosen when asked) times
the routed scaling factor; shared experts always add."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.models._moe import DeepSeekMoE


def _moe(bias, *, top_k=1, norm_topk=False):
    # One input number x = 1; expert e's router logit is e, so its score is σ(e).
    return DeepSeekMoE(
        router=np.arange(4.0)[:, None], bias=np.asarray(bias, float), experts=[], shared={},
        act=None, top_k=top_k, groups=2, top_groups=1, norm_topk=norm_topk, scaling=2.0,
    )  # fmt: skip


def sigmoid(z):
    return 1 / (1 + math.exp(-z))


def test_without_bias_the_best_group_and_expert_win():
    chosen, gates = _moe([0, 0, 0, 0]).route(np.ones((1, 1)))
    assert chosen.tolist() == [[3]]  # group {2, 3} scores σ(2) + σ(3), the most
    assert gates[0, 0] == pytest.approx(2 * sigmoid(3))


def test_the_bias_moves_the_choice_not_the_gate():
    chosen, gates = _moe([5, 0, 0, 0]).route(np.ones((1, 1)))
    assert chosen.tolist() == [[0]]  # σ(0) + 5 + σ(1) now leads group {0, 1}, and expert 0 it
    assert gates[0, 0] == pytest.approx(2 * sigmoid(0))  # the score without its bias


def test_only_kept_groups_compete_and_norm_topk_divides():
    # Expert 1's bias makes it the best expert overall (σ(1) + 0.4 > σ(3)), but its group loses
    # to {2, 3}, whose two best sum higher: σ(0) + σ(1) + 0.4 < σ(2) + σ(3).
    assert sigmoid(1) + 0.4 > sigmoid(3) and sigmoid(0) + sigmoid(1) + 0.4 < sigmoid(2) + sigmoid(3)
    chosen, gates = _moe([0, 0.4, 0, 0], top_k=2, norm_topk=True).route(np.ones((1, 1)))
    assert sorted(chosen[0].tolist()) == [2, 3]
    s2, s3 = sigmoid(2), sigmoid(3)
    assert sorted(gates[0].tolist()) == pytest.approx(
        sorted([2 * s2 / (s2 + s3), 2 * s3 / (s2 + s3)])
    )
