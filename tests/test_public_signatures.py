"""The public signatures are written out as plain ``def``s; the options several of them share
keep one set of names, one order and one set of defaults wherever they appear.

The tables below are written by hand: FlashAttention 2's signatures from its own
``flash_attn_interface.py``, the rest from the contract each function already had. A default
changed in one signature and not in its siblings fails here.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import attnlab as al
import attnlab.flash as flash

# FlashAttention 2's options after the arrays of every function but the kv-cache one.
FLASH_OPTIONS = (
    ("dropout_p", 0.0),
    ("softmax_scale", None),
    ("causal", False),
    ("window_size", (-1, -1)),
    ("softcap", 0.0),
    ("alibi_slopes", None),
    ("deterministic", False),
)
_OPTIONS = ", ".join(f"{name}={default!r}" for name, default in FLASH_OPTIONS)
_PACKED = "cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k"
FLASH = {
    # FlashAttention 3's FP8 descales, keyword-only after FlashAttention 2's order.
    "flash_attn_func": (
        f"(q, k, v, {_OPTIONS}, return_attn_probs=False, *, rng=None, "
        "q_descale=None, k_descale=None, v_descale=None)"
    ),
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
    "flash_attn_with_kvcache": (
        "(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, "
        "cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None, "
        "softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, "
        "rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False)"
    ),
}


def shared(fn, names) -> list[tuple[str, object, object]]:
    """(name, default, kind) of the parameters of ``fn`` named in ``names``, in ``fn``'s order."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.default, p.kind) for p in params if p.name in names]


@pytest.mark.parametrize("name", sorted(FLASH))
def test_flash_signatures_are_flashattentions(name):
    assert str(inspect.signature(getattr(flash, name))) == FLASH[name]


@pytest.mark.parametrize("name", sorted(FLASH))
def test_flashs_options_have_one_order_and_one_set_of_defaults(name):
    names = dict(FLASH_OPTIONS)
    got = [(n, d) for n, d, _ in shared(getattr(flash, name), names)]
    want = [(n, d) for n, d in FLASH_OPTIONS if n in {g[0] for g in got}]
    assert got == want
    if name != "flash_attn_with_kvcache":  # all seven, side by side, after the arrays
        assert [n for n, _ in got] == list(names)
        params = list(inspect.signature(getattr(flash, name)).parameters)
        start = params.index("dropout_p")
        assert params[start : start + len(names)] == list(names)


# FlashMLA's functions, from its README and tests: its names, order and defaults (the
# scheduling arguments default to None here, since attnlab's answer needs no schedule).
FLASH_MLA = {
    "flash_mla_with_kvcache": (
        "(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata=None, "
        "num_splits=None, softmax_scale=None, causal=False)"
    ),
    "flash_mla_backward": (
        "(dout, q, k_cache, block_table, cache_seqlens, head_dim_v, out=None, "
        "softmax_lse=None, softmax_scale=None, causal=False)"
    ),
    "flash_mla_sparse_fwd": "(q, kv, indices, sm_scale, d_v=512)",
}


@pytest.mark.parametrize("name", sorted(FLASH_MLA))
def test_flash_mla_signatures_are_flashmlas(name):
    assert str(inspect.signature(getattr(flash, name))) == FLASH_MLA[name]


def test_plain_definitions_bind_as_python_does():
    with pytest.raises(TypeError, match=r"flash_attn_func\(\) missing 1 required .*'v'"):
        flash.flash_attn_func(1, 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rngs'"):
        flash.flash_attn_func(1, 2, 3, rngs=None)
    with pytest.raises(TypeError, match="positional arguments but 12 were given"):
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


def test_the_benchmarks_take_the_same_sizes_and_run_controls():
    from attnlab import bench

    assert str(inspect.signature(bench.attention)) == (
        f"({_SIZES}, window: 'int' = 512, {_RUN}) -> 'Report'"
    )
    assert str(inspect.signature(bench.backward)) == f"({_SIZES}, {_RUN}) -> 'Report'"
    forward = [p for p in inspect.signature(bench.attention).parameters.values()]
    backward = list(inspect.signature(bench.backward).parameters.values())
    assert [p for p in forward if p.name != "window"] == backward  # name, kind, default, type
    with pytest.raises(TypeError, match="positional argument"):
        bench.backward((512,), 8)


# attention's own run options: the source the multi-head forms pass them to.
_ATTENTION_RUN = ("check_finite", "method", "block_size", "threads", "memory_budget")


def test_multi_head_attention_and_its_class_take_attentions_run_options():
    want = shared(al.attention, _ATTENTION_RUN)
    assert [n for n, _, _ in want] == list(_ATTENTION_RUN)
    assert all(kind is inspect.Parameter.KEYWORD_ONLY for _, _, kind in want)
    layer = al.MultiHeadAttention(8, 2)
    for fn in (al.multi_head_attention, layer):
        assert shared(fn, _ATTENTION_RUN) == want
    run = ", ".join(f"{n}={d!r}" for n, d, _ in want)
    assert str(inspect.signature(al.multi_head_attention)) == (
        "(query, key, value, w_q, w_k, w_v, w_o, *, b_q=None, b_k=None, b_v=None, b_o=None, "
        f"mask=None, scale=None, return_weights=False, {run})"
    )
    assert str(inspect.signature(layer)) == (
        f"(query, key=None, value=None, mask=None, return_weights=False, *, {run})"
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'scale'"):
        layer(None, scale=1.0)  # the class fixes its scale; the function takes one


def test_verify_takes_the_cases_arrays_and_options_in_the_cases_order():
    from attnlab.verifier import verify
    from attnlab.verifier._case import ARRAY_NAMES
    from attnlab.verifier._dropout import DROPOUT_NAMES
    from attnlab.verifier._kvcache import KV_NAMES
    from attnlab.verifier._options import OPTION_NAMES, Options

    given = {f.name: f.default for f in dataclasses.fields(Options)}
    arrays = shared(verify, ARRAY_NAMES)
    options = shared(verify, OPTION_NAMES)
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert arrays == [(name, None, positional) for name in ARRAY_NAMES]
    assert options == [(n, given.get(n), inspect.Parameter.KEYWORD_ONLY) for n in OPTION_NAMES]
    assert str(inspect.signature(verify)) == (
        "(q=None, k=None, v=None, out=None, lse=None, do=None, dq=None, dk=None, dv=None, *, "
        "layout='bshd', causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None, "
        "alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, "
        + "".join(f"{name}=None, " for name in DROPOUT_NAMES + KV_NAMES)
        + "factor=2.0, atol=None, memory_budget=None, repeat=None, client=None) "
        "-> 'VerifyReport'"
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'dropout'"):
        verify(dropout=0.1)


def test_verify_and_flash_share_flashattentions_defaults():
    from attnlab.verifier import verify

    flash_defaults = dict(FLASH_OPTIONS)
    common = dict((n, d) for n, d, _ in shared(verify, flash_defaults))
    # dropout_p is a case entry in verify: None says the dumped case holds no dropout (0.0 is
    # taken too, and judged the same), so its default differs from flash's 0.0 on purpose.
    assert common.pop("dropout_p") is None and flash_defaults["dropout_p"] == 0.0
    assert sorted(common) == ["alibi_slopes", "causal", "softcap", "softmax_scale", "window_size"]
    assert all(flash_defaults[n] == d for n, d in common.items())


# torch.nn.attention.flex_attention's signatures (torch 2.13), less the device and kernel
# options numpy has no use for; the backward takes the forward's arguments and grad_out.
FLEX = {
    "flex_attention": (
        "(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, "
        "return_lse=False)"
    ),
    "flex_attention_backward": (
        "(query, key, value, grad_out, score_mod=None, block_mask=None, scale=None, "
        "enable_gqa=False)"
    ),
    "create_block_mask": "(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE=128)",
}


@pytest.mark.parametrize("name", sorted(FLEX))
def test_flex_signatures_are_torchs(name):
    fn = getattr(al, name)
    assert fn is getattr(al.flex, name)
    assert str(inspect.signature(fn)) == FLEX[name]
