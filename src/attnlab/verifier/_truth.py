"""The exact answer: the case recomputed in float64 by attnlab's own attention and gradients.

Shape legend: as ``_case.py`` (h, h_kv, g = h / h_kv, N, M, d_k, d_v, T_q, T_k).

Each sequence is one call of ``attnlab.attention`` (and ``attnlab.attention_backward`` for a
case with ``do``), with the case's options as attnlab masks and arguments (``_options.py``).
q is viewed as (h_kv, g, N, d_k) and k, v as (h_kv, 1, M, d): the group axis broadcasts, so
GQA needs no copy of k and v, and ``attention_backward`` sums each key/value head's gradient
over its group, as the kernel must. ``memory_budget`` is what ``method="auto"`` allows a
dense score table; past it the blockwise path runs, so a sequence of 65,536 rows is computed
without its N x M table.
"""

from __future__ import annotations

import numpy as np

from attnlab.api.attention import attention
from attnlab.api.backward import attention_backward
from attnlab.verifier._case import Case

__all__ = ["truth"]


def truth(case: Case, memory_budget: float, forward_only=False) -> dict[str, np.ndarray]:
    """float64 arrays, packed as the case's, for each of out, lse, dq, dk, dv the case holds
    (only out and lse with ``forward_only``: the same numbers, the backward left out)."""
    a, opt = case.arrays, case.options
    h_kv, g = case.group
    kwargs = opt.kernel_kwargs((h_kv, g))
    names = ("out", "lse") if forward_only else ("out", "lse", "dq", "dk", "dv")
    want = [name for name in names if name in a]
    exact = {}  # name -> float64 (packed), filled sequence by sequence (_put)
    for b, (q0, q1), (k0, k1) in case.sequences():
        n = q1 - q0
        q = _f64(a["q"][:, q0:q1]).reshape(h_kv, g, n, -1)  # (h_kv, g, N, d_k)
        k = _f64(a["k"][:, k0:k1])[:, None]  # (h_kv, 1, M, d_k)
        v = _f64(a["v"][:, k0:k1])[:, None]  # (h_kv, 1, M, d_v)
        mask = opt.mask(b, (h_kv, g))
        kept = None
        if "lse" in a or case.backward:
            out, lse = attention(
                q, k, v, mask, return_lse=True, memory_budget=memory_budget, **kwargs
            )
            kept = lse  # the backward takes its weights from it, with no second forward
        if "lse" in a:
            if opt.sinks is not None:
                # A row with no key still has its sink: log(exp(sink)) = sink, where attnlab's
                # fully_masked="zero" reports -inf (its output, 0, is the same either way).
                lse = np.where(np.isneginf(lse), opt.sinks.reshape(h_kv, g, 1), lse)
            _put(exact, a["lse"].shape, "lse", lse, q0, q1)
        elif kept is None:
            out = attention(q, k, v, mask, memory_budget=memory_budget, **kwargs)
        _put(exact, a["out"].shape, "out", out, q0, q1)
        if case.backward and not forward_only:
            do = _f64(a["do"][:, q0:q1]).reshape(h_kv, g, n, -1)  # (h_kv, g, N, d_v)
            dq, dk, dv = attention_backward(
                q, k, v, do, mask, memory_budget=memory_budget, lse=kept, **kwargs
            )
            spans = {"dq": (dq, q0, q1), "dk": (dk, k0, k1), "dv": (dv, k0, k1)}
            for name, (grad, r0, r1) in spans.items():
                if name in want:  # (h or h_kv, rows, d): dk, dv were summed over each group
                    _put(exact, a[name].shape, name, grad, r0, r1)
    return {name: exact[name] if name in exact else np.zeros(a[name].shape) for name in want}


def _put(exact: dict, shape: tuple, name: str, x: np.ndarray, r0: int, r1: int) -> None:
    """Rows r0:r1 of tensor ``name`` (packed ``shape``) from ``x`` (its heads and rows, any
    leading split): the array itself where it spans every row (one sequence: no zeroed table
    and no copy, 0.3 s on one core at N = 4096, h = 8), else copied into those rows."""
    x = x.reshape(shape[0], r1 - r0, *shape[2:])  # (h or h_kv, rows[, d])
    if name not in exact and (r0, r1) == (0, shape[1]):
        exact[name] = np.asarray(x, dtype=np.float64)
        return
    if name not in exact:
        exact[name] = np.zeros(shape)
    exact[name][:, r0:r1] = x


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)
