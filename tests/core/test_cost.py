"""The cost model of §6.6: each term in closed form, the doubling for FLOPs, and the crossover."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab.cost import breakdown, crossover_length, mha_flops, score_memory_bytes

FAST = settings(max_examples=40, deadline=None)
sizes = st.integers(1, 10**6)


@FAST
@given(sizes, sizes)
def test_multiply_adds_in_closed_form(n, d):
    assert mha_flops(n, d) == 4 * n * d * d + 2 * n * n * d
    assert mha_flops(n, d, count="flops") == 2 * (4 * n * d * d + 2 * n * n * d)
    assert isinstance(mha_flops(n, d), int)


@FAST
@given(sizes, sizes, st.sampled_from(["madds", "flops"]))
def test_breakdown_terms(n, d, count):
    f = 2 if count == "flops" else 1
    c = breakdown(n, d, count=count)
    assert c.projections == f * 3 * n * d**2  # Q, K, V for every head
    assert c.scores == f * n**2 * d  # Q Kᵀ: h · N² · d_k with h · d_k = d_model
    assert c.weighted_sum == f * n**2 * d  # A V
    assert c.output_projection == f * n * d**2  # W^O
    assert c.linear == f * 4 * n * d**2 and c.quadratic == f * 2 * n**2 * d
    assert c.total == mha_flops(n, d, count=count)
    assert c.quadratic_share == pytest.approx(n / (n + 2 * d), rel=1e-12)


def test_chapter_sizes():
    # The paper's layer: d_model 512 (8 heads of 64), at 1024 tokens both terms are 2^30.
    c = breakdown(1024, 512)
    assert c.linear == c.quadratic == 2**30
    assert mha_flops(1024, 512) == 2**31


def test_crossover_of_the_exercise():
    assert crossover_length(4096) == 8192


@FAST
@given(st.integers(1, 10**5), st.integers(1, 10**5))
def test_crossover_is_where_the_quadratic_terms_take_over(n, d):
    c = breakdown(n, d)
    x = crossover_length(d)
    assert x == 2 * d
    assert (c.quadratic > c.linear) == (n > x)
    assert (c.quadratic == c.linear) == (n == x)


def test_score_memory():
    assert score_memory_bytes(1024) == 1024 * 1024 * 4  # one float32 table: 4 MiB
    assert score_memory_bytes(8, 16, heads=4, batch=2, dtype=np.float64) == 8 * 16 * 4 * 2 * 8
    assert score_memory_bytes(10, dtype="float16") == 200


def test_as_dict_is_json_ready():
    d = breakdown(1024, 4096, count="flops").as_dict()
    back = json.loads(json.dumps(d))
    assert back["total"] == 2 * (4 * 1024 * 4096**2 + 2 * 1024**2 * 4096)
    assert back["count"] == "flops"
    assert set(back) >= {"projections", "scores", "weighted_sum", "output_projection"}


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "8"])
def test_bad_sizes(bad):
    for call in (
        lambda: mha_flops(bad, 8),
        lambda: mha_flops(8, bad),
        lambda: crossover_length(bad),
        lambda: score_memory_bytes(bad),
        lambda: score_memory_bytes(4, heads=bad),
    ):
        with pytest.raises(al.AttnlabError, match="positive integer"):
            call()


def test_bad_count():
    with pytest.raises(al.AttnlabError, match="madds"):
        mha_flops(8, 8, count="macs")
