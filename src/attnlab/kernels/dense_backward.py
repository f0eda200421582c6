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

The variants add to the chain: with a softcap c (capped = c · tanh(scaled / c)), step 4's dS is
the gradient of the capped scores, and the scaled ones get dS ∘ (1 − tanh²) before steps 5-6;
a float mask's gradient (wrt "bias") is dS itself, summed back to the mask's shape; a sink σ,
whose weight in row i is P_iσ = exp(σ − lse_i), gets dσ = −Σ_i P_iσ D_i.

Step 3 uses rowsum(dO ∘ O), N·d_v products instead of N·M: the two are equal because
rowsum(dP ∘ P) = Σ_j P_ij (dO_i · v_j) = dO_i · O_i. The entry points take ``Inputs`` already
validated (``core/_validate.py``) and a checked ``grad_output`` (``core/_grad.py``), and return
gradients of the inputs' own shapes. It is one of the backward's fast paths in ``kernels/``
(with the small-problem path and ``kernels/blockwise_backward.py``), each held to
``core/reference.py`` by the property suite; the blockwise backward is also tested equal to
this one.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.core._validate import Inputs
from attnlab.core._variants import float_bias
from attnlab.kernels._precision import matmul, narrow, too_wide, widen
from attnlab.kernels.dense import dense_weights

__all__ = ["dense_grad_tables", "dense_gradients"]


def dense_gradients(
    x: Inputs,
    grad_output: np.ndarray,
    *,
    threads: int = 1,
    empty_rows: str = "raise",
    wrt: tuple[str, ...] = ("q", "k", "v"),
    d_from_dp: bool = False,
) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv), each of its input's shape: two N x M tables live at once (P and dP -> dS).
    ``wrt`` picks and orders the gradients (also "bias" and "sinks", see the module docstring);
    ``empty_rows="zero"``: a row that allows no key gets gradient 0 instead of an error;
    ``d_from_dp``: step 3 as rowsum(dP ∘ P), the rerun after an overflow (see ``_chain``).

    >>> from attnlab.core._validate import validate
    >>> x = validate([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]])
    >>> dq, dk, dv = dense_gradients(x, np.ones((2, 2)))
    >>> dv.round(3)   # column sums of the weights: how much each value reached the output
    array([[0.196, 0.196],
           [1.804, 1.804]])
    """
    # (..., N, d_v), (..., N, M), (..., N)
    output, weights, lse = dense_weights(x, threads=threads, empty_rows=empty_rows, lse=True)
    if too_wide(x, lse):  # float32 scores far from 0: see kernels/_precision.py
        g = grad_output.astype(np.float64)
        wide = dense_gradients(
            widen(x), g, threads=threads, empty_rows=empty_rows, wrt=wrt, d_from_dp=d_from_dp
        )
        return narrow(wide)
    capped = _capped(x) if x.softcap is not None else None
    grads = _chain(x, weights, output, grad_output, None, capped, lse, wrt, d_from_dp)
    return tuple(grads[w] for w in wrt)


def _capped(x: Inputs) -> np.ndarray:
    """The capped scores c · tanh(q kᵀ · scale / c), (..., N, M), again (for tanh')."""
    s = matmul(x.q, np.swapaxes(x.k, -1, -2))  # (..., N, M)
    s *= s.dtype.type(x.scale / x.softcap)
    np.tanh(s, out=s)
    s *= s.dtype.type(x.softcap)
    return s


def dense_grad_tables(x: Inputs, tables: dict, grad_output: np.ndarray) -> dict[str, np.ndarray]:
    """Every backward table of the chain rule, for ``trace_attention(grad_output=...)``:
    grad_output, grad_v, grad_weights (dP), grad_scores (dS), grad_q and grad_k.

    ``tables`` are the forward tables of ``dense.dense_tables`` (their weights and output).
    """
    keep: dict[str, np.ndarray] = {"grad_output": grad_output}
    wrt = ("q", "k", "v") + (("sinks",) if x.sinks is not None else ())
    grads = _chain(
        x, tables["weights"], tables["output"], grad_output, keep, tables.get("capped"),
        tables["lse"], wrt,
    )  # fmt: skip
    keep.update(grad_q=grads["q"], grad_k=grads["k"], grad_v=grads["v"])
    keep["grad_sinks"] = grads.get("sinks")
    return keep


def _chain(
    x: Inputs, p, o, g, keep: dict | None, capped, lse, wrt, d_from_dp=False
) -> dict[str, np.ndarray]:
    """Steps 1-6 of the module docstring; ``keep`` receives copies of dP and dS for a trace.
    capped: the capped scores with a softcap, else None; lse (..., N): for a sink's weight.
    d_from_dp: D from dP itself (N·M products), so that dP − D cancels to exactly 0 where a
    row's weight is all on one key; the rerun after an overflow asks for it, since there
    rowsum(dO ∘ O) and dO Vᵀ round apart by an ulp of a huge dP, which a huge k then carries
    into dQ."""
    # 1) dV = Pᵀ dO
    dv = matmul(np.swapaxes(p, -1, -2), g)  # (..., M, d_v)
    # 2) dP = dO Vᵀ
    ds = matmul(g, np.swapaxes(x.v, -1, -2))  # (..., N, M): dP, made dS in place below
    if keep is not None:
        keep["grad_weights"] = ds.copy()
    # 3) D = rowsum(dP ∘ P), computed as rowsum(dO ∘ O) unless d_from_dp
    d = np.sum(ds * p if d_from_dp else g * o, axis=-1, keepdims=True)  # (..., N, 1)
    # 4) dS = P ∘ (dP − D): blocked pairs have P = 0, so their gradient is exactly 0
    ds -= d
    ds *= p
    if keep is not None:
        keep["grad_scores"] = ds.copy()
    grads = {}
    if "bias" in wrt:  # the masked scores are capped + bias: dS is the bias's gradient
        bias = sum_to(ds, float_bias(x))
        # a bias of the table's own shape is dS itself, which the cap's factor scales below
        grads["bias"] = bias.copy() if bias is ds and capped is not None else bias
    if "sinks" in wrt:  # dσ = −Σ_i P_iσ D_i; a row with no key (lse -inf) has D = 0
        with np.errstate(over="ignore"):
            share = np.exp(x.sinks[..., None] - lse)  # (..., N): each row's sink weight
        share[np.isneginf(lse)] = 0.0
        grads["sinks"] = sum_to(-(share * d[..., 0]).sum(axis=-1), x.sinks.shape)
    if capped is not None:  # through the cap: d(c · tanh(s / c))/ds = 1 − tanh²
        t = capped / capped.dtype.type(x.softcap)  # (..., N, M)
        ds *= 1.0 - t * t
    scale = x.q.dtype.type(x.scale)
    # 5) dQ = dS K · scale (the scale on the small result, not on the N x M table)
    dq = matmul(ds, x.k)  # (..., N, d_k)
    dq *= scale
    # 6) dK = dSᵀ Q · scale
    dk = matmul(np.swapaxes(ds, -1, -2), x.q)  # (..., M, d_k)
    dk *= scale
    grads.update(q=sum_to(dq, x.q.shape), k=sum_to(dk, x.k.shape), v=sum_to(dv, x.v.shape))
    return grads
