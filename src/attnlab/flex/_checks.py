"""The checks of a flex call, once, at the public boundary: arrays, heads, block mask, scale.

Shape legend (torch's FlexAttention letters):
    B   batch       H   query heads     Hkv key/value heads     G = H / Hkv
    L   query rows  S   key rows        E   query/key width     Ev  value width
    query (B, H, L, E), key (B | 1, Hkv, S, E), value (B | 1, Hkv, S, Ev)
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError
from attnlab.flex._block_mask import FULL, BlockMask, noop_mask
from attnlab.flex._mods import ALiBi, RelativeBias

__all__ = ["check_call", "check_grad"]

_LAYOUT = {"query": "(B, H, L, E)", "key": "(B, Hkv, S, E)", "value": "(B, Hkv, S, Ev)"}


def _array(name: str, value) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"expected {name} to be a rectangular array, but got {exc}") from None
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and arr.dtype.itemsize < 4):
        raise AttnlabError(
            f"expected {name} to hold float32, float64 or integer numbers, but got dtype "
            f"{arr.dtype} instead"
        )
    if arr.ndim != 4 or arr.size == 0:
        raise ShapeError(
            f"expected {name} of shape {_LAYOUT.get(name, '(B, H, L, Ev)')} with no empty "
            f"axis, but got shape {arr.shape} instead"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise NonFiniteInputError(f"expected finite {name}, but got NaN or inf in it instead")
    return arr


def _heads(q, k, v, enable_gqa) -> int:
    if not isinstance(enable_gqa, bool | np.bool_):
        raise AttnlabError(f"expected enable_gqa to be True or False, but got {enable_gqa!r}")
    if k.shape[:3] != v.shape[:3]:
        raise ShapeError(
            f"expected value's (B, Hkv, S) to be key's {k.shape[:3]}, but got value of shape "
            f"{v.shape} instead"
        )
    if q.shape[3] != k.shape[3]:
        raise ShapeError(
            f"expected key's width E to be query's {q.shape[3]}, but got key of shape "
            f"{k.shape} instead"
        )
    if k.shape[0] not in (1, q.shape[0]):
        raise ShapeError(
            f"expected key's batch to be query's {q.shape[0]} or 1, but got key of shape "
            f"{k.shape} instead"
        )
    h, hkv = q.shape[1], k.shape[1]
    if h != hkv and not (enable_gqa and h % hkv == 0):
        need = "a divisor of" if enable_gqa else "equal to (or enable_gqa=True and a divisor of)"
        raise ShapeError(
            f"expected key's heads Hkv to be {need} query's H = {h}, but got Hkv = {hkv} instead"
        )
    return h // hkv


def _block_mask(block_mask, q, k) -> BlockMask:
    (batch, heads, n, _), m = q.shape, k.shape[2]
    if block_mask is None:  # one full tile: no mask_mod to call
        return BlockMask(np.full((1, 1, 1, 1), FULL, np.int8), noop_mask, (1, 1, n, m), (n, m))
    if not isinstance(block_mask, BlockMask):
        raise AttnlabError(
            f"expected block_mask to be None or a BlockMask from attnlab.create_block_mask, "
            f"but got {type(block_mask).__name__} instead"
        )
    b, h, bn, bm = block_mask.shape
    if (bn, bm) != (n, m) or b not in (1, batch) or h not in (1, heads):
        raise ShapeError(
            f"expected block_mask of shape (B or 1, H or 1, L, S) = ({batch} or 1, {heads} or "
            f"1, {n}, {m}) for these query and key, but got block_mask of shape "
            f"{block_mask.shape} instead"
        )
    return block_mask


def _scale(scale, width: int) -> float:
    if scale is None:
        return 1.0 / float(np.sqrt(width))
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.number):
        raise AttnlabError(f"expected scale to be None or a number, but got {scale!r} instead")
    if not np.isfinite(scale):
        raise AttnlabError(f"expected a finite scale, but got {scale!r} instead")
    return float(scale)


def _score_mod(score_mod, heads: int):
    if score_mod is not None and not callable(score_mod):
        raise AttnlabError(f"expected score_mod to be None or callable, but got {score_mod!r}")
    table = getattr(score_mod, "slopes", getattr(score_mod, "table", None))
    rows = None
    if isinstance(score_mod, ALiBi) or (isinstance(score_mod, RelativeBias) and table.ndim == 2):
        rows = table.shape[0]
    if rows is not None and rows != heads:
        raise ShapeError(
            f"expected score_mod {score_mod!r} to hold one row per query head, {heads}, but "
            f"got {rows} instead"
        )
    return score_mod


def check_call(query, key, value, score_mod, block_mask, scale, enable_gqa) -> SimpleNamespace:
    """The checked call: q, k, v in one float dtype, the group size, the block mask and scale."""
    q, k, v = _array("query", query), _array("key", key), _array("value", value)
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    group = _heads(q, k, v, enable_gqa)
    return SimpleNamespace(
        q=q,
        k=k,
        v=v,
        group=group,
        block_mask=_block_mask(block_mask, q, k),
        given_mask=block_mask is not None,
        scale=_scale(scale, q.shape[3]),
        score_mod=_score_mod(score_mod, q.shape[1]),
    )


def check_grad(grad_out, x: SimpleNamespace) -> np.ndarray:
    """grad_out as the output's shape (B, H, L, Ev) in the call's dtype."""
    g = _array("grad_out", grad_out)
    shape = x.q.shape[:3] + (x.v.shape[3],)
    if g.shape != shape:
        raise ShapeError(
            f"expected grad_out of the output's shape {shape}, but got shape {g.shape} instead"
        )
    return g.astype(x.q.dtype, copy=False)
