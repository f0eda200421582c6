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
    3. D  = rowsum(dP ∘ P)               (..., N, 1): softmax's Jacobian, one row at a time
    4. dS = P ∘ (dP − D)                 (..., N, M): zero wherever the mask blocked a pair (P = 0)
    5. dQ = dS K · scale                 (..., N, d_k)
    6. dK = dSᵀ Q · scale                (..., M, d_k)

The variants add to the chain: with a softcap c (capped = c · tanh(scaled / c)), step 4's dS is
the gradient of the capped scores, and the scaled ones get dS ∘ (1 − tanh²) before steps 5-6;
a float mask's gradient (wrt "bias") is dS itself, summed back to the mask's shape; a sink σ,
whose weight in row i is P_iσ = exp(σ − lse_i), gets dσ = −Σ_i P_iσ D_i.

Step 3 could use rowsum(dO ∘ O), N·d_v products instead of N·M (the two are equal in exact
arithmetic: Σ_j P_ij (dO_i · v_j) = dO_i · O_i), but in floating point O and dO · O are rounded
apart from the dP they must cancel: a row whose weight is all on one key (P = 1 exactly) then
gets dS = P (dP − D) of an ulp of dP instead of exactly 0, and a row with a few keys loses
digits to the cancellation. rowsum(dP ∘ P) subtracts what it sums, as torch's autograd of the
softmax does: measured on FlashAttention's grid (float32, 799 x 3 keys), dq and dk erred 2-8
times torch's float32 error with rowsum(dO ∘ O), and a single key's dq, exactly 0 in exact
arithmetic, came out ~1e-6. The extra pass over the table is one more of the five elementwise
passes the step takes. The entry points take ``Inputs`` already
validated (``core/_validate.py``) and a checked ``grad_output`` (``core/_grad.py``), and return
gradients of the inputs' own shapes. It is one of the backward's fast paths in ``kernels/``
(with the small-problem path and ``kernels/blockwise_backward.py``), each held to
``core/reference.py`` by the property suite; the blockwise backward is also tested equal to
this one.
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.core._grad import sum_to
from attnlab.core._validate import Inputs
from attnlab.core._variants import float_bias
from attnlab.kernels._precision import matmul, narrow, too_wide, widen
from attnlab.kernels.dense import dense_weights

__all__ = ["dense_grad_tables", "dense_gradients"]

_BAND_BYTES = 2**22  # the products of D, a band of rows at a time: 4 MiB at most


def dense_gradients(
    x: Inputs,
    grad_output: np.ndarray,
    *,
    threads: int = 1,
    empty_rows: str = "raise",
    wrt: tuple[str, ...] = ("q", "k", "v"),
    d_from_output: bool = False,
) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv), each of its input's shape: two N x M tables live at once (P and dP -> dS).
    ``wrt`` picks and orders the gradients (also "bias" and "sinks", see the module docstring);
    ``empty_rows="zero"``: a row that allows no key gets gradient 0 instead of an error;
    ``d_from_output``: step 3 as rowsum(dO ∘ O), a try of the rerun after an overflow (``_chain``).

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
            widen(x), g, threads=threads, empty_rows=empty_rows, wrt=wrt,
            d_from_output=d_from_output,
        )  # fmt: skip
        return narrow(wide)
    capped = _capped(x) if x.softcap is not None else None
    o = output if d_from_output else None
    grads = _chain(x, weights, grad_output, None, capped, lse, wrt, o)
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
        x, tables["weights"], grad_output, keep, tables.get("capped"), tables["lse"], wrt
    )
    keep.update(grad_q=grads["q"], grad_k=grads["k"], grad_v=grads["v"])
    keep["grad_sinks"] = grads.get("sinks")
    return keep


def _chain(x: Inputs, p, g, keep: dict | None, capped, lse, wrt, o=None) -> dict[str, np.ndarray]:
    """Steps 1-6 of the module docstring; ``keep`` receives copies of dP and dS for a trace.
    capped: the capped scores with a softcap, else None; lse (..., N): for a sink's weight.
    o: the output (..., N, d_v), to take D as rowsum(dO ∘ O) instead: the rerun after an
    overflow tries that first. There a key whose weight is exactly 0 meets a huge dP, and the
    other keys' equal weights are fl(1/3), not 1/3: rowsum(dP ∘ P) leaves an ulp of the huge
    dP in dP − D, which a huge k carries into dQ, where rowsum(dO ∘ O) cancelled exactly in
    the case measured (``tests/kernels/test_overflow_results.py``)."""
    # 1) dV = Pᵀ dO
    dv = matmul(np.swapaxes(p, -1, -2), g)  # (..., M, d_v)
    # 2) dP = dO Vᵀ
    ds = matmul(g, np.swapaxes(x.v, -1, -2))  # (..., N, M): dP, made dS in place below
    if keep is not None:
        keep["grad_weights"] = ds.copy()
    # 3) D = rowsum(dP ∘ P), from dP itself: dP − D cancels where dO ∘ O would not
    d = _row_term(ds, p) if o is None else np.sum(g * o, axis=-1, keepdims=True)  # (..., N, 1)
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


def _row_term(dp: np.ndarray, p: np.ndarray) -> np.ndarray:
    """rowsum(dP ∘ P) (..., N, 1) of dP and P (..., N, M), numpy's pairwise row sums (the small
    path's bits), a band of rows at a time: the products never take a whole table."""
    p = np.broadcast_to(p, dp.shape)
    d = np.empty(dp.shape[:-1] + (1,), dp.dtype)  # (..., N, 1)
    rows = max(1, _BAND_BYTES // (dp.itemsize * dp.shape[-1] * max(1, math.prod(dp.shape[:-2]))))
    for r0 in range(0, dp.shape[-2], rows):
        band = (..., slice(r0, r0 + rows), slice(None))
        np.add.reduce(dp[band] * p[band], axis=-1, keepdims=True, out=d[band])
    return d
