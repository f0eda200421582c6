"""Gradients of attention: ``attention_backward``, the public dispatcher of the backward pass.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

It validates once (``core/_validate.py``, ``core/_grad.py``) and hands the inputs to a kernel,
the dense one (``kernels/dense_backward.py``) or the blockwise one (``kernels/blockwise_backward.py``),
choosing between them exactly as ``attention`` does (``attention.choose_method``). The
chain-rule steps are numbered in the kernels' docstrings. Kernels never import this module.
"""

from __future__ import annotations

import numpy as np

from attnlab.api._overflow import (
    checked_backward,
    checked_forward,
    fold_tiny_scale,
    quiet,
    refuse_impossible_table,
)
from attnlab.api.attention import check_options, choose_method, plain_call
from attnlab.core._grad import check_grad_output
from attnlab.core._validate import (
    validate,
)
from attnlab.core._variants import check_fully_masked, check_lse, check_wrt, with_variants
from attnlab.kernels import _small, blockwise, blockwise_backward
from attnlab.kernels._precision import narrow, widen
from attnlab.kernels.dense import dense_tables
from attnlab.kernels.dense_backward import dense_grad_tables, dense_gradients

__all__ = ["attention_backward"]


def attention_backward(
    q,
    k,
    v,
    grad_output,
    mask=None,
    *,
    scale=None,
    method="auto",
    block_size=None,
    threads=None,
    memory_budget=None,
    check_finite=True,
    softcap=None,
    sinks=None,
    lse=None,
    fully_masked="raise",
    wrt=("q", "k", "v"),
) -> tuple[np.ndarray, ...]:
    """Exact gradients of ``attention(q, k, v, mask, scale=scale)`` for an upstream gradient.

    With L any scalar loss and ``grad_output`` = ∂L/∂output, returns (∂L/∂q, ∂L/∂k, ∂L/∂v):
    what ``torch.autograd`` gives for the same call.

    Args:
        q, k, v, mask, scale: as for ``attnlab.attention``: q (..., N, d_k), k (..., M, d_k),
            v (..., M, d_v), leading axes broadcast, every mask kind and their sums.
        grad_output: ∂L/∂output, of the output's shape (..., N, d_v) (the broadcast leading
            axes of q, k and v).
        method: "dense" (the whole (..., N, M) table), "blockwise" (tile by tile, memory
            that grows with N; see ``kernels/blockwise_backward.py``) or "auto" (default), as
            for ``attnlab.attention``; so are block_size, threads and memory_budget.
        check_finite: refuse NaN/inf in q, k, v and grad_output.
        softcap, sinks, fully_masked: as for ``attnlab.attention``; "zero" gives a row that
            allows no key gradient 0. The gradient flows through the cap by 1 − tanh².
        lse: the log-sum-exp that ``attention(..., return_lse=True)`` returned for the same
            call, (..., N): the weights come from it, exp(score − lse), with no row max or
            row sum computed again (the dense kernel of a large call recomputes them).
        wrt: which gradients to return, in this order: any of "q", "k", "v", "bias" (the
            gradient of the float mask, the one additive table among the mask's parts,
            summed back to its shape) and "sinks" (of the sinks' shape).

    Returns:
        The gradients named by ``wrt``, by default (dq, dk, dv), each of its input's shape
        and of the compute dtype (float32 stays float32; integers compute in float64). An
        input broadcast along an axis gets the sum of its gradients there. A pair the mask
        blocks contributes exactly 0.

    Raises:
        ShapeError (naming grad_output when its shape is not the output's),
        NonFiniteInputError, FullyMaskedRowError (a row that allows no key), as ``attention``;
        NonFiniteResultError when finite inputs give a gradient past the dtype's range (it
        names the table of the chain rule that overflowed first).

    The chapter's two tokens with the causal mask, and a loss that sums the output:

    >>> from attnlab.core.masks import Causal
    >>> q = [[3, -3], [1, 1]]; k = [[-3, 3], [1, 1]]; v = [[0, -1], [1, 2]]
    >>> dq, dk, dv = attention_backward(q, k, v, np.ones((2, 2)), Causal())
    >>> dv.round(3)     # dV = Aᵀ dO: how much of each value row reached the output
    array([[1.196, 1.196],
           [0.804, 0.804]])
    >>> dq.round(3)     # row 1 sees one key: moving q1 changes nothing
    array([[ 0.  ,  0.  ],
           [ 1.78, -0.89]])
    """
    options = (block_size, threads, memory_budget, check_finite, softcap, sinks, fully_masked)
    plain = plain_call(*options, wrt=wrt)  # a saved lse is the fast path's too
    fast = _small.small_backward(q, k, v, grad_output, mask, scale, method, lse) if plain else None
    if fast is not None:  # a small problem with every check passed (see kernels/_small.py)
        return fast
    method, block, n_threads, budget = check_options(method, block_size, threads, memory_budget)
    empty = check_fully_masked(fully_masked)
    x = validate(q, k, v, mask, scale=scale, check_finite=check_finite)
    x = with_variants(x, softcap, sinks)
    names = check_wrt(wrt, x)
    saved = check_lse(lse, x)  # (..., N) or None
    g = check_grad_output(x, grad_output)  # (..., N, d_v)
    method = choose_method(method, x.lead, x.n, x.m, x.q.dtype, budget, False, x.mask, True)
    if method == "blockwise":  # folds the scale into q itself
        return _gradients(x, g, method, (block, n_threads, saved, empty, names))
    refuse_impossible_table(x)
    x, factor = fold_tiny_scale(x)
    grads = _gradients(x, g, method, (block, n_threads, saved, empty, names))
    if factor == 1.0:
        return grads
    # dQ of the folded q' = q · scale is dQ / scale: multiply back (dK, dV and the rest match)
    return tuple(
        a * a.dtype.type(factor) if n == "q" else a for n, a in zip(names, grads, strict=True)
    )


def _gradients(x, g, method: str, options):
    """The chosen kernel's gradients on validated inputs, each checked finite by name."""
    block, n_threads, saved, empty, names = options

    def kernel(dy, anchored=False, d_from_output=False, y=x, lse=saved):
        with quiet():  # a gradient that overflowed is refused, by name, in checked_backward
            if method == "blockwise":
                return blockwise_backward.run(
                    y, dy, *block, n_threads, lse=lse, empty_rows=empty, wrt=names,
                    anchored=anchored,
                )  # fmt: skip
            return dense_gradients(
                y, dy, threads=n_threads, empty_rows=empty, wrt=names, d_from_output=d_from_output
            )

    def wide(second):  # float64 gradients of a float32 call: only when they overflowed
        y, dy = widen(x), g.astype(np.float64)
        if not second:
            return kernel(dy, y=y, lse=None)
        with quiet():  # the dense kernel, with the form of D the first try did not take
            return dense_gradients(
                y, dy, threads=n_threads, empty_rows=empty, wrt=names,
                d_from_output=method == "dense",
            )  # fmt: skip

    def output():  # the forward output, for D = rowsum(dO ∘ O): only when a gradient overflowed
        def forward(y):
            with quiet():
                return blockwise.run(y, *block, n_threads, empty_rows=empty)

        return checked_forward(x, forward(x), forward)

    return checked_backward(
        x, g, kernel(g), names, lambda y, dy: dense_grad_tables(y, dense_tables(y), dy),
        rerun=lambda dy, variant: kernel(dy, anchored=True, d_from_output=variant),
        output=output, rerun_variants=(True, False) if method == "dense" else (False,),
        wide=lambda second: narrow(wide(second)),
    )  # fmt: skip
