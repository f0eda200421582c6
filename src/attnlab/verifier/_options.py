"""A case's options, read with FlashAttention's names, and the attnlab mask each one becomes.

Shape legend:
    B    sequences in the case (the batch, or the varlen sequences)
    h    query heads

FlashAttention's conventions, kept exactly (its ``flash_attn_func`` docstring):
- ``window_size=(left, right)``, -1 for a side without a limit: query i of a sequence of N
  queries and M keys sees keys i + M - N - left .. i + M - N + right (aligned bottom-right).
- ``causal=True`` is the window's right edge at 0, so ``causal`` with ``window_size=(left, -1)``
  means (left, 0).
- ``softcap`` 0 means none; ``softmax_scale`` None means 1/sqrt(d_k).
- ``alibi_slopes`` (h,) or (B, h): the bias -slope * |i + M - N - j| on every score.
- ``sinks`` (h,): one logit per head added to each row's softmax denominator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab import masks
from attnlab.errors import AttnlabError

__all__ = ["OPTION_NAMES", "CaseError", "Options", "parse_options"]

OPTION_NAMES = (
    "causal",
    "window_size",
    "softcap",
    "softmax_scale",
    "alibi_slopes",
    "sinks",
    "cu_seqlens_q",
    "cu_seqlens_k",
)


class CaseError(AttnlabError):
    """A case verify cannot judge: a missing or unknown entry, shapes that disagree, a dtype it
    does not read, an unreadable file. The message names the array or option."""


@dataclass(frozen=True)
class Options:
    """The options of one case, checked. Arrays are float64 copies."""

    causal: bool = False
    window_size: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    softmax_scale: float | None = None
    alibi_slopes: np.ndarray | None = None  # (B, h), a (h,) entry repeated for each sequence
    sinks: np.ndarray | None = None  # (h,)

    @property
    def window(self) -> tuple[int, int]:
        """(left, right) as FlashAttention applies it: ``causal`` sets the right edge to 0."""
        left, right = self.window_size
        return (left, 0) if self.causal else (left, right)

    def mask(self, b: int, heads: tuple[int, int]):
        """The attnlab mask of sequence ``b`` (None for none), for q viewed as (h_kv, g, N, d):
        per-head slopes are laid out on those two leading axes."""
        parts = []
        band = _band(self.window)
        if band is not None:
            parts.append(band)
        if self.alibi_slopes is not None:
            parts.append(masks.ALiBi(self.alibi_slopes[b].reshape(heads), align="bottom_right"))
        return sum(parts[1:], parts[0]) if parts else None

    def kernel_kwargs(self, heads: tuple[int, int]) -> dict:
        """The keyword arguments ``attention`` and ``attention_backward`` take for this case,
        for q viewed as (h_kv, g, N, d): per-head sinks laid out on those two axes."""
        return {
            "scale": self.softmax_scale,
            "softcap": self.softcap or None,  # FlashAttention's 0 is attnlab's None: no cap
            "sinks": None if self.sinks is None else self.sinks.reshape(heads),
            "fully_masked": "zero",  # FlashAttention's answer for a row with no key: 0
        }

    def as_dict(self) -> dict:
        out = {"causal": self.causal, "window_size": list(self.window_size)}
        out["softcap"] = self.softcap
        out["softmax_scale"] = self.softmax_scale
        for name in ("alibi_slopes", "sinks"):
            value = getattr(self, name)
            out[name] = None if value is None else value.tolist()
        return out


def _band(window: tuple[int, int]):
    left, right = window
    if (left, right) == (-1, -1):
        return None
    if (left, right) == (-1, 0):
        return masks.Causal(align="bottom_right")
    return masks.SlidingWindow(
        left=None if left < 0 else left, right=None if right < 0 else right, align="bottom_right"
    )


def _scalar(name: str, value, kind: str):
    arr = np.asarray(value)
    if arr.ndim != 0 and arr.size != 1:
        raise CaseError(f"{name}: expected one {kind}, but got an array of shape {arr.shape}")
    return arr.reshape(()).item() if arr.dtype.kind != "V" else None


def _float(name: str, value, *, positive: bool) -> float:
    x = _scalar(name, value, "number")
    if isinstance(x, bool) or not isinstance(x, int | float) or not np.isfinite(x):
        raise CaseError(f"{name}: expected a finite number, but got {x!r} instead")
    if x < 0 or (positive and x == 0):
        bound = "> 0" if positive else ">= 0 (0 = none)"
        raise CaseError(f"{name}: expected a number {bound}, but got {x!r} instead")
    return float(x)


def _per_head(name: str, value, shapes: list[tuple[int, ...]], legend: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.shape not in shapes:
        raise CaseError(
            f"{name}: expected real numbers of shape {legend} = "
            f"{' or '.join(map(str, shapes))}, but got dtype {arr.dtype} and shape {arr.shape}"
        )
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise CaseError(f"{name}: expected finite values, but it holds NaN or inf")
    return arr


def _causal(value) -> bool:
    x = _scalar("causal", value, "bool")
    if not isinstance(x, bool) and x not in (0, 1):
        raise CaseError(f"causal: expected a bool (or 0 / 1), but got {x!r} instead")
    return bool(x)


def _window(value) -> tuple[int, int]:
    arr = np.asarray(value)
    whole = arr.dtype.kind in "iu" or (
        arr.dtype.kind == "f" and np.isfinite(arr).all() and (arr == np.round(arr)).all()
    )  # 128.0 is 128, as a window a float tensor was saved from
    if arr.shape != (2,) or not whole or (arr < -1).any():
        shown = arr.tolist() if arr.size <= 4 else f"an array of shape {arr.shape}"
        raise CaseError(
            "window_size: expected two integers (left, right), each >= 0 or -1 for no limit, "
            f"but got {shown} instead"
        )
    return int(arr[0]), int(arr[1])


def parse_options(entries: dict, batch: int, heads: int) -> Options:
    """Options from a case's entries (FlashAttention's names; absent = FlashAttention's default).

    ``batch`` is the number of sequences and ``heads`` the query heads, for the per-head
    options' shapes. cu_seqlens are read by the case, not here.
    """
    kw = {}
    if entries.get("causal") is not None:
        kw["causal"] = _causal(entries["causal"])
    if entries.get("window_size") is not None:
        kw["window_size"] = _window(entries["window_size"])
    if entries.get("softcap") is not None:
        kw["softcap"] = _float("softcap", entries["softcap"], positive=False)
    if entries.get("softmax_scale") is not None:
        kw["softmax_scale"] = _float("softmax_scale", entries["softmax_scale"], positive=True)
    if entries.get("alibi_slopes") is not None:
        slopes = _per_head(
            "alibi_slopes", entries["alibi_slopes"], [(heads,), (batch, heads)], "(h,) or (B, h)"
        )
        kw["alibi_slopes"] = np.broadcast_to(slopes, (batch, heads)).copy()  # (B, h)
    if entries.get("sinks") is not None:
        kw["sinks"] = _per_head("sinks", entries["sinks"], [(heads,)], "(h,)")
    return Options(**kw)
