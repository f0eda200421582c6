"""Validation once, at the public boundary: inputs, options and the checks both kernels share.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

The public functions (``attention``, ``blockwise_attention``, ``trace_attention``, multi-head)
call ``validate`` and the option checks here; the kernels (``kernels/dense.py``,
``kernels/blockwise.py``) take the ``Inputs`` it returns and trust them. Errors are worded
"expected ..., but got ... instead" and name the argument.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from attnlab.core.masks import Mask, as_mask, raise_fully_masked
from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError

__all__ = [
    "Inputs",
    "as_real",
    "check_block_size",
    "check_budget",
    "check_method",
    "check_overflow",
    "check_q_scale",
    "check_scores_in_bands",
    "check_threads",
    "compute_dtype",
    "may_overflow",
    "raise_empty_rows",
    "refuse_non_finite",
    "score_limit",
    "validate",
    "validate_later",
]


@dataclass(frozen=True)
class Inputs:
    """Validated arguments: arrays in the compute dtype, a Mask (or None), and the sizes."""

    q: np.ndarray  # (..., N, d_k)
    k: np.ndarray  # (..., M, d_k)
    v: np.ndarray  # (..., M, d_v)
    mask: Mask | None
    scale: float
    lead: tuple[int, ...]  # the broadcast leading shape
    n: int
    m: int
    check_finite: bool = True  # also refuse scores that overflow to inf
    softcap: float | None = None  # scores <- softcap · tanh(scores / softcap), before the mask
    sinks: np.ndarray | None = None  # one logit per head, broadcast into lead (see _variants)

    def table_lead(self) -> tuple[int, ...]:
        """Leading shape of the score table: q's and k's leading axes, and the mask's."""
        shapes = [self.q.shape[:-2], self.k.shape[:-2]]
        if self.mask is not None:
            shapes.append(self.mask.table_shape(self.n, self.m, len(self.lead))[:-2])
        return tuple(np.broadcast_shapes(*shapes))


def as_real(name: str, x) -> np.ndarray:
    """``x`` as an array of real numbers with at least two axes (rows, width), or a clear error."""
    try:
        arr = np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"expected {name} to be a rectangular array, but got {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise AttnlabError(
            f"expected {name} to hold real numbers, but got dtype {arr.dtype} instead"
        )
    if arr.ndim < 2:
        raise ShapeError(
            f"expected {name} to have shape (..., rows, width), but got {name}.shape={arr.shape} instead"
        )
    return arr


def compute_dtype(*arrays: np.ndarray) -> np.dtype:
    """float32 stays float32, float64 stays float64; integers and float16 compute in a float."""
    dtype = np.result_type(*arrays)
    if dtype.kind in "biu" or dtype.itemsize > 8:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def refuse_non_finite(name: str, arr: np.ndarray, hint: bool = True) -> None:
    """Refuse NaN or inf in ``arr``, naming the first bad entry; ``hint``: say that
    check_finite=False skips the check (False where the caller has no such option)."""
    # A NaN or inf anywhere makes the sum NaN or inf: one quick pass (no bool table) clears the
    # common case; only a non-finite sum, which large finite values can also reach by
    # overflowing, needs the entry-by-entry look. Not np.dot, though faster: OpenBLAS would run
    # it on its own threads, which then spin for ~0.1 s and steal the cores the blockwise pool
    # is about to use.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(arr)):
            return
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteInputError(
            f"expected finite values in {name}, but got {arr[where]} at index {where} "
            f"({int(bad.sum())} non-finite entries)"
            + ("; pass check_finite=False to skip this check" if hint else "")
        )


def _check_scale(scale, d_k: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d_k)  # §6.3: keeps Var(score) = 1 at any d_k
    if isinstance(scale, bool):
        raise AttnlabError(f"expected scale to be a number, but got {scale!r} instead")
    try:
        scale = float(scale)
    except (TypeError, ValueError, OverflowError):
        raise AttnlabError(f"expected scale to be a number, but got {scale!r} instead") from None
    if not math.isfinite(scale):
        raise AttnlabError(f"expected a finite scale, but got {scale!r} instead")
    return scale


def validate(q, k, v, mask=None, *, scale=None, check_finite=True) -> Inputs:
    """Check shapes, dtypes, values, scale and mask once, at the public boundary."""
    q, k, v = as_real("q", q), as_real("k", k), as_real("v", v)
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(
            f"expected q and k to share d_k (their last axis), "
            f"but got q.shape={q.shape} and k.shape={k.shape} instead"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"expected k and v to have the same number of rows M (one value per key), "
            f"but got k.shape={k.shape} and v.shape={v.shape} instead"
        )
    if k.shape[-2] == 0:
        raise ShapeError(f"expected at least one key, but got k.shape={k.shape}")
    if q.shape[-2] == 0:
        raise ShapeError(f"expected at least one query row, but got q.shape={q.shape}")
    if q.shape[-1] == 0:
        raise ShapeError(f"expected d_k >= 1, but got q.shape={q.shape} and k.shape={k.shape}")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        if arr.size == 0:  # a batch axis of size 0, or d_v = 0
            raise ShapeError(
                f"expected no axis of size 0 in {name}, but got {name}.shape={arr.shape} instead"
            )
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ShapeError(
            f"expected the leading (batch) axes of q, k and v to broadcast, but got "
            f"q.shape={q.shape}, k.shape={k.shape} and v.shape={v.shape} instead"
        ) from None
    dtype = compute_dtype(q, k, v)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    if check_finite:
        for name, arr in (("q", q), ("k", k), ("v", v)):
            refuse_non_finite(name, arr)
    scale = _check_scale(scale, q.shape[-1])
    n, m = q.shape[-2], k.shape[-2]
    mask = as_mask(mask)
    if mask is not None:
        mask = mask.for_dtype(dtype)
        _check_mask_shape(mask, n, m, lead)
    return Inputs(q, k, v, mask, scale, tuple(lead), n, m, check_finite)


def validate_later(q, k, v, mask=None, *, scale=None, check_finite=True):
    """``validate`` with the finite-input check handed back as a function, to run when (and
    where) the caller likes: the blockwise path runs it on its thread pool beside the first
    tiles. Errors stay those of ``validate``, in its order: when another check fails, the
    finite check runs first, as ``validate`` would have.

    Returns:
        (Inputs, a function raising NonFiniteInputError, or None when check_finite is False).
    """
    try:
        x = validate(q, k, v, mask, scale=scale, check_finite=False)
    except AttnlabError:
        if check_finite:
            validate(q, k, v, mask, scale=scale)  # raises the error validate raises first
        raise
    if not check_finite:
        return x, None
    x = replace(x, check_finite=True)  # the kernels still refuse scores that overflow

    def finite() -> None:
        for name, arr in (("q", x.q), ("k", x.k), ("v", x.v)):
            refuse_non_finite(name, arr)

    return x, finite


def _check_mask_shape(mask: Mask, n: int, m: int, lead: tuple[int, ...]) -> None:
    table = lead + (n, m)
    try:
        shape = mask.table_shape(n, m, len(lead))
    except ShapeError:
        raise  # a part's own message (e.g. Padding needs a batch axis) says what is wrong
    except ValueError:
        raise ShapeError(
            f"expected the parts of {mask!r} to broadcast together over the batch axes, "
            f"but they do not (score table (..., N, M) = {table})"
        ) from None
    try:
        fits = np.broadcast_shapes(table, shape) == table
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            f"expected the mask to broadcast to the score table (..., N, M) = {table}, "
            f"but got {mask!r} of shape {shape} instead"
        )


# -- options ------------------------------------------------------------------------------------

METHODS = ("auto", "dense", "blockwise")
#: The largest tile side accepted: far beyond any useful tile, and small enough that the
#: kernels' index arithmetic can never overflow.
MAX_BLOCK = 2**31


def check_method(method) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise AttnlabError(f"expected method to be one of {METHODS}, but got {method!r} instead")
    return method


def check_budget(budget) -> float:
    """A positive, finite number of bytes (the caller supplies the default for None)."""
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | float | np.integer | np.floating)
        or not 0 < budget < math.inf
    ):
        raise AttnlabError(
            f"expected memory_budget to be a positive number of bytes, but got {budget!r} instead"
        )
    return float(budget)


def _is_count(x, high: int | None = None) -> bool:
    return (
        not isinstance(x, bool)
        and isinstance(x, int | np.integer)
        and x >= 1
        and (high is None or x <= high)
    )


def check_block_size(block_size, default: tuple[int, int]) -> tuple[int, int]:
    """(Bq, Bk) from None | int | (int, int), or a clear error."""
    if block_size is None:
        return default
    pair = block_size if isinstance(block_size, tuple | list) else (block_size, block_size)
    if len(pair) != 2 or not all(_is_count(b, MAX_BLOCK) for b in pair):
        raise AttnlabError(
            "expected block_size to be an integer from 1 to 2**31 or a pair (query rows, keys) "
            f"of them, but got {block_size!r} instead"
        )
    return int(pair[0]), int(pair[1])


#: The most threads a call may ask for: beyond this a pool only adds overhead.
MAX_THREADS = 1024


def check_threads(threads) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if not _is_count(threads, MAX_THREADS):
        raise AttnlabError(
            f"expected threads to be an integer from 1 to {MAX_THREADS}, but got {threads!r} instead"
        )
    return int(threads)


# -- checks the kernels share -------------------------------------------------------------------


def may_overflow(x: Inputs) -> bool:
    """Whether q·kᵀ·scale could overflow: a cheap bound, max|q|·max|k|·d_k·|scale|.

    Finite q and k can still give scores of ±inf (or -inf where inf - inf cancels inside a
    dot product, which would pass for a masked key). The bound costs one pass over q and k;
    only when it fails does each table of scores get checked entry by entry.
    """
    if not x.check_finite:
        return False
    with np.errstate(over="ignore"):
        top = np.abs(x.q).max() * abs(x.scale)  # also bounds q · scale · log2 e (blockwise)
        bound = top * np.abs(x.k).max() * x.q.shape[-1]
    return not (bound < score_limit(x.q.dtype) and top < score_limit(x.q.dtype))


def score_limit(dtype) -> float:
    """The largest |score| (and |q| · scale) accepted: half the dtype's range, since a float
    mask may add up to a quarter more (see masks.Dense), over log2(e), since the blockwise
    kernels work in base 2 and multiply q · scale and every score by log2(e)."""
    return float(np.finfo(dtype).max) / 2 / math.log2(math.e)


def check_q_scale(x: Inputs) -> None:
    """Refuse a q that the base-2 kernels' q · scale · log2(e) would overflow, whatever k is."""
    top = float(np.abs(x.q).max()) * abs(x.scale)
    if not top < score_limit(x.q.dtype):
        raise NonFiniteInputError(
            f"expected max|q|·scale below {score_limit(x.q.dtype):.3g} (half of "
            f"{x.q.dtype}'s range over log2(e)), but got {top:.3g}; rescale q"
        )


def check_overflow(x: Inputs, scaled: np.ndarray, rows) -> None:
    """Refuse scaled scores (..., rows, M) that overflowed (finite inputs, non-finite scores)
    or that came so close to overflow that the base-2 kernels would (``score_limit``)."""
    limit = score_limit(x.q.dtype)
    bad = ~(np.abs(scaled) < limit)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        row = where[:-2] + (where[-2] + rows[0],)
        at = f"in query row {row}, key {where[-1]}"
        if np.isfinite(scaled[where]):
            raise NonFiniteInputError(
                f"expected scores within ±{limit:.3g} (half of {x.q.dtype}'s range over "
                f"log2(e): room for a mask and for base-2 exponentials), but q·kᵀ·scale is "
                f"{scaled[where]:.3g} {at}; rescale q or k"
            )
        raise NonFiniteInputError(
            f"expected finite scores, but q·kᵀ·scale overflowed to {scaled[where]} {at} (q and "
            f"k are finite, but {x.q.dtype} tops out near {np.finfo(x.q.dtype).max:.3g}); "
            "rescale q or k"
        )


def raise_empty_rows(x: Inputs, rows) -> None:
    """FullyMaskedRowError for ``rows`` (indices into the score table's (..., N)), naming the
    part of the mask that emptied the first one."""
    rows = [tuple(int(i) for i in r) for r in rows]
    lead_ndim = len(rows[0]) - 1
    if x.mask is None:
        raise_fully_masked(rows, "non-finite scores: q or k hold -inf")
    # The score table may have more leading axes than the mask needs; blame the mask's view.
    raise_fully_masked(rows, x.mask.blame(x.n, x.m, lead_ndim, rows[0]))


def check_scores_in_bands(x: Inputs) -> None:
    """Refuse scores that overflow, a band of rows at a time (never the N x M table): the
    kernels would turn them into NaN, or into -inf that passes for a blocked key."""
    check_q_scale(x)
    kT = np.swapaxes(x.k, -1, -2)  # (..., d_k, M)
    rows = max(1, CHECK_BYTES // (max(1, math.prod(x.lead)) * x.m * x.q.dtype.itemsize))
    for r0 in range(0, x.n, rows):
        with np.errstate(over="ignore", invalid="ignore"):
            s = x.q[..., r0 : r0 + rows, :] @ kT  # (..., rows, M)
            s *= s.dtype.type(x.scale)
        check_overflow(x, s, (r0, r0 + rows))


CHECK_BYTES = 2**26  # 64 MiB of scores per band of the overflow check
