"""The statistical verdict on a dropout case's output when the kernel's keep mask is not given.

Shape legend: as ``_case.py``; kernel, exact and variance are (h, T, d_v) float64.

Each output entry is a sum of kept weights times values, so with dropout p

    E[out]   = exact                    (the 1/(1-p) scaling makes dropout unbiased)
    Var[out] = p/(1-p) * sum_j P_ij^2 v_j^2 =: sigma^2

Two numbers test a kernel's dropout: ``scaling``, the least-squares factor from exact to the
kernel's output (1 when it scales by 1/(1-p)), and ``spread``, the mean of
((out - exact) / sigma)^2 (1 when it keeps a fraction 1 - p). Each passes within ``_Z``
standard errors of 1, the errors estimated from the rows themselves (a row's entries share one
mask row, so rows, not entries, are the independent draws).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from attnlab.verifier._report import TensorVerdict
from attnlab.verifier._truth import truth

__all__ = ["StatisticalVerdict", "dropout_variance", "statistical"]

_Z = 5.0  # standard errors a statistic may stray from 1


@dataclass(frozen=True)
class StatisticalVerdict(TensorVerdict):
    """The output of a dropout case without its mask: judged by two statistics."""

    scaling: float = 1.0
    scaling_se: float = 0.0
    spread: float = 1.0
    spread_se: float = 0.0

    @property
    def passed(self) -> bool:
        ok = abs(self.scaling - 1) <= _Z * self.scaling_se
        return ok and abs(self.spread - 1) <= _Z * self.spread_se

    @property
    def ratio(self) -> float:
        return self.spread

    @property
    def tolerance(self) -> float:
        return math.nan

    def as_dict(self) -> dict:
        out = super().as_dict()
        out.update(tolerance=None, ratio=None, baseline_error=None, mean_tolerance=None)
        out["pass"] = self.passed
        out["statistical"] = {
            "scaling": self.scaling,
            "scaling_se": self.scaling_se,
            "spread": self.spread,
            "spread_se": self.spread_se,
            "z": _Z,
        }
        return out

    def failure(self) -> str:
        return (
            f"{self.name} (statistical, no keep mask): scaling {self.scaling:.3g} and spread "
            f"{self.spread:.3g}, each expected 1 within {_Z:g} x "
            f"({self.scaling_se:.2g}, {self.spread_se:.2g})"
        )


def statistical(verdict: TensorVerdict, kernel, exact, variance) -> StatisticalVerdict:
    """``verdict`` (out's, judged against the undropped answer) with the dropout statistics.
    kernel, exact, variance: (h, T, d_v) float64, variance sigma^2 per entry."""
    with np.errstate(invalid="ignore", divide="ignore"):
        e2 = exact * exact
        per_row = (kernel * exact).sum(-1), e2.sum(-1)  # (h, T) each
        scaling = per_row[0].sum() / per_row[1].sum()
        resid = per_row[0] - scaling * per_row[1]  # each row's share of the misfit
        scaling_se = math.sqrt(float((resid * resid).sum())) / float(per_row[1].sum())
        sd = np.sqrt(variance)
        live = sd > 0
        r2 = np.where(live, (kernel - exact) ** 2 / np.where(live, variance, 1), 0.0)
        rows = live.any(-1)
        m = r2.sum(-1)[rows] / live.sum(-1)[rows]  # (rows,): each row's mean square
    spread = float(m.mean()) if m.size else 1.0
    spread_se = float(m.std() / math.sqrt(max(m.size - 1, 1))) if m.size else 0.0
    return StatisticalVerdict(
        **{f.name: getattr(verdict, f.name) for f in dataclasses.fields(TensorVerdict)},
        scaling=float(scaling),
        scaling_se=scaling_se,
        spread=spread,
        spread_se=spread_se,
    )


def dropout_variance(case, budget: float) -> np.ndarray:
    """sigma^2 (h, T, d_v) of each output entry under dropout p: p/(1-p) sum_j P_ij^2 v_j^2.
    P^2 is exp(2 s) / Z^2: the attention of the doubled logits (scale, softcap, ALiBi slopes
    and sinks doubled) on v^2 gives sum_j exp(2 s_ij) v_j^2 / Z_2, and Z_2 / Z^2 =
    exp(lse_2 - 2 lse)."""
    a, opt, p = case.arrays, case.options, case.dropout.p
    scale = opt.softmax_scale or 1.0 / math.sqrt(a["q"].shape[-1])
    twice = dataclasses.replace(
        opt,
        softmax_scale=2 * scale,
        softcap=2 * opt.softcap,
        alibi_slopes=None if opt.alibi_slopes is None else 2 * opt.alibi_slopes,
        sinks=None if opt.sinks is None else 2 * opt.sinks,
    )
    lse = np.zeros(a["out"].shape[:2])  # (h, T): asks truth for the log-sum-exp
    base = {"q": a["q"], "k": a["k"], "out": a["out"], "lse": lse}
    one = truth(dataclasses.replace(case, arrays={**base, "v": a["v"]}), budget)
    v2 = np.square(a["v"].astype(np.float64))  # (h_kv, T_k, d_v)
    two = truth(dataclasses.replace(case, arrays={**base, "v": v2}, options=twice), budget)
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = np.exp(two["lse"] - 2 * one["lse"])  # (h, T): Z_2 / Z^2
    ratio = np.where(np.isfinite(ratio), ratio, 0.0)
    return p / (1 - p) * two["out"] * ratio[..., None]
