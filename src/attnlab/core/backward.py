"""Gradients of attention: ``attention_backward``, the public dispatcher of the backward pass.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

It validates once (``core/_validate.py``, ``core/_grad.py``) and hands the inputs to a kernel,
the dense one (``core/dense_backward.py``) or the blockwise one (``core/blockwise_backward.py``),
choosing between them exactly as ``attention`` does (``attention.choose_method``). The
chain-rule steps are numbered in the kernels' docstrings. Kernels never import this module.
"""

from __future__ import annotations

import numpy as np

from attnlab.core import blockwise, blockwise_backward
from attnlab.core._grad import check_grad_output
from attnlab.core._overflow import checked_backward, quiet
from attnlab.core._validate import (
    check_block_size,
    check_budget,
    check_method,
    check_threads,
    validate,
)
from attnlab.core.attention import choose_method
from attnlab.core.dense import dense_tables
from attnlab.core.dense_backward import dense_grad_tables, dense_gradients

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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact gradients of ``attention(q, k, v, mask, scale=scale)`` for an upstream gradient.

    With L any scalar loss and ``grad_output`` = ∂L/∂output, returns (∂L/∂q, ∂L/∂k, ∂L/∂v):
    what ``torch.autograd`` gives for the same call.

    Args:
        q, k, v, mask, scale: as for ``attnlab.attention``: q (..., N, d_k), k (..., M, d_k),
            v (..., M, d_v), leading axes broadcast, every mask kind and their sums.
        grad_output: ∂L/∂output, of the output's shape (..., N, d_v) (the broadcast leading
            axes of q, k and v).
        method: "dense" (the whole (..., N, M) table, as §6.2 draws it), "blockwise"
            (tile by tile, memory that grows with N: each query block's softmax divisors,
            its logsumexp, are summed again from its tiles, and each tile's weights are
            kept from that sweep while they fit the cache or recomputed), or "auto"
            (default): dense unless the score table would pass ``memory_budget``.
        block_size, threads, memory_budget: as for ``attnlab.attention``.
        check_finite: refuse NaN/inf in q, k, v and grad_output.

    Returns:
        (dq, dk, dv), each of its input's shape and of the compute dtype (float32 stays
        float32; integers compute in float64). An input broadcast along an axis gets the sum
        of its gradients there. A pair the mask blocks contributes exactly 0.

    Raises:
        ShapeError (naming grad_output when its shape is not the output's),
        NonFiniteInputError, FullyMaskedRowError (a row that allows no key), as ``attention``;
        NonFiniteResultError when finite inputs give a gradient past the dtype's range (it
        names the table of the chain rule that overflowed first).

    The chapter's two tokens with the causal mask, and a loss that sums the output:

    >>> from attnlab.core.masks import Causal
    >>> q = [[3, -3], [1, 1]]; k = [[-3, 3], [1, 1]]; v = [[0, -1], [1, 2]]
    >>> dq, dk, dv = attention_backward(q, k, v, np.ones((2, 2)), Causal())
    >>> dv.round(3)     # dV = Pᵀ dO: how much of each value row reached the output
    array([[1.196, 1.196],
           [0.804, 0.804]])
    >>> dq.round(3)     # row 1 sees one key: moving q1 changes nothing
    array([[ 0.  ,  0.  ],
           [ 1.78, -0.89]])
    """
    method = check_method(method)
    block = check_block_size(block_size, (blockwise.DEFAULT_BLOCK_Q, blockwise.DEFAULT_BLOCK_K))
    n_threads = check_threads(threads)
    budget = (
        blockwise.DEFAULT_MEMORY_BUDGET if memory_budget is None else check_budget(memory_budget)
    )
    x = validate(q, k, v, mask, scale=scale, check_finite=check_finite)
    g = check_grad_output(x, grad_output)  # (..., N, d_v)
    with quiet():  # a gradient that overflowed is refused, by name, in checked_backward
        if choose_method(method, x.lead, x.n, x.m, x.q.dtype, budget, False) == "blockwise":
            grads = blockwise_backward.run(x, g, *block, n_threads)
        else:
            grads = dense_gradients(x, g, threads=n_threads)
    return checked_backward(x, g, grads, lambda y, dy: dense_grad_tables(y, dense_tables(y), dy))
