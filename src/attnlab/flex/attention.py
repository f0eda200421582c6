"""``flex_attention`` and its backward: torch's FlexAttention on numpy arrays.

Shape legend (torch's FlexAttention letters):
    B   batch       H   query heads     Hkv key/value heads     G = H / Hkv
    L   query rows  S   key rows        E   query/key width     Ev  value width

The call is checked once (``_checks.py``). With a score_mod that is None or one of the named
ones (``softcap``, ``alibi``, ``relative_bias``) it is an ``attnlab.attention`` call: q is seen
as (B, Hkv, G, L, E) and k, v as (B, Hkv, 1, S, ·), the block mask and the bias are mask specs
(``_mask.py``) and the cap is ``softcap=``, so the dense and blockwise kernels, their checks and
``attention_backward`` all serve it. Any other score_mod takes ``_generic.py`` (forward only).
"""

from __future__ import annotations

from attnlab.api.attention import attention
from attnlab.api.backward import attention_backward
from attnlab.errors import AttnlabError
from attnlab.flex import _generic
from attnlab.flex._checks import check_call, check_grad
from attnlab.flex._mask import FlexMask
from attnlab.flex._mods import ALiBi, RelativeBias, Softcap

__all__ = ["flex_attention", "flex_attention_backward"]


def _named(score_mod) -> tuple[bool, float | None, object]:
    """(known, softcap, bias mod) for a score_mod attention can compute; known False otherwise."""
    if score_mod is None:
        return True, None, None
    if isinstance(score_mod, Softcap):
        return True, score_mod.cap, None
    if isinstance(score_mod, ALiBi | RelativeBias):
        return True, None, score_mod
    return False, None, None


def _as_attention(x, cap, bias_mod) -> tuple[tuple, dict]:
    """attention's arguments for a checked flex call with a named score_mod."""
    batch, _, n, e = x.q.shape
    hkv = x.k.shape[1]
    q = x.q.reshape(batch, hkv, x.group, n, e)  # (B, Hkv, G, L, E)
    k, v = x.k[:, :, None], x.v[:, :, None]  # (B|1, Hkv, 1, S, E), (B|1, Hkv, 1, S, Ev)
    mask = None
    if x.given_mask or bias_mod is not None:
        mask = FlexMask(x.block_mask, bias_mod, batch, hkv, x.group)
    options = {"scale": x.scale, "softcap": cap, "fully_masked": "zero"}
    if x.given_mask:
        # Kernel tiles a whole number of the block mask's tiles, so a tile the block mask skips
        # is never cut; at least 128 a side, as tiny tiles would cost more than they skip.
        options["block_size"] = tuple(b * max(1, 128 // b) for b in x.block_mask.BLOCK_SIZE)
    return (q, k, v, mask), options


def flex_attention(
    query,
    key,
    value,
    score_mod=None,
    block_mask=None,
    scale=None,
    enable_gqa=False,
    return_lse=False,
):
    """Attention with a score_mod and a block-sparse mask: torch's ``flex_attention``.

    Args:
        query: (B, H, L, E).  key: (B, Hkv, S, E).  value: (B, Hkv, S, Ev); key and value may
            have batch 1 (shared by every batch element).
        score_mod: None, or score_mod(score, b, h, q_idx, kv_idx) -> new score, called on a
            block of scaled scores (B, H, rows, keys) with broadcastable integer arrays
            b (B, 1, 1, 1), h (1, H, 1, 1), q_idx (1, 1, rows, 1), kv_idx (1, 1, 1, keys),
            possibly from several threads at once. ``attnlab.flex.softcap``, ``alibi``
            and ``relative_bias`` run through ``attnlab.attention`` and have a backward.
        block_mask: None (every pair) or ``create_block_mask(...)``; its skipped tiles are not
            computed and its mask_mod is called only on partial ones.
        scale: the factor on q·kᵀ; None for 1/sqrt(E).
        enable_gqa: allow H a multiple of Hkv (query head h reads key/value head h // (H/Hkv)).
        return_lse: also return each row's natural log-sum-exp of the modified scores.

    Returns:
        output (B, H, L, Ev), and lse (B, H, L) with return_lse. A row with no allowed key gives
        output 0 and lse -inf, as torch does. float32 stays float32; integers compute in float64.

    Raises:
        AttnlabError naming the argument: bad shapes, NaN/inf inputs, a score_mod or mask_mod
        that raises, returns NaN/+inf on an allowed pair, non-booleans or the wrong shape.
    """
    x = check_call(query, key, value, score_mod, block_mask, scale, enable_gqa)
    known, cap, bias_mod = _named(x.score_mod)
    if known:
        args, options = _as_attention(x, cap, bias_mod)
        out, lse = attention(*args, **options, return_lse=True)
        out, lse = out.reshape(x.q.shape[:3] + (-1,)), lse.reshape(x.q.shape[:3])
    else:
        out, lse = _generic.forward(x.q, x.k, x.v, x.score_mod, x.block_mask, x.scale, x.group)
    return (out, lse) if return_lse else out


def flex_attention_backward(
    query,
    key,
    value,
    grad_out,
    score_mod=None,
    block_mask=None,
    scale=None,
    enable_gqa=False,
):
    """(dq, dk, dv): the gradients of sum(grad_out ∘ flex_attention(...)), as torch autograd
    gives them, by ``attnlab.attention_backward``.

    Args:
        query, key, value, score_mod, block_mask, scale, enable_gqa: as for ``flex_attention``;
            score_mod must be None or a named one (``attnlab.flex.softcap``, ``alibi``,
            ``relative_bias``), whose derivative is known. Any mask_mod is fine: a mask has
            no gradient.
        grad_out: ∂L/∂output, (B, H, L, Ev).

    Returns:
        dq (B, H, L, E), dk (B, Hkv, S, E), dv (B, Hkv, S, Ev): a key/value head's gradient
        sums its G query heads (and a key of batch 1 sums the batch). Rows with no allowed key
        contribute 0.
    """
    x = check_call(query, key, value, score_mod, block_mask, scale, enable_gqa)
    g = check_grad(grad_out, x)
    known, cap, bias_mod = _named(x.score_mod)
    if not known:
        raise AttnlabError(
            "expected score_mod to be None or one of attnlab.flex.softcap, alibi or "
            "relative_bias, whose derivative the backward knows, but got "
            f"{x.score_mod!r} instead (an arbitrary score_mod runs forward only)"
        )
    args, options = _as_attention(x, cap, bias_mod)
    batch, _, n, ev = g.shape
    g = g.reshape(batch, x.k.shape[1], x.group, n, ev)  # (B, Hkv, G, L, Ev)
    dq, dk, dv = attention_backward(*args[:3], g, args[3], **options)
    return dq.reshape(x.q.shape), dk.reshape(x.k.shape), dv.reshape(x.v.shape)
