"""Lab: without the 1/√d_k scaling, softmax saturates and its gradient all but vanishes (§6.3).

Each trial draws one query and ``keys`` keys with i.i.d. N(0, 1) entries and softmaxes the
keys' scores twice, unscaled and scaled, so the two conditions see the same draws. A trial
*saturates* when its largest weight p_max exceeds ``threshold``.

Shape legend: T trials, M keys (the chapter's letter), d_k the query/key width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnlab.core.softmax import softmax
from attnlab.labs._common import (
    CHUNK_ELEMENTS,
    MAX_WIDTH,
    SATURATION,
    LabResult,
    Progress,
    check_int,
    check_open_unit,
    check_seed,
    mean_or_none,
    rng_for,
    se_of_mean,
)

__all__ = ["SaturationResult", "saturation"]

MAX_KEYS = 4096  # one trial's M x M Jacobian is then 128 MiB


@dataclass(frozen=True)
class SaturationResult(LabResult):
    """How often softmax saturates, scaled and unscaled, and how small its Jacobian gets.

    ``gradient_term`` is the mean of p_max(1 - p_max), the Jacobian's diagonal entry for the
    winning key, over the saturated unscaled trials (None when no trial saturates). The
    ``jacobian_*`` fields are mean Frobenius norms of J = diag(p) - p pᵀ (§4.3).
    """

    d_k: int
    keys: int
    trials: int
    threshold: float
    seed: int
    unscaled_saturated: int  # count of unscaled trials with p_max > threshold
    scaled_saturated: int
    unscaled_share: float
    scaled_share: float
    unscaled_share_se: float  # binomial standard error sqrt(s(1-s)/T)
    scaled_share_se: float
    gradient_term: float | None  # over saturated unscaled trials
    gradient_term_se: float | None
    unscaled_gradient_term: float  # mean p_max(1 - p_max) over all unscaled trials
    scaled_gradient_term: float  # ... over all scaled trials
    jacobian_saturated: float | None  # mean ||J||_F over saturated unscaled trials
    jacobian_unscaled: float  # ... over all unscaled trials
    jacobian_scaled: float  # ... over all scaled trials
    unscaled_p_max: tuple[float, ...]  # per trial, for histograms
    scaled_p_max: tuple[float, ...]
    lab = "saturation"

    def table(self) -> tuple[list[str], list[list]]:
        columns = ["case", "trials", "saturated", "share", "share_se"]
        columns += ["mean_p_max", "gradient_term", "gradient_term_se", "jacobian_fro"]
        un, sc = np.array(self.unscaled_p_max), np.array(self.scaled_p_max)
        hot = un[un > self.threshold]
        rows = [
            ["unscaled"] + self._counts(self.unscaled_saturated, self.unscaled_share_se)
            + [float(un.mean()), self.unscaled_gradient_term, None, self.jacobian_unscaled],
            ["unscaled, saturated", len(hot), len(hot), 1.0 if len(hot) else None, None]
            + [mean_or_none(hot), self.gradient_term, self.gradient_term_se]
            + [self.jacobian_saturated],
            ["scaled"] + self._counts(self.scaled_saturated, self.scaled_share_se)
            + [float(sc.mean()), self.scaled_gradient_term, None, self.jacobian_scaled],
        ]  # fmt: skip
        return columns, rows

    def _counts(self, saturated: int, se: float) -> list:
        return [self.trials, saturated, saturated / self.trials, se]

    def summary(self) -> list[str]:
        lines = [
            f"Without scaling, {self.unscaled_share:.1%} (± {self.unscaled_share_se:.1%}) of "
            f"{self.trials} trials at d_k = {self.d_k}, {self.keys} keys, have a largest "
            f"weight over {self.threshold}; with scaling, {self.scaled_share:.1%}."
        ]
        if self.gradient_term is not None and self.jacobian_saturated is not None:
            lines.append(
                f"In the saturated trials p_max(1 - p_max) = {self.gradient_term:.4f}, and the "
                f"softmax Jacobian's norm is {self.jacobian_saturated:.4f} against "
                f"{self.jacobian_scaled:.4f} with scaling: "
                f"{self.jacobian_scaled / self.jacobian_saturated:.0f} times smaller."
            )
        return lines


def _trial_stats(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p (T, M) weights -> p_max (T,) and the Frobenius norm of diag(p) - p pᵀ (T,).

    With J_ij = δ_ij p_i - p_i p_j, ||J||² = Σ p_i² - 2 Σ p_i³ + (Σ p_i²)²: O(M) per trial
    instead of building the M x M matrix (the explorer runs this on every new slider width).
    """
    p2 = np.sum(p * p, axis=-1)  # (T,)
    p3 = np.sum(p * p * p, axis=-1)  # (T,)
    fro2 = np.maximum(p2 - 2.0 * p3 + p2 * p2, 0.0)  # rounding can dip below 0 when p is one-hot
    return p.max(axis=-1), np.sqrt(fro2)


def saturation(
    d_k: int = 128,
    keys: int = 64,
    trials: int = 500,
    threshold: float = 0.99,
    seed: int = 0,
    *,
    progress: Progress | None = None,
) -> SaturationResult:
    """Share of softmax trials whose largest weight exceeds ``threshold``, unscaled vs scaled.

    Args:
        d_k: query/key width, 1 to 65536.   keys: M, 2 to 4096.   trials: at least 1.
        threshold: strictly between 0 and 1.   seed: a non-negative integer.
        progress: called as progress(trials done, trials).

    >>> r = saturation(trials=50)
    >>> r.scaled_share, 0 < r.unscaled_share < 1
    (0.0, True)
    """
    d_k = check_int("d_k", d_k, high=MAX_WIDTH)
    keys = check_int("keys", keys, low=2, high=MAX_KEYS)
    trials = check_int("trials", trials)
    threshold = check_open_unit("threshold", threshold)
    seed = check_seed(seed)
    rng = rng_for(seed, SATURATION, d_k, keys)
    per = max(1, CHUNK_ELEMENTS // (keys * max(d_k, keys)))  # trials per chunk
    stats = {name: [] for name in ("un_max", "un_fro", "sc_max", "sc_fro")}
    for start in range(0, trials, per):
        # One (M + 1, d_k) block per trial, in order: the numbers do not depend on ``per``.
        x = rng.standard_normal((min(per, trials - start), keys + 1, d_k))  # (T, M + 1, d_k)
        q, k = x[:, :1, :], x[:, 1:, :]  # (T, 1, d_k), (T, M, d_k)
        scores = (q @ np.swapaxes(k, -1, -2))[:, 0, :]  # (T, M)
        un_max, un_fro = _trial_stats(softmax(scores))
        sc_max, sc_fro = _trial_stats(softmax(scores * (1.0 / math.sqrt(d_k))))  # §6.3
        for name, value in zip(stats, (un_max, un_fro, sc_max, sc_fro), strict=True):
            stats[name].append(value)
        if progress is not None:
            progress(min(start + per, trials), trials)
    un_max, un_fro, sc_max, sc_fro = (np.concatenate(v) for v in stats.values())
    hot = un_max > threshold  # (T,) the saturated unscaled trials
    grad = un_max[hot] * (1.0 - un_max[hot])  # the winner's Jacobian diagonal p(1 - p)
    un_share, sc_share = float(hot.mean()), float((sc_max > threshold).mean())
    return SaturationResult(
        d_k=d_k,
        keys=keys,
        trials=trials,
        threshold=threshold,
        seed=seed,
        unscaled_saturated=int(hot.sum()),
        scaled_saturated=int((sc_max > threshold).sum()),
        unscaled_share=un_share,
        scaled_share=sc_share,
        unscaled_share_se=math.sqrt(un_share * (1 - un_share) / trials),
        scaled_share_se=math.sqrt(sc_share * (1 - sc_share) / trials),
        gradient_term=mean_or_none(grad),
        gradient_term_se=se_of_mean(grad),
        unscaled_gradient_term=float(np.mean(un_max * (1 - un_max))),
        scaled_gradient_term=float(np.mean(sc_max * (1 - sc_max))),
        jacobian_saturated=mean_or_none(un_fro[hot]),
        jacobian_unscaled=float(un_fro.mean()),
        jacobian_scaled=float(sc_fro.mean()),
        unscaled_p_max=tuple(un_max.tolist()),
        scaled_p_max=tuple(sc_max.tolist()),
    )
