"""The pieces every family shares: norms, activations, linear layers and the MLPs.

Shape legend: ... leading axes (B, N), d_model hidden width, d_ff MLP width.

Weights are numpy arrays in the compute dtype. A Hugging Face ``Linear`` stores its weight
as (out, in), so ``linear`` multiplies by its transpose (a view, not a copy).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "ACTIVATIONS",
    "activation",
    "gated_mlp",
    "layer_norm",
    "linear",
    "rms_norm",
    "softcap",
]


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """x Wᵀ + b for a (out, in) weight: (..., in) -> (..., out)."""
    y = x @ weight.T  # (..., out)
    if bias is not None:
        y += bias
    return y


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) · w + b over the last axis (GPT-2)."""
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, -1, keepdims=True)
    return centred / np.sqrt(var + eps) * weight + bias


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float, offset: float = 0.0) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) · (offset + w) over the last axis. Llama's norm has offset 0;
    Gemma's stores w around 0 and multiplies by (1 + w)."""
    ms = np.mean(x * x, -1, keepdims=True)
    return x / np.sqrt(ms + eps) * (weight + offset if offset else weight)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    # GPT-2's gelu ("gelu_new", "gelu_pytorch_tanh"): the tanh approximation of x·Φ(x).
    c = x.dtype.type(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * (x * x * x))))


#: math.erf on each element: numpy has no erf, and BERT's exact gelu needs it correctly
#: rounded in float64 (a polynomial fit would miss the 1e-9 match to transformers).
_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    # BERT's gelu ("gelu"): x·Φ(x) exactly, Φ(x) = (1 + erf(x / √2)) / 2.
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(x.dtype))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


#: config.json activation names attnlab computes.
ACTIVATIONS = {
    "gelu": _gelu_erf,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "silu": _silu,
    "swish": _silu,
}


def activation(cfg, key: str, default: str):
    """The activation config.json names under ``key``, or an AttnlabError naming it."""
    name = cfg.get(key, default)
    if not isinstance(name, str) or name not in ACTIVATIONS:  # a list cannot be looked up
        raise cfg._bad(key, f"one of {sorted(ACTIVATIONS)}", name)
    return ACTIVATIONS[name]


def gated_mlp(x: np.ndarray, w: dict, act) -> np.ndarray:
    """down(act(gate(x)) · up(x)): Llama's MLP, (..., d_model) -> (..., d_model)."""
    gate = linear(x, w["gate_proj"], w.get("gate_bias"))  # (..., d_ff)
    up = linear(x, w["up_proj"], w.get("up_bias"))
    return linear(act(gate) * up, w["down_proj"], w.get("down_bias"))


def softcap(x: np.ndarray, cap: float | None) -> np.ndarray:
    """cap · tanh(x / cap) (Gemma 2's final logits), or x when cap is None."""
    return x if cap is None else cap * np.tanh(x / cap)
