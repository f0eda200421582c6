"""What the backward pass adds to validation: the upstream gradient, and sums over broadcasting.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

``attention_backward`` (``api/backward.py``) and ``trace_attention(grad_output=...)``
(``api/attention.py``) both check ``grad_output`` here, once, after ``_validate.validate``;
the backward kernels (``kernels/dense_backward.py``, ``kernels/blockwise_backward.py``) hand their
gradients back through ``sum_to``, so a broadcast input gets a gradient of its own shape.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._validate import Inputs, as_real, refuse_non_finite
from attnlab.errors import ShapeError

__all__ = ["check_grad_output", "sum_to"]


def check_grad_output(x: Inputs, grad_output) -> np.ndarray:
    """``grad_output`` as an array of the output's shape (..., N, d_v) in the compute dtype.

    >>> from attnlab.core._validate import validate
    >>> x = validate([[1.0, 0.0]], [[1.0, 0.0]], [[2.0, 3.0, 4.0]])
    >>> check_grad_output(x, [[1, 1]])
    Traceback (most recent call last):
    ...
    attnlab.errors.ShapeError: expected grad_output to have the output's shape (..., N, d_v) = (1, 3), but got grad_output.shape=(1, 2) instead
    """
    g = as_real("grad_output", grad_output)
    want = x.lead + (x.n, x.v.shape[-1])
    if g.shape != want:
        raise ShapeError(
            f"expected grad_output to have the output's shape (..., N, d_v) = {want}, "
            f"but got grad_output.shape={g.shape} instead"
        )
    g = g.astype(x.q.dtype, copy=False)
    if x.check_finite:  # the one non-finite reporter, as for q, k and v
        refuse_non_finite("grad_output", g, hint=False)
    return g


def sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added to an input of ``shape``.

    An input broadcast along an axis is used once per position there, so its gradient is the
    sum over them (the chain rule, once per use).

    >>> sum_to(np.ones((2, 3, 4)), (1, 3, 4))[0, 0, 0]
    np.float64(2.0)
    >>> sum_to(np.ones((2, 3, 4)), (3, 4)).shape
    (3, 4)
    """
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad  # (*shape's axes)
    ones = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    return grad.sum(axis=ones, keepdims=True) if ones else grad  # shape
