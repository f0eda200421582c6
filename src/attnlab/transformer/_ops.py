"""The pieces of the tiny transformer around attention, each with its exact backward.

Attention itself is not here: the model calls ``attnlab.attention`` and
``attnlab.attention_backward`` (see ``_blocks``). What is here is the rest of the chain rule:
layer norm, the GELU of the optional MLP, and softmax cross-entropy, whose softmax is attnlab's
own (``attnlab.softmax``, ``attnlab.logsumexp``), never a second one.

Shape legend: B sequences in a batch, N positions, D = d_model, F the MLP's hidden width,
V the vocabulary, R = B·N rows when a batch is flattened.
"""

from __future__ import annotations

import numpy as np

from attnlab import logsumexp, softmax

__all__ = ["cross_entropy", "gelu", "gelu_backward", "layer_norm", "layer_norm_backward"]

NORM_EPS = 1e-5  # as torch.nn.LayerNorm's default, so the oracle test needs no option
_GELU_C = np.sqrt(2.0 / np.pi)  # the tanh form of GELU (GPT-2's): smooth, so finite
_GELU_A = 0.044715  # differences need no care at a kink, as they would with ReLU


def layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray):
    """Normalise each row of x (..., D) to mean 0 and variance 1, then gain and bias (D,).

    Returns (y, cache) with y of x's shape; the cache holds what the backward reuses.
    """
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centred = x - mean  # (..., D)
    rstd = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + NORM_EPS)  # (..., 1)
    xhat = centred * rstd  # (..., D)
    return xhat * gain + bias, (xhat, rstd, gain)


def layer_norm_backward(dy: np.ndarray, cache) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dgain, dbias) for dy = ∂L/∂y of ``layer_norm``."""
    xhat, rstd, gain = cache
    lead = tuple(range(dy.ndim - 1))
    dgain = (dy * xhat).sum(axis=lead)  # (D,)
    dbias = dy.sum(axis=lead)  # (D,)
    dxhat = dy * gain  # (..., D)
    # The mean and the variance both depend on every entry of the row: two projections out.
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))  # fmt: skip
    return dx, dgain, dbias


def gelu(h: np.ndarray) -> np.ndarray:
    """GELU, tanh form: 0.5 h (1 + tanh(√(2/π)(h + 0.044715 h³)))."""
    return 0.5 * h * (1.0 + np.tanh(_GELU_C * (h + _GELU_A * h**3)))


def gelu_backward(dy: np.ndarray, h: np.ndarray) -> np.ndarray:
    """∂L/∂h for dy = ∂L/∂gelu(h)."""
    t = np.tanh(_GELU_C * (h + _GELU_A * h**3))
    slope = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * _GELU_C * (1.0 + 3 * _GELU_A * h * h)
    return dy * slope


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy of K rows and its gradient.

    logits (K, V), one row per counted position; targets (K,) token ids.
    Returns (loss, dlogits (K, V)).
    """
    k = np.arange(len(targets))
    nll = logsumexp(logits, axis=-1) - logits[k, targets]  # (K,): -log p(target)
    dlogits = softmax(logits, axis=-1)  # (K, V): p
    dlogits[k, targets] -= 1.0  # p - onehot
    dlogits /= len(targets)
    return float(nll.mean()), dlogits
