"""Merging attention over disjoint key ranges: (out, lse) partial states into one, exactly.

Shape legend:
    S     partial states (key splits)        ...  any leading axes (batch, heads)
    N     query rows                         d    value width
    outs (S, ..., N, d)   lses (S, ..., N)   ->   out (..., N, d)   lse (..., N)

A split-K kernel (FlashAttention's split-KV decoding, FlashInfer's cascade attention, ring
attention) attends each query to a slice of the keys and keeps, per row, the slice's output
o_s (the softmax over the slice alone, times V) and its log-sum-exp l_s. Since
softmax over all keys = the slices' softmaxes, each weighted by its share of the total mass,

    lse = log Σ_s exp(l_s)        out = Σ_s exp(l_s - lse) · o_s

which is exact: no approximation, only the rounding of the sums. A slice that saw no key has
l_s = -inf and weight exp(-inf) = 0, so it adds nothing, whatever its output holds (kernels
leave 0 or NaN there); when every slice is empty the row has no key at all, and the merge
gives out 0 and lse -inf, as FlashAttention returns such a row.

Peers disagree on the logarithm's base: FlashAttention and PyTorch return the natural log;
FlashInfer keeps its lse in base 2 (log2 of the sum of 2^(s·log2 e)). ``base="2"`` merges such
states (weights 2^(l_s - lse)); the result is in the base it was given.

By hand: two splits of equal mass (lse 0 each) weigh half each, and log(e^0 + e^0) = log 2;
an empty split (lse -inf) changes nothing:

>>> import attnlab as al
>>> out, lse = al.merge_attention_states([[[2.0]], [[4.0]]], [[0.0], [0.0]])
>>> out.tolist(), round(float(lse[0]), 6)
([[3.0]], 0.693147)
>>> out, lse = al.merge_attention_states([[[2.0]], [[9.0]]], [[0.5], [float("-inf")]])
>>> out.tolist(), lse.tolist()
([[2.0]], [0.5])
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError

__all__ = ["merge_attention_states"]

_BASES = ("e", "2")


def _stacked(name: str, x, ndim_min: int) -> np.ndarray:
    """``x`` (an array or a list of arrays) as one float64 array stacked on axis 0."""
    try:
        arr = np.stack([np.asarray(a) for a in x]) if isinstance(x, list | tuple) else x
        arr = np.asarray(arr)
    except (ValueError, TypeError):
        shapes = [np.shape(a) for a in x] if isinstance(x, list | tuple) else type(x).__name__
        raise ShapeError(
            f"expected {name} to be an array or a list of arrays of one shape, but got "
            f"{shapes} instead"
        ) from None
    if arr.dtype.kind not in "iuf" and arr.dtype.name != "bfloat16":
        raise AttnlabError(f"expected {name} to hold real numbers, but got dtype {arr.dtype}")
    if arr.ndim < ndim_min or arr.shape[0] == 0:
        want = "(S, ..., N, d)" if name == "outs" else "(S, ..., N)"
        raise ShapeError(
            f"expected {name} of shape {want} with at least one state, but got "
            f"{name}.shape={arr.shape} instead"
        )
    return arr.astype(np.float64)


def merge_attention_states(outs, lses, *, base="e"):
    """Merge S partial attention states over disjoint key ranges into one: (out, lse).

    Args:
        outs: (S, ..., N, d), or a list of S arrays (..., N, d): each state's output, the
            softmax over its own keys times their values.
        lses: (S, ..., N), or a list of S arrays (..., N): each state's log-sum-exp of its
            scaled scores; -inf for a state whose keys the row did not see (an empty split).
        base: "e" (natural log: FlashAttention, PyTorch) or "2" (FlashInfer).

    Returns:
        (out (..., N, d), lse (..., N)) in float64: attention over all the states' keys
        together. A row where every state is empty gets out 0 and lse -inf.

    Raises:
        ShapeError when the shapes disagree; AttnlabError for another base; NonFiniteInputError
        for an lse that is NaN or +inf, or an output that is not finite where its lse is.
    """
    if not isinstance(base, str) or base not in _BASES:
        raise AttnlabError(f"expected base to be 'e' or '2', but got {base!r} instead")
    outs, lses = _stacked("outs", outs, 3), _stacked("lses", lses, 2)
    if outs.shape[:-1] != lses.shape:
        raise ShapeError(
            f"expected lses of shape {outs.shape[:-1]} (outs' shape without d), but got "
            f"lses.shape={lses.shape} and outs.shape={outs.shape} instead"
        )
    bad = np.isnan(lses) | np.isposinf(lses)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteInputError(
            f"expected lses finite or -inf (an empty split), but got {lses[where]} at index "
            f"{where} instead"
        )
    seen = np.isfinite(lses)  # (S, ..., N): the states that saw a key
    bad = seen[..., None] & ~np.isfinite(outs)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteInputError(
            f"expected outs finite where their lse is, but got {outs[where]} at index "
            f"{where} instead"
        )
    top = lses.max(axis=0)  # (..., N)
    empty = np.isneginf(top)
    shift = np.where(empty, 0.0, top)  # rows with no key: any finite shift, their weights are 0
    power = np.exp if base == "e" else np.exp2
    log = np.log if base == "e" else np.log2
    weights = power(lses - shift)  # (S, ..., N), each <= 1, the largest exactly 1
    total = weights.sum(axis=0)  # (..., N), >= 1 on rows with a key
    clean = np.where(seen[..., None], outs, 0.0)  # an empty state's NaN must not leak
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (weights[..., None] * clean).sum(axis=0) / np.where(empty, 1.0, total)[..., None]
        lse = np.where(empty, -np.inf, shift + log(np.where(empty, 1.0, total)))
    return out, lse  # (..., N, d), (..., N)
