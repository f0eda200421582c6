"""The dense backward pass: gradients of softmax(q kᵀ · scale + mask) v with the whole table.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width
    P    the weights (..., N, M);  O the output (..., N, d_v);  dO the upstream gradient

The chain rule, step by step from the output back to the inputs (S the masked, scaled scores,
P = softmax(S) row by row, O = P V):

    1. dV = Pᵀ dO                        (..., M, d_v)
    2. dP = dO Vᵀ                        (..., N, M)
    3. D  = rowsum(dP ∘ P) = rowsum(dO ∘ O)   (..., N, 1): softmax's Jacobian, one row at a time
    4. dS = P ∘ (dP − D)                 (..., N, M): zero wherever the mask blocked a pair (P = 0)
    5. dQ = dS K · scale                 (..., N, d_k)
    6. dK = dSᵀ Q · scale                (..., M, d_k)

Step 3 uses rowsum(dO ∘ O), N·d_v products instead of N·M: the two are equal because
rowsum(dP ∘ P) = Σ_j P_ij (dO_i · v_j) = dO_i · O_i. The entry points take ``Inputs`` already
validated (``core/_validate.py``) and a checked ``grad_output`` (``core/_grad.py``), and return
gradients of the inputs' own shapes. ``core/blockwise_backward.py`` is the only other
implementation, tested equal to this one.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.core._validate import Inputs
from attnlab.core.dense import dense_weights

__all__ = ["dense_grad_tables", "dense_gradients"]


def dense_gradients(
    x: Inputs, grad_output: np.ndarray, *, threads: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv), each of its input's shape: two N x M tables live at once (P and dP -> dS).

    >>> from attnlab.core._validate import validate
    >>> x = validate([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]])
    >>> dq, dk, dv = dense_gradients(x, np.ones((2, 2)))
    >>> dv.round(3)   # column sums of the weights: how much each value reached the output
    array([[0.196, 0.196],
           [1.804, 1.804]])
    """
    output, weights = dense_weights(x, threads=threads)  # (..., N, d_v), (..., N, M)
    return _chain(x, weights, output, grad_output, None)


def dense_grad_tables(x: Inputs, tables: dict, grad_output: np.ndarray) -> dict[str, np.ndarray]:
    """Every backward table of the chain rule, for ``trace_attention(grad_output=...)``:
    grad_output, grad_v, grad_weights (dP), grad_scores (dS), grad_q and grad_k.

    ``tables`` are the forward tables of ``dense.dense_tables`` (their weights and output).
    """
    keep: dict[str, np.ndarray] = {"grad_output": grad_output}
    dq, dk, dv = _chain(x, tables["weights"], tables["output"], grad_output, keep)
    keep.update(grad_q=dq, grad_k=dk, grad_v=dv)
    return keep


def _chain(x: Inputs, p, o, g, keep: dict | None):
    """Steps 1-6 of the module docstring; ``keep`` receives copies of dP and dS for a trace."""
    # 1) dV = Pᵀ dO
    dv = np.swapaxes(p, -1, -2) @ g  # (..., M, d_v)
    # 2) dP = dO Vᵀ
    ds = g @ np.swapaxes(x.v, -1, -2)  # (..., N, M): dP, made dS in place below
    if keep is not None:
        keep["grad_weights"] = ds.copy()
    # 3) D = rowsum(dP ∘ P), computed as rowsum(dO ∘ O)
    d = np.sum(g * o, axis=-1, keepdims=True)  # (..., N, 1)
    # 4) dS = P ∘ (dP − D): blocked pairs have P = 0, so their gradient is exactly 0
    ds -= d
    ds *= p
    if keep is not None:
        keep["grad_scores"] = ds.copy()
    scale = x.q.dtype.type(x.scale)
    # 5) dQ = dS K · scale (the scale on the small result, not on the N x M table)
    dq = ds @ x.k  # (..., N, d_k)
    dq *= scale
    # 6) dK = dSᵀ Q · scale
    dk = np.swapaxes(ds, -1, -2) @ x.q  # (..., M, d_k)
    dk *= scale
    return sum_to(dq, x.q.shape), sum_to(dk, x.k.shape), sum_to(dv, x.v.shape)
