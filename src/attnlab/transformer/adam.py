"""Adam (Kingma and Ba, 2015), updating a model's own arrays in place.

    m ← β₁ m + (1 − β₁) g,   v ← β₂ v + (1 − β₂) g²,   p ← p − lr · m̂ / (√v̂ + ε)

with m̂ = m / (1 − β₁ᵗ) and v̂ = v / (1 − β₂ᵗ) the bias-corrected moments after t steps.
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["Adam"]

# A step moves each weight by about lr; past this a model of weights near 1 only diverges, and
# a huge lr (1e300) showed up steps later as non-finite queries rather than here.
MAX_LR = 10.0


def _real(value) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    ) and math.isfinite(value)  # fmt: skip


def _check_number(name: str, value, high: float) -> None:
    if not (_real(value) and 0 < value <= high):
        raise AttnlabError(f"expected {name} to be a number in (0, {high:g}], but got "
                           f"{value!r} instead")  # fmt: skip


class Adam:
    """Adam over ``params`` (name -> array): ``step(grads)`` changes those arrays in place.

    >>> p = {"w": np.array([1.0])}
    >>> opt = Adam(p, lr=0.1)
    >>> opt.step({"w": np.array([2.0])}); p["w"].round(6)  # the first step moves by lr
    array([0.9])
    """

    def __init__(self, params: dict[str, np.ndarray], *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):  # fmt: skip
        _check_number("lr", lr, MAX_LR)
        _check_number("eps", eps, 1.0)
        if (
            not isinstance(betas, tuple | list)
            or len(betas) != 2
            or not all(_real(b) and 0 <= b < 1 for b in betas)
        ):
            raise AttnlabError(f"expected betas to be two numbers in [0, 1), but got {betas!r} "
                               "instead")  # fmt: skip
        self.params, self.lr, self.betas, self.eps = params, float(lr), betas, float(eps)
        self.t = 0
        self._m = {name: np.zeros_like(p) for name, p in params.items()}
        self._v = {name: np.zeros_like(p) for name, p in params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        """One update of every parameter from its gradient (the same keys as ``params``)."""
        if set(grads) != set(self.params):
            raise AttnlabError(f"expected gradients for {sorted(self.params)}, but got "
                               f"{sorted(grads)} instead")  # fmt: skip
        self.t += 1
        b1, b2 = self.betas
        step = self.lr * np.sqrt(1 - b2**self.t) / (1 - b1**self.t)  # both corrections in one
        for name, p in self.params.items():
            g = grads[name]
            m, v = self._m[name], self._v[name]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            # ε scaled by √(1 − β₂ᵗ) keeps the update m̂ / (√v̂ + ε) exactly.
            p -= (step * m / (np.sqrt(v) + self.eps * np.sqrt(1 - b2**self.t))).astype(p.dtype)
