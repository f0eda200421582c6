"""Results that overflow: finite inputs, a non-finite output or gradient, refused by name.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

Scores that overflow are refused before the softmax (``_validate.check_overflow``). What is
left can overflow later: the weighted sum of values (forward) and every table of the chain rule
(backward: dV = Pᵀ dO, dP = dO Vᵀ, dS, dQ, dK). The public dispatchers hand their kernel's
result here, and one check on the small result (never the N x M table) finds a non-finite one:

- forward: the output is a weighted average of value rows, so its true value is never larger
  than max|v|; only a kernel's unnormalised running sum (up to M · max|v|) can overflow. The
  same kernel runs again with v scaled down by an exact power of two, and the output scaled
  back, so dense and blockwise give the same finite answer.
- backward: gradients are linear in dO, so when a kernel's gradients are not finite the same
  kernel runs again with dO scaled down by an exact power of two (dP = dO Vᵀ then fits) and
  the gradients are scaled back. That answers when dP overflowed only at pairs whose weight is
  negligible (P ∘ dP is what the gradients use; the kernels differ in where such an entry
  overflows, so dense and blockwise both go through here). It is not tried when D =
  rowsum(dO ∘ O) = rowsum(P ∘ dP), the part of dP the weights keep, overflows itself: the
  table overflowed where it counts. A float32 call then runs once more in float64, where no
  product of float32 numbers can overflow, and keeps the gradients if they fit float32 after
  one rounding (the true gradients may fit though dP and D do not: dS = P ∘ (dP − D) cancels).
  Gradients that are still not finite are refused with a ``NonFiniteResultError`` naming the
  first table of the chain rule that overflowed (found by the dense tables when they fit the
  memory budget, else named by the gradient itself).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np

from attnlab.core._validate import Inputs
from attnlab.errors import AttnlabError, NonFiniteResultError

__all__ = [
    "checked_backward",
    "checked_forward",
    "checked_trace",
    "fold_tiny_scale",
    "quiet",
    "refuse_impossible_table",
]

# The backward tables in the order the chain rule computes them, with what each one is.
_BACKWARD = (
    ("grad_v", "dV = Pᵀ dO"),
    ("grad_weights", "dP = dO Vᵀ"),
    ("grad_scores", "dS = P ∘ (dP − rowsum(dO ∘ O))"),
    ("grad_q", "dQ = dS K · scale"),
    ("grad_k", "dK = dSᵀ Q · scale"),
)
_WHAT = dict(_BACKWARD) | {
    "output": "P V, the weighted sum of value rows",
    "grad_bias": "dS summed to the float mask's shape",
    "grad_sinks": "each sink's share of the row sums, weighted by D",
}
# Diagnose with dense tables only while they stay this small (the failure path only).
_DIAGNOSE_BYTES = 2**28


def quiet():
    """numpy's overflow warnings off: an overflow is found on the result and named here."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def fold_tiny_scale(x: Inputs) -> tuple[Inputs, float]:
    """(inputs, factor): q · kᵀ computed before a scale < 1 can overflow where the scaled score
    fits (q = 1e29, k = 1e299, scale = 1e-30): the dense kernel would then meet inf · scale and
    answer NaN. There the scale goes into q first, as the blockwise kernel always does, and the
    factor (the scale) is what dQ of the folded q must be multiplied by; elsewhere the inputs
    are unchanged (factor 1), so no result the dense kernel gave before changes a bit."""
    if not 0 <= x.scale < 1 or x.q.size == 0 or x.k.size == 0:
        return x, 1.0
    top_q, top_k = float(np.abs(x.q).max()), float(np.abs(x.k).max())
    if top_q == 0 or top_k == 0 or not math.isfinite(top_q * 0 + top_k * 0):
        return x, 1.0
    bound = math.log2(top_q) + math.log2(top_k) + math.log2(x.q.shape[-1])
    if bound < math.log2(float(np.finfo(x.q.dtype).max)) - 2:
        return x, 1.0
    with quiet():
        q = x.q * x.q.dtype.type(x.scale)  # (..., N, d_k)
    return replace(x, q=q, scale=1.0), x.scale


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not every system names these
        return None


def refuse_impossible_table(x: Inputs) -> None:
    """An AttnlabError, before any work, for a dense call whose (..., N, M) score table could
    not exist on this machine (past its physical memory): the blockwise path's memory grows
    with N, not N · M."""
    table = math.prod(x.table_lead()) * x.n * x.m * x.q.dtype.itemsize
    memory = _physical_memory()
    if memory is not None and table > memory:
        raise AttnlabError(
            f"expected a dense score table that fits in this machine's memory "
            f"({memory / 2**30:.1f} GiB), but (..., N, M) = {x.table_lead() + (x.n, x.m)} "
            f"takes {table / 2**30:.3g} GiB; use method='blockwise' (memory linear in N) or "
            "method='auto'"
        )


def _finite(a: np.ndarray) -> bool:
    # One sum clears the common case without a bool table; inf - inf in the sum is NaN too.
    with quiet():
        return bool(np.isfinite(np.sum(a))) or bool(np.isfinite(a).all())


def _refuse(stage: str, array: str, table: np.ndarray, dtype, fix: str):
    bad = np.argwhere(~np.isfinite(table))
    where = tuple(int(i) for i in bad[0]) if len(bad) else ()
    raise NonFiniteResultError(
        f"expected a finite {stage} pass, but its {array} ({_WHAT[array]}) overflowed "
        f"{np.dtype(dtype).name} (largest finite {np.finfo(dtype).max:.3g}) at index {where}, "
        f"{len(bad)} entries, though every input is finite; {fix}",
        stage=stage,
        array=array,
    )


def checked_forward(x: Inputs, result, rerun):
    """``result`` (output, or a tuple led by it: weights and lse follow) of a kernel run on
    ``x``, made finite (v's scale changes neither the weights nor the lse).

    ``rerun(inputs)`` runs the same kernel again; it is called only when the output overflowed.
    """
    out = result[0] if isinstance(result, tuple) else result  # (..., N, d_v)
    if not x.check_finite or _finite(out):
        return result
    # The true output is at most max|v| in size; the kernels' sums reach M · max|v|. Scale v
    # by 2^-shift (exact) so M · max|v| fits with room, run again, and scale the output back.
    # In logarithms: top · M itself can overflow (v near the dtype's largest value).
    top = float(np.abs(x.v).max())
    room = float(np.finfo(x.v.dtype).max) / 4
    over = math.log2(top) + math.log2(x.m) - math.log2(room) if top > 0 else 0.0
    shift = max(1, math.ceil(over))
    with quiet():
        again = rerun(replace(x, v=np.ldexp(x.v, -shift)))
        out2 = again[0] if isinstance(again, tuple) else again
        out2 = np.ldexp(out2, shift)
        # A weighted average lies within ±max|v|; the weights' rounding (a sum of 1 + ε) can
        # carry it one ulp past that, which at v = the dtype's largest value is inf.
        np.clip(out2, -top, top, out=out2)
    if not _finite(out2):
        _refuse("forward", "output", out2, x.v.dtype, "rescale v")
    return (out2, *again[1:]) if isinstance(again, tuple) else out2


def checked_backward(
    x: Inputs, grad_output: np.ndarray, grads, names=("q", "k", "v"), tables=None, rerun=None,
    output=None, rerun_variants=(False,), wide=None,
):  # fmt: skip
    """``grads`` of a kernel (the gradients ``names``, attention_backward's ``wrt``, in its
    order), or a ``NonFiniteResultError`` naming the first table of the chain rule that
    overflowed. ``tables(x, g)`` gives the dense backward tables (the trace's names), used only
    to say where a non-finite gradient came from. ``rerun(g)`` runs the same kernel on another
    dO and ``output()`` gives the forward output (..., N, d_v): with both, gradients that
    overflowed are tried again from a scaled dO (see the module docstring), ``rerun(g, v)`` for
    each of the kernel's ``rerun_variants`` in turn until one fits (the dense kernel's first
    takes D from rowsum(dO ∘ O), its second from dP itself). ``wide(second)`` runs the same
    kernel on the inputs widened to float64 (with ``second``, the dense one, with the form of D
    the first try did not take) and rounds its gradients to float32: the last tries for a
    float32 call."""
    if not x.check_finite or all(_finite(a) for a in grads):
        return grads
    if rerun is not None and output is not None:
        again = _rescaled(x, grad_output, rerun, output, rerun_variants)
        if again is not None:
            return again
    if wide is not None and x.q.dtype == np.float32:
        # float64's second form of D holds dense tables: only while they stay small
        small = math.prod(x.lead) * x.n * x.m * 8 <= _DIAGNOSE_BYTES
        for second in (False, True) if small else (False,):
            with quiet():
                again = tuple(wide(second))
            if all(_finite(a) for a in again):
                return again
    given = {f"grad_{name}": a for name, a in zip(names, grads, strict=True)}
    first = next(name for name, a in given.items() if not _finite(a))
    found = given
    table = math.prod(x.lead) * x.n * x.m * x.q.dtype.itemsize
    if tables is not None and table <= _DIAGNOSE_BYTES:
        try:
            with quiet():
                found = tables(x, grad_output)
        except AttnlabError:  # the tables refuse what the kernel let through (fully_masked="zero")
            found = given
    for name, _ in _BACKWARD:
        if name in found and not _finite(found[name]):
            _refuse("backward", name, found[name], x.q.dtype, "rescale grad_output, v, q or k")
    _refuse("backward", first, given[first], x.q.dtype, "rescale grad_output, v, q or k")


def _rescaled(x: Inputs, g: np.ndarray, rerun, output, variants):
    """The gradients of dO · 2^-shift, times 2^shift (both exact but for underflow), with the
    shift that keeps every |dO_i · v_j| under a quarter of the dtype's range; None when D
    overflows, when dP could not have overflowed, or when the gradients still do not fit."""
    big = np.finfo(x.q.dtype).max
    with quiet():
        d = np.sum(g * output(), axis=-1)  # (..., N): D = rowsum(dO ∘ O), in the dtype
    top_g, top_v = float(np.abs(g).max()), float(np.abs(x.v).max())
    if not _finite(d) or top_g == 0 or top_v == 0:
        return None
    # log2 of the bound max|dO| · max|v| · d_v on |dP| against a quarter of the range
    over = math.log2(top_g) + math.log2(top_v) + math.log2(x.v.shape[-1]) - math.log2(big / 4)
    if over <= 0:
        return None  # dP fits: the overflow is in the gradients themselves
    shift = math.ceil(over)
    for variant in variants:
        with quiet():
            grads = tuple(np.ldexp(a, shift) for a in rerun(np.ldexp(g, -shift), variant))
        if all(_finite(a) for a in grads):
            return grads
    return None


def checked_trace(x: Inputs, tables: dict) -> dict:
    """The trace's ``tables``, or a ``NonFiniteResultError`` naming the first non-finite one
    (the masked scores hold -inf on purpose, and the scores are checked before the softmax)."""
    if not x.check_finite:
        return tables
    if "output" in tables and not _finite(tables["output"]):
        _refuse("forward", "output", tables["output"], x.q.dtype, "rescale v")
    for name, _ in _BACKWARD:
        if name in tables and not _finite(tables[name]):
            _refuse("backward", name, tables[name], x.q.dtype, "rescale grad_output, v, q or k")
    return tables
