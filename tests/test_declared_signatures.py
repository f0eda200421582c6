"""Signatures built from one declared table (attnlab._signature) are the public contract's:
FlashAttention 2's, written out here by hand from its own API, and Python's binding rules."""

from __future__ import annotations

import inspect

import pytest

import attnlab.flash as flash

_OPTIONS = (
    "dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, "
    "alibi_slopes=None, deterministic=False"
)
_PACKED = "cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k"
FLASH = {
    "flash_attn_func": f"(q, k, v, {_OPTIONS}, return_attn_probs=False, *, rng=None)",
    "flash_attn_qkvpacked_func": f"(qkv, {_OPTIONS}, return_attn_probs=False, *, rng=None)",
    "flash_attn_kvpacked_func": f"(q, kv, {_OPTIONS}, return_attn_probs=False, *, rng=None)",
    "flash_attn_backward": f"(dout, q, k, v, out=None, softmax_lse=None, {_OPTIONS})",
    "flash_attn_varlen_func": (
        f"(q, k, v, {_PACKED}, {_OPTIONS}, return_attn_probs=False, block_table=None, *, rng=None)"
    ),
    "flash_attn_varlen_qkvpacked_func": (
        f"(qkv, cu_seqlens, max_seqlen, {_OPTIONS}, return_attn_probs=False, *, rng=None)"
    ),
    "flash_attn_varlen_kvpacked_func": (
        f"(q, kv, {_PACKED}, {_OPTIONS}, return_attn_probs=False, *, rng=None)"
    ),
    "flash_attn_varlen_backward": f"(dout, q, k, v, out, softmax_lse, {_PACKED}, {_OPTIONS})",
}


@pytest.mark.parametrize("name", sorted(FLASH))
def test_flash_signatures_are_flashattentions(name):
    assert str(inspect.signature(getattr(flash, name))) == FLASH[name]


def test_a_declared_signature_binds_as_python_does():
    with pytest.raises(TypeError, match=r"flash_attn_func\(\) missing a required argument: 'v'"):
        flash.flash_attn_func(1, 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rngs'"):
        flash.flash_attn_func(1, 2, 3, rngs=None)
    with pytest.raises(TypeError, match="too many positional arguments"):
        flash.flash_attn_func(1, 2, 3, 0.0, None, False, (-1, -1), 0.0, None, False, False, None)


_RUN = (
    "quick: 'bool' = False, repeats: 'int | None' = None, rounds: 'int' = 1, "
    "use_torch: 'bool' = True, "
    "isolate: 'bool' = True, checks: 'bool | None' = None, "
    "progress: 'Callable[[Result], None] | None' = None"
)
_SIZES = (
    "ns: 'Sequence[int] | None' = None, *, heads: 'int' = 8, d: 'int' = 64, "
    "masks: 'Sequence[str]' = ('none', 'causal')"
)


def test_the_benchmarks_signatures_share_their_sizes_and_run_controls():
    from attnlab import bench

    assert str(inspect.signature(bench.attention)) == (
        f"({_SIZES}, window: 'int' = 512, {_RUN}) -> 'Report'"
    )
    assert str(inspect.signature(bench.backward)) == f"({_SIZES}, {_RUN}) -> 'Report'"
    with pytest.raises(TypeError, match="too many positional arguments"):
        bench.backward((512,), 8)


_ATTENTION_RUN = (
    "check_finite=True, method='auto', memory_budget=None, block_size=None, threads=None"
)


def test_multi_head_attention_and_its_class_take_attentions_run_options():
    import attnlab as al

    assert str(inspect.signature(al.multi_head_attention)) == (
        "(query, key, value, w_q, w_k, w_v, w_o, *, b_q=None, b_k=None, b_v=None, b_o=None, "
        f"mask=None, scale=None, return_weights=False, {_ATTENTION_RUN})"
    )
    layer = al.MultiHeadAttention(8, 2)
    assert str(inspect.signature(layer)) == (
        f"(query, key=None, value=None, mask=None, return_weights=False, *, {_ATTENTION_RUN})"
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'scale'"):
        layer(None, scale=1.0)  # the class fixes its scale; the function takes one


def test_verify_takes_one_argument_per_case_array_then_the_cases_options():
    from attnlab.verifier import verify

    arrays = ", ".join(
        f"{name}=None" for name in ("q", "k", "v", "out", "lse", "do", "dq", "dk", "dv")
    )
    assert str(inspect.signature(verify)) == (
        f"({arrays}, *, layout='bshd', causal=False, window_size=(-1, -1), softcap=0.0, "
        "softmax_scale=None, alibi_slopes=None, sinks=None, cu_seqlens_q=None, "
        "cu_seqlens_k=None, factor=2.0, atol=None, memory_budget=None) -> 'VerifyReport'"
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'dropout_p'"):
        verify(dropout_p=0.1)
