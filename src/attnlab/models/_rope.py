"""Rotary position embeddings (RoPE) and the frequency schedules config.json can ask for.

Shape legend: B batch, h heads, N tokens, d head width; r rotated width (even, r <= d: a
partial rotary factor turns only the first r of each head's d numbers); r/2 frequencies.

Pair i of a head's vector is (x_i, x_{i + r/2}) (the "rotate half" layout most Hugging Face
families use) or, for Llama 4, (x_{2i}, x_{2i+1}) (``interleaved``: the complex-number
layout); at position p it turns by angle p · f_i. The schedules change f_i (and, for YaRN and
LongRoPE, scale cos and sin):
    default  f_i = θ^(-2i/d)
    linear   f_i / factor
    llama3   Llama 3.1's: low frequencies divided by factor, high ones kept, a smooth blend between
    yarn     YaRN: interpolated where wavelengths are long, extrapolated where short, a linear
             ramp between; cos and sin times an attention factor (0.1 ln(factor) + 1 by default)
    longrope Phi-3's: f_i divided by a learned factor per pair, the short list up to
             ``original_max_position_embeddings`` tokens and the long list past it (the whole
             input switches, as transformers does); cos and sin times
             sqrt(1 + ln(factor) / ln(original)) by default
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._config import HUGE, TINY, shown

__all__ = ["ROPE_TYPES", "Rope", "parameters", "rotate_pairs"]

ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


def parameters(cfg) -> tuple[dict, str]:
    """(the rope parameters, the config key they came from): transformers 5 writes
    ``rope_parameters``; older configs ``rope_theta`` and ``rope_scaling``."""
    for key in ("rope_parameters", "rope_scaling"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, dict):  # a string or list: no schedule
            raise cfg._bad(key, "an object of rotary parameters", value)
    if cfg.get("rope_parameters") is not None:
        return dict(cfg.get("rope_parameters")), "rope_parameters"
    params = dict(cfg.get("rope_scaling") or {})
    params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    return params, "rope_scaling"


def _finite(value) -> bool:
    """Whether ``value`` is a number (not a bool) from TINY to HUGE."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and TINY <= value <= HUGE
    except OverflowError:  # an int too large for a float
        return False


def _number(params: dict, name: str, where: str, default=None) -> float:
    """A finite positive parameter: inf, NaN or 1e-300 would reach log or a division as a
    math error or a NaN frequency."""
    value = params.get(name, default)
    if not _finite(value):
        raise AttnlabError(
            f"expected {where}[{name!r}] to be a finite number from {TINY:g} to {HUGE:g}, "
            f"but got {shown(value)} instead"
        )
    return float(value)


class Rope:
    """The rotation of one model: its frequencies (r/2,) and the factor on cos and sin.

    Args:
        cfg: the model's Config.   head_dim: d.
        params: the rope parameters to use instead of config.json's (Gemma 3 keeps one set per
            layer type); ``where`` names them in errors.
        interleaved: rotate pairs (x_{2i}, x_{2i+1}) (Llama 4) instead of halves.
    """

    def __init__(self, cfg, head_dim: int, params=None, where=None, interleaved=False):
        if params is None:
            params, key = parameters(cfg)
            where = f"{cfg.path}'s {key}"
        kind = params.get("rope_type", params.get("type", "default"))
        if not isinstance(kind, str) or kind not in ROPE_TYPES:
            raise AttnlabError(
                f"expected {where}['rope_type'] to be one of {ROPE_TYPES}, but got {shown(kind)}: "
                "attnlab cannot run this rotary embedding"
            )
        partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        partial = _number({"partial_rotary_factor": partial}, "partial_rotary_factor", where)
        dims = int(head_dim * partial)  # transformers rounds down, as here
        if dims % 2 or not 0 < dims <= head_dim:
            raise AttnlabError(
                f"expected an even rotated width of at most {head_dim} (head width times "
                f"{where}['partial_rotary_factor']), but got {dims} instead"
            )
        theta = _number(params, "rope_theta", where)
        if theta <= 1:  # YaRN divides by log(θ); a base of 1 or less is no rotary schedule
            raise AttnlabError(
                f"expected {where}['rope_theta'] to be a number > 1, but got {theta!r} instead"
            )
        self.freqs = theta ** -(np.arange(0, dims, 2, dtype=np.float64) / dims)  # (r/2,)
        self.long = None  # LongRoPE's frequencies past ``self.switch`` tokens
        self.factor = 1.0
        self.kind = kind
        self.interleaved = interleaved
        if kind == "linear":
            self.freqs = self.freqs / _number(params, "factor", where)
        elif kind == "llama3":
            self.freqs = _llama3(self.freqs, params, where)
        elif kind == "yarn":
            self.freqs, self.factor = _yarn(self.freqs, params, where, cfg, dims, theta)
        elif kind == "longrope":
            self._longrope(params, where, cfg)

    def _longrope(self, params: dict, where: str, cfg) -> None:
        key = "original_max_position_embeddings"
        self.switch = _number({key: params.get(key, cfg.get(key))}, key, where)
        factor = params.get("factor")
        factor = cfg.int("max_position_embeddings") / self.switch if factor is None else factor
        factor = _number({"factor": factor}, "factor", where)
        attention = params.get("attention_factor")
        if attention is None:
            attention = (
                1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(self.switch))
            )
        else:
            attention = _number(params, "attention_factor", where)
        self.factor = float(attention)
        base = self.freqs
        for name in ("short_factor", "long_factor"):
            values = params.get(name)
            ok = isinstance(values, list) and len(values) == len(base)
            if not ok or not all(_finite(v) for v in values):
                raise AttnlabError(
                    f"expected {where}[{name!r}] to be a list of {len(base)} finite numbers "
                    f"from {TINY:g} to {HUGE:g}, but got {shown(values)} instead"
                )
            scaled = base / np.asarray(values, dtype=np.float64)  # (r/2,)
            self.freqs, self.long = (
                (scaled, None) if name == "short_factor" else (self.freqs, scaled)
            )

    def tables(self, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin), each (N, r): position p's angles, repeated for both halves (or, when
        interleaved, for both numbers of each pair)."""
        freqs = self.freqs if self.long is None or n <= self.switch else self.long
        angles = np.arange(n, dtype=np.float64)[:, None] * freqs  # (N, r/2)
        if self.interleaved:
            angles = np.repeat(angles, 2, -1)  # (N, r): f_0 f_0 f_1 f_1 ...
        else:
            angles = np.concatenate([angles, angles], -1)  # (N, r): f_0 f_1 ... f_0 f_1 ...
        cos = (np.cos(angles) * self.factor).astype(dtype)
        return cos, (np.sin(angles) * self.factor).astype(dtype)

    def rotate(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x (B, h, N, d) turned by this rotary's tables (``rotate_pairs``)."""
        return rotate_pairs(x, cos, sin, self.interleaved)


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool = False):
    """x (B, h, N, d) with its first r numbers turned pairwise: x · cos + turned(x) · sin,
    where turned(x) maps each pair (a, b) to (-b, a); the other d - r numbers pass. Pairs are
    halves (x_i, x_{i + r/2}), or with ``interleaved`` neighbours (x_{2i}, x_{2i+1})."""
    r = cos.shape[-1]
    part = x[..., :r]  # (B, h, N, r)
    if interleaved:
        turned = np.stack([-part[..., 1::2], part[..., 0::2]], -1).reshape(part.shape)
    else:
        turned = np.concatenate([-part[..., r // 2 :], part[..., : r // 2]], -1)
    out = part * cos + turned * sin
    return out if r == x.shape[-1] else np.concatenate([out, x[..., r:]], -1)  # (B, h, N, d)


def _llama3(freqs: np.ndarray, params: dict, where: str) -> np.ndarray:
    factor = _number(params, "factor", where)
    low = _number(params, "low_freq_factor", where)
    high = _number(params, "high_freq_factor", where)
    context = _number(params, "original_max_position_embeddings", where)
    if high <= low:  # the blend divides by their difference
        raise AttnlabError(
            f"expected {where}['high_freq_factor'] to be larger than its low_freq_factor "
            f"{low!r}, but got {high!r} instead"
        )
    wavelen = 2 * math.pi / freqs
    # Long wavelengths (low frequencies) are slowed by the factor, short ones kept as trained.
    out = np.where(wavelen > context / low, freqs / factor, freqs)
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * out / factor + smooth * out
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return np.where(medium, blended, out)


def _yarn(freqs, params: dict, where: str, cfg, head_dim: int, theta: float):
    context = _number(params, "original_max_position_embeddings", where)
    factor = params.get("factor")
    factor = (
        cfg.int("max_position_embeddings") / context
        if factor is None
        else _number(params, "factor", where)
    )

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = params.get("attention_factor")
    if attention is None:
        m, m_all = params.get("mscale"), params.get("mscale_all_dim")
        if m and m_all:
            m, m_all = _number(params, "mscale", where), _number(params, "mscale_all_dim", where)
            attention = mscale(factor, m) / mscale(factor, m_all)
        else:
            attention = mscale(factor)
    else:
        attention = _number(params, "attention_factor", where)
    fast = _number(params, "beta_fast", where, 32) if params.get("beta_fast") else 32.0
    slow = _number(params, "beta_slow", where, 1) if params.get("beta_slow") else 1.0

    def dim_of(rotations):  # the pair index whose wavelength fits `rotations` times in context
        return head_dim * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(fast), dim_of(slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # 1: extrapolate (as trained), 0: interpolate (divide by factor)
    return freqs / factor * (1 - keep) + freqs * keep, float(attention)
