"""Masks from and to PyTorch and Hugging Face conventions (JAX's are in ``interop_jax.py``).

Shape legend (the chapter's letters):
    B   batch elements      h   heads
    N   query rows          M   key rows

Polarity is where conventions differ, so every converter states it:

    convention                          True / 1 means          blocked is
    attnlab bool mask, SDPA attn_mask   may attend              False
    SDPA / attnlab float mask           added to the scores     -inf (or finfo.min)
    nn.MultiheadAttention key_padding   IGNORE this key         True
    Hugging Face attention_mask (B, M)  a real token            0
    Hugging Face 4-D mask (B, 1, N, M)  added to the scores     finfo(dtype).min

A converter returns a mask spec (``Causal``, ``SlidingWindow``, ``Padding`` or a sum of them)
when the table has that structure, checked exactly by rendering, and a ``Dense`` table
otherwise. ``Padding`` indexes the first leading axis of q, which is the batch axis of the
(B, h, N, d_k) layout these frameworks use. No framework is imported: a tensor is read through
numpy (``torch.from_numpy`` reads what ``to_torch`` returns).
"""

from __future__ import annotations

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.core._structure import spec_of
from attnlab.core.masks import Dense, Mask, Padding, as_mask
from attnlab.errors import AttnlabError, ShapeError

__all__ = [
    "as_numpy",
    "from_hf",
    "from_hf_4d",
    "from_key_padding_mask",
    "from_torch",
    "read_additive",
    "to_torch",
]


def as_numpy(name: str, x) -> np.ndarray:
    """``x`` (a numpy array, list, torch tensor or jax array) as a numpy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor: off the graph and the GPU
        x = x.detach().cpu()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise AttnlabError(
            f"expected {name} to be an array numpy can read, but got {type(x).__name__} "
            f"instead ({exc}); a bfloat16 tensor needs .float() first"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise AttnlabError(
            f"expected {name} of a bool, integer or float dtype, but got {arr.dtype} instead"
        )
    return arr


def read_additive(name: str, arr: np.ndarray) -> np.ndarray | None:
    """The bool table of an additive float mask whose values are only 0 and blocked (-inf, or at
    or below ``finfo(dtype).min`` as Hugging Face writes it), else None (it carries biases)."""
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise AttnlabError(
            f"expected {name} to hold finite values and -inf, but it holds NaN or +inf"
        )
    blocked = arr <= np.finfo(arr.dtype).min  # -inf included
    if (arr[~blocked] != 0).any():
        return None
    return ~blocked


def _float_mask(name: str, arr: np.ndarray, wanted: str, hint: str) -> np.ndarray | None:
    """A mask that is not bool: refused when it holds integers (whose 1 could mean either
    "attend" or "block"), else ``read_additive``'s table (None when it carries biases)."""
    if arr.dtype.kind in "iu":
        raise AttnlabError(
            f"expected {name} of dtype {wanted}, but got {arr.dtype} instead; {hint}"
        )
    return read_additive(name, arr)


def _table_ndim(name: str, arr: np.ndarray, ndims: tuple[int, ...], layout: str) -> None:
    if arr.ndim not in ndims:
        raise ShapeError(
            f"expected {name} of shape {layout}, but got shape {arr.shape} "
            f"({arr.ndim} axes) instead"
        )


def from_torch(attn_mask) -> Mask | None:
    """The attnlab mask for PyTorch SDPA's ``attn_mask``.

    Args:
        attn_mask: (..., N, M), as ``torch.nn.functional.scaled_dot_product_attention`` reads
            it. bool: True = may attend (the same polarity as attnlab). float: added to the
            scaled scores, -inf (or ``finfo.min``) blocks. None: no mask.

    Returns:
        ``Causal`` / ``SlidingWindow`` when the table is that band; for a 4-D mask, whose first
        axis is SDPA's batch, ``Padding`` (plus a band) when each batch element's table is a
        prefix of keys; a ``Dense`` table otherwise, or a float ``Dense`` when the mask adds
        finite biases.

    >>> import numpy as np
    >>> from attnlab.masks import explain
    >>> from_torch(np.tril(np.ones((3, 3), dtype=bool)))  # what is_causal=True builds
    Causal()
    >>> pad = np.arange(4) < np.array([[4], [2]])  # (B, M): two sequences, 4 and 2 real keys
    >>> spec = from_torch(pad[:, None, None, :])  # (B, 1, 1, M) for q of shape (B, h, N, d_k)
    >>> spec
    Padding(lengths=[4, 2])
    >>> print(explain(spec, 1, 4))
    Padding(lengths=[4, 2]) on N=1 queries x M=4 keys.
      ·  may attend
      p  blocked by Padding(lengths=[4, 2]): batch element b sees keys 0..lengths[b]-1
    batch element 0:
      key      0 1 2 3
      query 0  · · · ·  sees keys 0-3
    batch element 1:
      key      0 1 2 3
      query 0  · · p p  sees keys 0-1
    """
    if attn_mask is None:
        return None
    arr = as_numpy("attn_mask", attn_mask)
    if arr.ndim < 2:
        raise ShapeError(
            f"expected attn_mask of shape (..., N, M) with at least 2 axes, but got shape "
            f"{arr.shape} instead"
        )
    if arr.dtype.kind != "b":
        allowed = _float_mask(
            "attn_mask",
            arr,
            "bool (True = may attend) or float (added to the scores), as SDPA requires",
            "use attn_mask.bool() if 1 means 'may attend'",
        )
        if allowed is None:
            return Dense(arr)
        arr = allowed
    return spec_of(arr, batch_first=arr.ndim == 4)


def to_torch(mask, n: int, m: int | None = None, *, dtype=bool, lead_ndim: int | None = None):
    """``mask`` as an ``attn_mask`` for PyTorch SDPA: a numpy array for ``torch.from_numpy``.

    Args:
        mask: a mask spec, or an array as ``attention`` accepts; None gives None.
        n: query count N.   m: key count M (defaults to N).
        dtype: bool (True = may attend) or a float dtype (0 / -inf, plus any biases the mask
            carries: a float mask with biases needs a float dtype).
        lead_ndim: how many leading axes q has. Default: 2 for a mask that varies by batch
            element, giving (B, 1, N, M) for SDPA's (B, h, N, d_k) layout; else the mask's own
            (N, M) or Dense shape.

    >>> from attnlab.masks import Causal, Padding
    >>> to_torch(Causal() + Padding([2, 3]), 2, 3).shape
    (2, 1, 2, 3)
    >>> to_torch(Causal(), 2, dtype=np.float32)
    array([[  0., -inf],
           [  0.,   0.]], dtype=float32)
    """
    mask = as_mask(mask)
    if mask is None:
        return None
    dtype = np.dtype(dtype)
    if dtype.kind not in "bf":
        raise AttnlabError(f"expected dtype bool or a float dtype, but got {dtype} instead")
    if lead_ndim is None and mask.batched:
        lead_ndim = 2
    if dtype.kind == "f":
        table = mask.for_dtype(dtype).additive(n, m, lead_ndim=lead_ndim, dtype=dtype)
        return np.ascontiguousarray(table)
    if not mask.boolean:
        biased = mask.additive(n, m, lead_ndim=lead_ndim)
        if (np.isfinite(biased) & (biased != 0)).any():
            raise AttnlabError(
                f"expected a mask of 0 and -inf only for dtype=bool, but got {mask!r}, which "
                "adds finite biases; pass dtype=np.float32 (or the scores' dtype) instead"
            )
    return np.ascontiguousarray(mask.allowed(n, m, lead_ndim=lead_ndim))


def _placed(keys: np.ndarray, lead_ndim: int) -> Dense:
    """A Dense table of per-key values (B, M) or (M,) whose batch axis lands on q's first of
    ``lead_ndim`` leading axes: (B, 1, ..., 1, M), the same for every query (and head)."""
    if keys.ndim == 1:  # unbatched: one row of keys for every query
        return Dense(keys[None, :])  # (1, M)
    b, m = keys.shape
    return Dense(keys.reshape((b,) + (1,) * (lead_ndim - 1) + (1, m)))  # (B, 1, ..., 1, M)


def _key_mask(allowed: np.ndarray, lead_ndim: int) -> Mask:
    """``Padding`` when each batch element's allowed keys are a prefix, else a placed table."""
    if allowed.ndim == 2:
        lengths = allowed.sum(axis=-1)  # (B,)
        if np.array_equal(np.arange(allowed.shape[-1]) < lengths[:, None], allowed):
            return Padding(lengths)
    return _placed(allowed, lead_ndim)


def from_key_padding_mask(key_padding_mask, *, lead_ndim: int = 2) -> Mask:
    """The attnlab mask for ``torch.nn.MultiheadAttention``'s ``key_padding_mask``.

    Args:
        key_padding_mask: (B, M), or (M,) for unbatched input. bool: **True = ignore this key**
            (the opposite of SDPA's and attnlab's bool masks). float: added to the scores.
        lead_ndim: how many leading axes q has: 2 for (B, h, N, d_k) and for
            ``MultiHeadAttention`` on (B, N, d_model) input; 1 for (B, N, d_k). It places the
            batch axis of a Dense result; ``Padding`` needs no placing.

    Returns:
        ``Padding`` when each row ignores a suffix of keys (right padding); else a Dense table
        of shape (B, 1, 1, M) for lead_ndim=2 ((B, 1, M) for 1), True = may attend.

    >>> import numpy as np
    >>> from attnlab.masks import explain
    >>> from_key_padding_mask(np.array([[False, False, True], [False, True, True]]))
    Padding(lengths=[2, 1])
    >>> left = from_key_padding_mask(np.array([[True, False, False]]))  # left padding
    >>> print(explain(left, 1, 3))
    Dense(bool, shape=(1, 1, 1, 3)) on N=1 queries x M=3 keys.
      ·  may attend
      d  blocked by Dense(bool, shape=(1, 1, 1, 3)): an explicit table, False blocks
    leading index (0, 0):
      key      0 1 2
      query 0  d · ·  sees keys 1-2
    """
    arr = as_numpy("key_padding_mask", key_padding_mask)
    _table_ndim("key_padding_mask", arr, (1, 2), "(B, M) or (M,)")
    lead_ndim = positive_int("lead_ndim", lead_ndim)
    if arr.dtype.kind == "b":
        return _key_mask(~arr, lead_ndim)
    allowed = _float_mask(
        "key_padding_mask",
        arr,
        "bool (True = ignore this key) or float",
        "for a Hugging Face 1/0 attention_mask (1 = real token) use from_hf",
    )
    if allowed is None:  # it adds biases: keep them
        return _placed(arr, lead_ndim)
    return _key_mask(allowed, lead_ndim)


def from_hf(attention_mask, *, lead_ndim: int = 2) -> Mask:
    """The attnlab mask for a Hugging Face tokenizer's ``attention_mask``.

    Args:
        attention_mask: (B, M) of 1 and 0 (or bool): **1 = a real token**, 0 = padding.
        lead_ndim: as for ``from_key_padding_mask``.

    Returns:
        ``Padding`` for right padding; a Dense (B, 1, 1, M) table for left padding. Only the
        keys are masked: a decoder adds ``Causal()`` itself, as the model does.

    >>> import numpy as np
    >>> from attnlab.masks import Causal
    >>> Causal() + from_hf(np.array([[1, 1, 1], [1, 1, 0]]))  # right padding
    Causal() + Padding(lengths=[3, 2])
    """
    arr = as_numpy("attention_mask", attention_mask)
    _table_ndim("attention_mask", arr, (2,), "(B, M)")
    lead_ndim = positive_int("lead_ndim", lead_ndim)
    if arr.dtype.kind == "f":
        raise AttnlabError(
            f"expected attention_mask of 1 and 0 (int or bool), but got dtype {arr.dtype} "
            "instead; for the additive (B, 1, N, M) form use from_hf_4d"
        )
    if arr.dtype.kind != "b" and not np.isin(arr, (0, 1)).all():
        bad = sorted(set(np.unique(arr).tolist()) - {0, 1})[:4]
        raise AttnlabError(
            f"expected attention_mask of 1 (real token) and 0 (padding) only, but got {bad} instead"
        )
    return _key_mask(arr.astype(bool), lead_ndim)


def from_hf_4d(mask) -> Mask:
    """The attnlab mask for a Hugging Face model's 4-D attention mask.

    Args:
        mask: (B, 1, N, M). float: added to the scores, ``finfo(dtype).min`` (or -inf) blocks,
            as ``_prepare_4d_causal_attention_mask`` builds it. bool: True = may attend.

    Returns:
        the causal / sliding-window / padding structure as specs where present (right padding
        and causal give ``Causal() + Padding(...)``), else a Dense table. Where left padding
        leaves a query row with no key, HF's SDPA path unmasks the row; attnlab raises
        ``FullyMaskedRowError`` naming it.

    >>> import numpy as np
    >>> lo = np.finfo(np.float32).min
    >>> causal = np.triu(np.full((3, 3), lo, dtype=np.float32), k=1)  # (N, M)
    >>> pad = np.where(np.arange(3) < np.array([[3], [2]]), 0, lo).astype(np.float32)  # (B, M)
    >>> hf = np.minimum(causal[None, None], pad[:, None, None, :])  # (B, 1, N, M)
    >>> from_hf_4d(hf)
    Causal() + Padding(lengths=[3, 2])
    """
    arr = as_numpy("mask", mask)
    _table_ndim("mask", arr, (4,), "(B, 1, N, M)")
    if arr.dtype.kind in "iu":
        raise AttnlabError(
            f"expected mask of dtype float (added to the scores) or bool (True = may attend), "
            f"but got {arr.dtype} instead; a (B, M) 1/0 mask goes to from_hf"
        )
    if arr.dtype.kind == "f":
        allowed = read_additive("mask", arr)
        if allowed is None:
            return Dense(arr)
        arr = allowed
    return spec_of(arr, batch_first=True)
