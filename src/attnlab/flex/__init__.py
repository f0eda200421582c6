"""FlexAttention on numpy: torch's ``flex_attention`` and ``create_block_mask``, computed by
attnlab's kernels, with the variants attnlab knows as named score_mods and mask_mods.

    import attnlab as al
    from attnlab import flex
    bm = al.create_block_mask(flex.causal(), None, None, 1024, 1024)
    out, lse = al.flex_attention(q, k, v, score_mod=flex.alibi(slopes), block_mask=bm,
                                 return_lse=True)

A named mod (``softcap``, ``alibi``, ``relative_bias``; ``causal``, ``sliding_window``,
``document``; ``and_masks``/``or_masks`` join mask_mods) is a frozen dataclass you can call and read; with one, the call runs through
``attnlab.attention`` and has a backward (``flex_attention_backward``). Any callable works
forward. docs/kernels.md ("FlexAttention") writes each attnlab variant as a mod.
"""

from attnlab.flex._block_mask import BlockMask, create_block_mask, noop_mask
from attnlab.flex._mods import (
    alibi,
    and_masks,
    causal,
    document,
    or_masks,
    relative_bias,
    sliding_window,
    softcap,
)
from attnlab.flex.attention import flex_attention, flex_attention_backward

__all__ = [
    "BlockMask",
    "alibi",
    "and_masks",
    "causal",
    "create_block_mask",
    "document",
    "flex_attention",
    "flex_attention_backward",
    "noop_mask",
    "or_masks",
    "relative_bias",
    "sliding_window",
    "softcap",
]
