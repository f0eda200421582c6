"""FlashAttention's options, checked once and turned into attnlab's own terms.

Shape legend (FlashAttention's letters, attnlab's in brackets):
    B   batch size            N (N)  query rows       M (M)  key rows
    h   query heads           h_k    key/value heads (divides h: GQA, MQA when 1)
    d   head width (d_k)      d_v    value width

Every public function of ``attnlab.flash`` writes FlashAttention's signature out in full and
hands its options to ``read_options`` (its arrays to ``_arrays.real_array`` and ``check_heads``),
so one set of checks and one message grammar ("expected ..., but got ... instead", naming the
argument) serve them all. ``Options.mask`` is the only place where
``causal`` and ``window_size`` become attnlab masks, always aligned bottom-right as FlashAttention
aligns them: the last query row sees the last key.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np

from attnlab import masks
from attnlab.errors import AttnlabError, ShapeError
from attnlab.flash._arrays import BFLOAT16, real_array

__all__ = ["Options", "check_heads", "read_backward_options", "read_options"]


@dataclass(frozen=True)
class Options:
    """One call's validated options; ``None`` edges of the window are unbounded."""

    scale: float | None
    causal: bool
    left: int | None
    right: int | None
    softcap: float | None
    slopes: np.ndarray | None  # (h,) or (B, h)
    dropout_p: float
    rng: np.random.Generator | None

    def mask(self, slopes: np.ndarray | None = None):
        """The attnlab mask of these options; ``slopes`` overrides ``self.slopes`` (varlen)."""
        slopes = self.slopes if slopes is None else slopes
        parts = []
        if self.right == 0 and self.left is None:
            parts.append(masks.Causal(align="bottom_right"))
        elif self.right == 0:
            parts.append(masks.SlidingWindow(self.left + 1, align="bottom_right"))
        elif self.left is not None or self.right is not None:
            parts.append(
                masks.SlidingWindow(left=self.left, right=self.right, align="bottom_right")
            )
        if slopes is not None:
            parts.append(masks.ALiBi(slopes, align="bottom_right"))
        if not parts:
            return None
        return sum(parts[1:], parts[0])

    def first_open_row(self, n: int, m: int) -> int:
        """How many leading query rows see no key: FlashAttention returns 0 for them.

        Bottom-right aligned, row i sees keys i + m - n - left .. i + m - n + right, so a row
        is empty only when its right edge falls before key 0 (the left edge never passes key
        m - 1): the empty rows are always a prefix, and the rest keep their alignment when the
        prefix is cut off.
        """
        if m == 0:
            return n
        if self.right is None:
            return 0
        return min(n, max(0, n - m - self.right))


def read_options(
    dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, rng
) -> Options:
    """Check FlashAttention's common options; raise AttnlabError naming the first bad one.

    The parameters come in FlashAttention's own order. They have no defaults here: the
    defaults are in each public signature (FlashAttention's), and
    tests/test_public_signatures.py holds them equal everywhere.
    """
    _check_bool("causal", causal)
    _check_bool("deterministic", deterministic)  # attnlab is always deterministic
    if isinstance(dropout_p, bool) or not _is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise AttnlabError(f"expected 0 <= dropout_p < 1, but got dropout_p={dropout_p!r} instead")
    if dropout_p > 0 and not isinstance(rng, np.random.Generator):
        raise AttnlabError(
            "expected rng=numpy.random.Generator to draw the dropout mask from when "
            f"dropout_p > 0, but got rng={rng!r} instead; pass rng=numpy.random.default_rng(seed)"
        )
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool)
        or not _is_real(softmax_scale)
        or not math.isfinite(softmax_scale)
    ):
        raise AttnlabError(
            f"expected softmax_scale to be None or a finite number, but got {softmax_scale!r}"
        )
    if isinstance(softcap, bool) or not _is_real(softcap) or not math.isfinite(softcap):
        raise AttnlabError(
            "expected softcap to be a finite number (0 or negative = off, as in FlashAttention), "
            f"but got softcap={softcap!r}"
        )
    left, right = _window(window_size)
    if causal:
        right = 0  # FlashAttention: causal is the window (left, 0)
    slopes = None
    if alibi_slopes is not None:
        slopes = real_array(
            "alibi_slopes", alibi_slopes, (1, 2), "(nheads,) or (batch_size, nheads)"
        )
        if slopes.dtype == BFLOAT16:  # float32 holds every bfloat16 exactly
            slopes = slopes.astype(np.float32)
        if not np.isfinite(slopes).all():
            raise AttnlabError("expected finite alibi_slopes, but they hold NaN or inf")
    return Options(
        scale=None if softmax_scale is None else float(softmax_scale),
        causal=bool(causal),
        left=left,
        right=right,
        softcap=float(softcap) if softcap > 0 else None,
        slopes=slopes,
        dropout_p=float(dropout_p),
        rng=rng,
    )


def read_backward_options(
    dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic
) -> Options:
    """``read_options`` for a backward pass, which has no dropout to undo."""
    if dropout_p != 0:
        raise AttnlabError(
            f"expected dropout_p=0 (attnlab has no dropout backward), but got {dropout_p!r}"
        )
    return read_options(
        0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, None
    )


def _window(window_size) -> tuple[int | None, int | None]:
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise AttnlabError(
            f"expected window_size to be a pair (left, right), but got {window_size!r} instead"
        ) from None
    edges = []
    for edge in (left, right):
        try:  # any integer: Python, numpy, or a 0-d torch tensor (FlashAttention's tests pass one)
            value = None if isinstance(edge, bool | np.bool_) else operator.index(edge)
        except TypeError:
            value = None
        if value is None or value < -1:
            raise AttnlabError(
                "expected window_size to hold -1 (unbounded) or integers >= 0, but got "
                f"window_size={window_size!r} instead"
            )
        edges.append(None if value == -1 else value)
    return edges[0], edges[1]


def check_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray, slopes, batch: int | None) -> int:
    """Check q (..., h, d), k (..., h_k, d), v (..., h_k, d_v) and the slopes; return h / h_k."""
    h, h_k = q.shape[-2], k.shape[-2]
    if q.shape[-1] != k.shape[-1] or v.shape[-2] != h_k:
        raise ShapeError(
            "expected k to share q's head width and v to share k's head count, but got "
            f"q.shape={q.shape}, k.shape={k.shape} and v.shape={v.shape} instead"
        )
    if h_k == 0 or h % h_k:
        raise ShapeError(
            "expected the key/value head count to divide the query head count (GQA/MQA), but "
            f"got nheads={h} and nheads_k={h_k} instead"
        )
    if slopes is not None:
        wanted = [(h,)] if batch is None else [(h,), (batch, h)]
        if slopes.shape not in wanted:
            raise ShapeError(
                f"expected alibi_slopes of shape {' or '.join(map(str, wanted))}, but got "
                f"alibi_slopes.shape={slopes.shape} instead"
            )
    return h // h_k


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool | np.bool_):
        raise AttnlabError(f"expected {name} to be True or False, but got {value!r} instead")


def _is_real(x) -> bool:
    return isinstance(x, int | float | np.integer | np.floating)
