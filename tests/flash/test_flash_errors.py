"""attnlab.flash refuses bad arguments with a typed error that names the argument."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((2, 5, 4, 8))
K = RNG.standard_normal((2, 7, 2, 8))
V = RNG.standard_normal((2, 7, 2, 8))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dropout_p": 1.0}, AttnlabError, "dropout_p"),
        ({"dropout_p": -0.1}, AttnlabError, "dropout_p"),
        ({"dropout_p": 0.1}, AttnlabError, "rng=numpy.random.Generator"),
        ({"dropout_p": 0.1, "rng": 7}, AttnlabError, "rng"),
        ({"softmax_scale": float("nan")}, AttnlabError, "softmax_scale"),
        ({"softmax_scale": "0.5"}, AttnlabError, "softmax_scale"),
        ({"causal": 1}, AttnlabError, "causal"),
        ({"window_size": 3}, AttnlabError, "window_size"),
        ({"window_size": (3, -2)}, AttnlabError, "window_size"),
        ({"window_size": (1.5, 0)}, AttnlabError, "window_size"),
        ({"softcap": float("nan")}, AttnlabError, "softcap"),
        ({"softcap": float("inf")}, AttnlabError, "softcap"),
        ({"alibi_slopes": np.ones(3)}, ShapeError, "alibi_slopes"),
        ({"alibi_slopes": np.ones((3, 4))}, ShapeError, "alibi_slopes"),
        ({"alibi_slopes": np.array([1.0, np.nan, 1.0, 1.0])}, AttnlabError, "alibi_slopes"),
        ({"deterministic": None}, AttnlabError, "deterministic"),
    ],
)
def test_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        flash_attn_func(Q, K, V, **kwargs)


@pytest.mark.parametrize(
    ("q", "k", "v", "match"),
    [
        (Q[0], K, V, r"q of shape \(batch_size, seqlen_q, nheads, headdim\)"),
        (Q, K[:1], V[:1], "batch size"),
        (Q, K, V[:, :6], "key count"),
        (Q, K[..., :6], V, "head width"),
        (Q[:, :, :3], K, V, "divide the query head count"),
        (Q.astype(complex), K, V, "real numbers"),
    ],
)
def test_bad_shapes(q, k, v, match):
    with pytest.raises(AttnlabError, match=match):
        flash_attn_func(q, k, v)


def test_packed_layouts_are_checked():
    with pytest.raises(ShapeError, match="qkv"):
        flash_attn_qkvpacked_func(np.zeros((2, 5, 2, 4, 8)))


def test_backward_checks_dout_and_lse():
    with pytest.raises(ShapeError, match="dout"):
        flash_attn_backward(np.zeros((2, 5, 4, 7)), Q, K, V)
    with pytest.raises(ShapeError, match="softmax_lse"):
        flash_attn_backward(np.zeros((2, 5, 4, 8)), Q, K, V, None, np.zeros((2, 5, 4)))
    with pytest.raises(AttnlabError, match="dropout_p=0"):
        flash_attn_backward(np.zeros((2, 5, 4, 8)), Q, K, V, dropout_p=0.1)


def cu(*xs):
    return np.array(xs, dtype=np.int32)


@pytest.mark.parametrize(
    ("cu_q", "cu_k", "max_q", "match"),
    [
        (cu(0, 3, 2, 5), cu(0, 2, 4, 6), 5, "never decrease"),
        (cu(1, 3, 5), cu(0, 2, 6), 5, "start at 0"),
        (cu(0, 3, 4), cu(0, 2, 6), 5, "end at the 5 packed rows"),
        (cu(0, 3, 5), cu(0, 2, 4, 6), 5, "same length"),
        (cu(0, 3, 5), cu(0, 2, 6), 2, "max_seqlen_q"),
        (np.array([0.0, 3.0, 5.0]), cu(0, 2, 6), 5, "cu_seqlens_q"),
    ],
)
def test_bad_varlen_boundaries(cu_q, cu_k, max_q, match):
    q, k, v = Q[0], K[0, :6], V[0, :6]  # 5 query rows, 6 key rows
    with pytest.raises(AttnlabError, match=match):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, 6)


def test_bad_block_table():
    pages = np.zeros((4, 2, 2, 8))
    q = Q[0]
    with pytest.raises(AttnlabError, match="block_table"):
        flash_attn_varlen_func(q, pages, pages, cu(0, 5), cu(0, 3), 5, 3, block_table=[[0, 9]])
    with pytest.raises(AttnlabError, match="fit its block_table row"):
        flash_attn_varlen_func(q, pages, pages, cu(0, 5), cu(0, 5), 5, 5, block_table=[[0, 1]])


def _cache(s=10):
    return np.zeros((2, s, 2, 8)), np.zeros((2, s, 2, 8))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": K[:, :2]}, "k and v together"),
        ({"k": K[:, :2], "v": V[:, :2]}, "cache_seqlens with k and v"),
        ({"k": K[:, :2], "v": V[:, :2], "cache_seqlens": 9}, "cache_seqlens"),
        ({"cache_seqlens": [-1, 3]}, "cache_seqlens"),
        ({"cache_seqlens": 3, "cache_leftpad": [4, 0]}, "cache_leftpad"),
        ({"cache_batch_idx": [0, 2]}, "cache_batch_idx"),
        (
            {"k": K[:, :1], "v": V[:, :1], "cache_seqlens": 3, "cache_batch_idx": [1, 1]},
            "distinct cache_batch_idx",
        ),
        ({"k": K[:, :1].astype(np.float32), "v": V[:, :1], "cache_seqlens": 3}, "dtype"),
        ({"rotary_cos": np.ones((10, 2))}, "rotary_cos and rotary_sin together"),
        ({"rotary_cos": np.ones((10, 2)), "rotary_sin": np.ones((10, 2))}, "new k and v"),
        (
            {
                "k": K[:, :1],
                "v": V[:, :1],
                "cache_seqlens": 3,
                "rotary_cos": np.ones((10, 5)),
                "rotary_sin": np.ones((10, 5)),
            },
            "r <= headdim",
        ),
        (
            {
                "k": K[:, :1],
                "v": V[:, :1],
                "cache_seqlens": 8,
                "rotary_cos": np.ones((5, 2)),
                "rotary_sin": np.ones((5, 2)),
            },
            "at least 9 positions",
        ),
        ({"num_splits": -1}, "num_splits"),
        ({"block_table": [[0], [1]], "cache_batch_idx": [0, 1]}, "cache_batch_idx=None"),
    ],
)
def test_bad_kvcache_arguments(kwargs, match):
    k_cache, v_cache = _cache()
    with pytest.raises(AttnlabError, match=match):
        flash_attn_with_kvcache(Q, k_cache, v_cache, **kwargs)


def test_kvcache_needs_a_writeable_cache_to_append_to():
    k_cache, v_cache = _cache()
    k_cache.flags.writeable = False
    with pytest.raises(AttnlabError, match="writeable numpy array"):
        flash_attn_with_kvcache(Q, k_cache, v_cache, K[:, :1], V[:, :1], cache_seqlens=2)
    with pytest.raises(AttnlabError, match="writeable numpy array"):
        flash_attn_with_kvcache(Q, k_cache.tolist(), v_cache, K[:, :1], V[:, :1], cache_seqlens=2)
