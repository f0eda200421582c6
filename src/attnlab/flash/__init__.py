"""FlashAttention 2's Python interface on numpy arrays, computed by attnlab's exact kernels.

The same names, parameter order, defaults, layouts (batch, seqlen, nheads, headdim) and return
values as ``flash_attn.flash_attn_interface``, so a kernel test written against FlashAttention
can take attnlab as its reference::

    from attnlab.flash import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True, window_size=(64, 0), softcap=30.0)

Every option becomes an argument of ``attnlab.attention`` (bottom-right ``masks.Causal``,
``masks.SlidingWindow``, ``masks.ALiBi``, ``softcap=``, ``return_lse=``), so the dense and the
blockwise paths both serve it. docs/kernels.md ("attnlab.flash") maps each option and lists what differs.
FlashMLA's dense paged decoding and sparse prefill (``flash_mla_with_kvcache``,
``flash_mla_sparse_fwd``, ``flash_mla_backward``) are in ``attnlab.flash.mla``.
"""

from attnlab.flash.interface import (
    flash_attn_backward,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
)
from attnlab.flash.kvcache import flash_attn_with_kvcache
from attnlab.flash.mla import flash_mla_backward, flash_mla_sparse_fwd, flash_mla_with_kvcache
from attnlab.flash.rotary import apply_rotary
from attnlab.flash.varlen import (
    flash_attn_varlen_backward,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)

__all__ = [
    "apply_rotary",
    "flash_attn_backward",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_backward",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "flash_mla_backward",
    "flash_mla_sparse_fwd",
    "flash_mla_with_kvcache",
]
