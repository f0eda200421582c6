"""The fast path's checks (``kernels/_small.py``): whether a call may take it, and its inputs'
peaks, in as little work per call as the call allows.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

Everything that depends only on the call's shapes, dtype, mask, scale and method (the leading
axes, the scale, the mask's tables, the compiled pass to take) is worked out once and kept as
a plan: a training loop, the explorer's figures and the worked example repeat one call
thousands of times, and at (1, 1, 4, 2) the plan was a third of a call of about 60 µs. What
depends on the numbers (finite inputs, scores far from overflow) is checked on every call.
A mask given as an array is not hashable and takes the same checks unkept.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from attnlab.core._validate import score_limit
from attnlab.kernels import blockwise
from attnlab.kernels._fused import _env_set, rows_softmax
from attnlab.kernels._precision import WIDE
from attnlab.kernels._small_masks import broadcast, mask_tables

__all__ = ["SMALL_BYTES", "Peaks", "Plan", "Prepared", "peak", "prepare"]

#: The largest score table (..., N, M) the fast path takes: past it the dense kernel's bands
#: and thread pool pay for their overhead.
SMALL_BYTES = 2**23
#: A quarter of ``_validate.score_limit``: a call near the limit goes to the general path.
_LIMIT = {c: score_limit(np.dtype(c)) / 4 for c in "fd"}
#: Up to this many elements of q, k, v (and dO) in all, their peaks come from one joined copy.
_JOINED_PEAKS = 2**14
#: Plans kept (``_plan``); past it the dict starts again, as the mask tables' cache does.
_PLANS_AT_MOST = 256
_plans: dict = {}
#: Plans whose mask tables take more than this are not kept, so that the kept plans hold at most
#: _PLANS_AT_MOST of these (64 MiB): a call past it spends milliseconds on its arithmetic.
_KEEP_TABLES_UP_TO = 2**18
_NO_PLAN = object()  # a kept "the general path answers"


class Plan(NamedTuple):
    """What a call's shapes, dtype, mask, scale and method decide (``_static``), kept per call
    signature. Tables are (table lead..., N, M) or broadcastable to it."""

    lead: tuple[int, ...]  # the output's leading axes: q, k, v broadcast
    table_lead: tuple[int, ...]  # the score table's leading axes (the mask's may widen them)
    scale: float
    blocked: np.ndarray | None  # (..., N, M) bool, True where the mask blocks a pair; or None
    biases: tuple  # the mask's float parts, each added to the scores
    hollow: bool  # some row may have no allowed key
    reach: np.ndarray | None  # (N,) keys each row may reach, when the mask blocks tails
    kernel: object  # the compiled softmax pass (``_fused.rows_softmax``), or None


class Peaks(NamedTuple):
    """The inputs' peaks, checked finite on every call: max|q|, max|k|, max|v|, the bound on
    |scaled score| (``_finite_and_safe``), max|dO| (0 without dO)."""

    q: float
    k: float
    v: float
    scores: float
    g: float


class Prepared(NamedTuple):
    """``prepare``'s answer: a call's inputs with its plan and peaks, as every step of the fast
    path reads them (``kernels/_small.py``, ``_small_exp.py``, ``_small_cores.py``)."""

    q: np.ndarray  # (..., N, d_k)
    k: np.ndarray  # (..., M, d_k)
    v: np.ndarray  # (..., M, d_v)
    scale: float
    lead: tuple[int, ...]  # the output's leading axes
    table_lead: tuple[int, ...]  # the score table's leading axes
    blocked: np.ndarray | None  # (..., N, M) bool, or None
    biases: tuple  # the mask's float parts
    sure: bool  # no row can be blocked whole and the scores lie within ±WIDE: rows unchecked
    peaks: Peaks
    reach: np.ndarray | None  # (N,) keys each row may reach, or None
    kernel: object  # the compiled softmax pass, or None (numpy's operations)


def prepare(q, k, v, mask, scale, method, g=None):
    """The call's ``Prepared`` inputs, plan and peaks when every check the general path makes
    would pass (on dO ``g`` too, when given) and the problem is small; None at any doubt."""
    if type(q) is not np.ndarray or type(k) is not np.ndarray or type(v) is not np.ndarray:
        return None
    dtype = q.dtype
    if not (dtype.char in "fd" and dtype.isnative and k.dtype == dtype and v.dtype == dtype):
        return None  # integers, float16 and mixed dtypes are converted by the general path
    if g is not None and (type(g) is not np.ndarray or g.dtype != dtype):
        return None
    plan = _plan(
        q.shape, k.shape, v.shape, None if g is None else g.shape, dtype, mask, scale, method
    )
    if plan is None:
        return None
    lead, tlead, sc, blocked, biases, hollow, reach, kernel = plan
    tops = _finite_and_safe(sc, dtype, q, k, v, g)
    if tops is None:
        return None
    # Rows need no check (a max of -inf, scores past ±WIDE) when no float part can move a
    # score, no row is blocked whole, and the scores' bound already keeps them within ±WIDE.
    sure = not biases and not hollow and (dtype.char == "d" or tops.scores <= WIDE)
    return Prepared(q, k, v, sc, lead, tlead, blocked, biases, sure, tops, reach, kernel)


def _plan(qs, ks, vs, gs, dtype, mask, scale, method):
    """``_static``'s answer, kept per call signature while ATTNLAB_KERNEL is unset. While it
    is set, the compiled pass is picked by a rule that reads it: the plan is made afresh and
    never kept, so no plan made under a setting outlives it."""
    if _env_set():
        return _static(qs, ks, vs, gs, dtype, mask, scale, method)
    try:
        budget = blockwise.DEFAULT_MEMORY_BUDGET  # documented as reassignable
        key = (qs, ks, vs, gs, dtype.char, mask, type(scale), scale, method, budget)
        plan = _plans.get(key)
    except TypeError:  # an array mask (or scale): not hashable
        return _static(qs, ks, vs, gs, dtype, mask, scale, method)
    if plan is None:
        plan = _static(qs, ks, vs, gs, dtype, mask, scale, method)
        if plan is not None and _held(plan) > _KEEP_TABLES_UP_TO:
            return plan  # a call this large spends nothing worth keeping on its plan
        if len(_plans) >= _PLANS_AT_MOST:
            _plans.clear()
        _plans[key] = _NO_PLAN if plan is None else plan
    return None if plan is _NO_PLAN else plan


def _held(plan) -> int:
    """Bytes of the mask tables a plan holds (its blocked pairs and float parts)."""
    return (0 if plan.blocked is None else plan.blocked.nbytes) + sum(b.nbytes for b in plan.biases)


def _static(qs, ks, vs, gs, dtype, mask, scale, method):
    """The ``Plan`` of what a call's numbers do not change, or None where the general path must
    answer."""
    if len(qs) < 2 or len(ks) < 2 or len(vs) < 2 or 0 in qs or 0 in ks or 0 in vs:
        return None
    if qs[-1] != ks[-1] or ks[-2] != vs[-2]:
        return None
    lead = broadcast(qs[:-2], ks[:-2], vs[:-2])
    n, m, d_k = qs[-2], ks[-2], qs[-1]
    if lead is None or (gs is not None and gs != lead + (n, vs[-1])):
        return None
    table = math.prod(lead) * n * m * dtype.itemsize  # what method="auto" weighs
    if method == "auto":
        if table > blockwise.DEFAULT_MEMORY_BUDGET:
            return None
    elif method != "dense":
        return None
    sc = _scale(scale, d_k)
    drawn = None if sc is None else mask_tables(mask, n, m, lead, dtype)
    if drawn is None:
        return None
    shape, blocked, biases, hollow, reach = drawn
    tlead = broadcast(qs[:-2], ks[:-2], shape[:-2] or qs[:-2])  # the score table's lead axes
    if (
        tlead is None
        or len(tlead) != len(lead)
        or math.prod(tlead) * n * m * dtype.itemsize > SMALL_BYTES
    ):
        return None
    kernel = rows_softmax(dtype, tlead, n, m, blocked, biases)
    return Plan(lead, tlead, sc, blocked, biases, hollow, reach, kernel)


def _scale(scale, d_k: int) -> float | None:
    if scale is None:
        return 1.0 / math.sqrt(d_k)  # §6.3: keeps Var(score) = 1 at any d_k
    if type(scale) in (float, int, np.float64, np.float32) and abs(scale) < 2**1000:
        return float(scale)  # finite (a NaN fails the test above)
    return None


def _finite_and_safe(scale: float, dtype, q, k, v, g) -> Peaks | None:
    """The ``Peaks`` (max|q|, max|k|, max|v|, the bound on |scaled score|, max|g| or 0) when
    q, k, v (and g) are finite and no score can come near overflow, else None: a peak is NaN
    or inf exactly when its array holds one, and max|q|, max|k| bound the scores as
    ``_validate.may_overflow`` does (see ``_LIMIT``)."""
    top_q, top_k, top_v, *top_g = _peaks((q, k, v) if g is None else (q, k, v, g))
    if not all(map(math.isfinite, (top_q, top_k, top_v, *top_g))):
        return None
    limit = _LIMIT[dtype.char]
    top = top_q * abs(scale)
    bound = top * top_k * q.shape[-1]
    # q · kᵀ is formed before the scale: a scale < 1 must not hide a product that overflows
    raw = top_q * top_k * q.shape[-1]
    if not (top < limit and bound < limit and raw < limit):
        return None
    return Peaks(top_q, top_k, top_v, bound, top_g[0] if top_g else 0.0)


# The ufuncs' reductions called directly: what ndarray.max and .min run, without the Python
# layer in between (a microsecond each, on calls of a few dozen).
_max, _min = np.maximum.reduce, np.minimum.reduce
_max_at = np.maximum.reduceat


def peak(a: np.ndarray) -> float:
    """max|a|: NaN or inf exactly when ``a`` holds one (both reductions carry a NaN). Two
    passes that read ``a`` beat |a|'s fresh copy: 2 ms of a 20 ms call at (8, 8, 128, 64)."""
    return max(float(_max(a, axis=None)), -float(_min(a, axis=None)))


def _peaks(arrays) -> list[float]:
    """[max|a| for a in arrays] (of one dtype): in three numpy calls when they are small,
    where each call, not the arithmetic, is the cost (2.4x faster for the worked example)."""
    starts, end = [], 0
    for a in arrays:  # each array's first element in the joined copy
        starts.append(end)
        end += a.size
    if end > _JOINED_PEAKS:
        return [peak(a) for a in arrays]
    flat = np.concatenate(arrays, axis=None)  # (Σ sizes,)
    np.abs(flat, out=flat)
    return _max_at(flat, starts).tolist()
