"""Rounding float32 to float16 or bfloat16 in place, bit for bit as numpy's and ml_dtypes' casts.

The baseline rounds every table it computes (scores, weights, dP, dS) to the kernel's dtype and
works on in float32, as a GPU's float16 arithmetic does. ``x.astype(float16).astype(float32)``
does that, but numpy converts float16 one element at a time, slowly for float16's subnormals:
48 ns an entry on softmax weights here, of which half are below 2^-14. Integer operations on
the float32 bits give the same numbers in a few passes, a block of entries at a time so they
stay in cache:

    normal range  add 0xFFF plus the lowest kept bit, clear the 13 dropped bits: round to
                  nearest, ties to even, on float16's 10 mantissa bits (bfloat16: 16 dropped
                  bits and 7 kept, the same exponent as float32, so nothing else to handle)
    |x| < 2^-14   float16's subnormals, spaced 2^-24: (|x| + 0.5) - 0.5 rounds |x| to that
                  spacing in float32's own round-to-nearest-even, since float32's spacing in
                  [0.5, 1) is 2^-24
    |x| > 65504   past float16's largest finite value (65520 and up round there): +-inf
    inf, NaN      kept (a default NaN's payload survives the clearing)

NaN keeps its bits (adding the bias would carry some payloads into the exponent or the sign).

With numba installed the same rounding runs compiled (``_rounding_numba.py``), one read and
one write of each entry: 1 ns an entry against numpy's 2 (scores) to 8 (softmax weights),
measured on the 2-core Xeon. numba's load costs 0.6-1 s of CPU time once per process, so
``passes`` takes it only for a baseline of ``COMPILED_PAIRS`` score pairs or more, or when
ATTNLAB_KERNEL=numba (never with ATTNLAB_KERNEL=numpy). The compiled passes also fuse the
steps that end in a rounding: softmax's division by the row sums, and its backward's
(dP - rowsum) * P. Both ways give the same bits, every entry.

tests/verifier/test_verify_rounding.py checks every float32 bit pattern's neighbourhood that matters
(ties, subnormals, the overflow edge, specials) and random tables against the casts, and the
compiled passes against numpy's.
"""

from __future__ import annotations

import importlib
import threading
from typing import NamedTuple

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._fused import ENV, choice

__all__ = ["COMPILED_PAIRS", "NUMPY", "Passes", "load_ahead", "passes", "round_in_place"]

#: Score pairs (heads x rows x keys, masks ignored) from which a baseline loads numba. Its
#: load (0.6-1 s of CPU) outweighed what the passes saved at N = 2048, h = 8, causal (2^25
#: pairs: verify measured 0.2-0.4 s slower in CPU time), and about repaid it at N = 4096.
COMPILED_PAIRS = 2**26

_BLOCK = 1 << 16  # entries rounded at a time: 256 KiB of float32, in cache
_HALF_TINY = np.uint32(0x38800000)  # 2^-14: float16's smallest normal
_HALF_MAX = np.float32(65504.0)
_SIGN = np.uint32(0x80000000)


def round_in_place(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` (float32, C-contiguous, writeable) rounded to ``dtype`` (float16 or bfloat16)
    and kept in float32; returns ``x``."""
    flat = x.reshape(-1)  # a view: x is contiguous
    bits = flat.view(np.uint32)
    half = dtype == np.float16
    drop = 13 if half else 16
    keep_mask = np.uint32((0xFFFFFFFF << drop) & 0xFFFFFFFF)
    bias = np.uint32((1 << (drop - 1)) - 1)
    size = min(_BLOCK, flat.size)
    scratch, spare = np.empty(size, np.uint32), np.empty(size, np.float32)
    small, odd = np.empty(size, bool), np.empty(size, bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, _BLOCK):
            b = bits[start : start + _BLOCK]
            f = flat[start : start + _BLOCK]
            t, s, tiny, nan = scratch[: b.size], spare[: b.size], small[: b.size], odd[: b.size]
            saved = b[nan] if np.isnan(f, out=nan).any() else None  # NaN keeps its bits
            if half:
                np.bitwise_and(b, np.uint32(0x7FFFFFFF), out=t)
                np.less(t, _HALF_TINY, out=tiny)
                any_tiny = tiny.any()
                if any_tiny:
                    np.abs(f, out=s)
                    s += np.float32(0.5)
                    s -= np.float32(0.5)  # >= 0: f's sign goes back on the bits
                    np.bitwise_and(b, _SIGN, out=t)
                    s.view(np.uint32)[...] |= t
            np.right_shift(b, drop, out=t)
            t &= np.uint32(1)
            t += bias
            b += t
            b &= keep_mask
            if half:
                if any_tiny:
                    np.copyto(f, s, where=tiny)
                np.abs(f, out=s)
                np.greater(s, _HALF_MAX, out=tiny)  # NaN compares False: kept
                if tiny.any():
                    np.copyto(f, np.copysign(np.float32(np.inf), f), where=tiny)
            if saved is not None:
                b[nan] = saved
    return x


def _divide_round(e: np.ndarray, total: np.ndarray, dtype: np.dtype) -> None:
    """e <- round(e / total), e (..., R, C) and total (..., R, 1), numpy's passes."""
    e /= total
    round_in_place(e, dtype)


def _grad_round(dp: np.ndarray, w: np.ndarray, d: np.ndarray, dtype: np.dtype) -> None:
    """dp <- round((dp - d) * w), dp and w (..., R, C), d (..., R, 1), numpy's passes."""
    dp -= d
    dp *= w
    round_in_place(dp, dtype)


class Passes(NamedTuple):
    """The rounding passes, each in place on a C-contiguous float32 table, one way or the
    other: round(x, dtype), divide_round(e, total, dtype), grad_round(dp, w, d, dtype)."""

    round: object
    divide_round: object
    grad_round: object


NUMPY = Passes(round_in_place, _divide_round, _grad_round)

_lock = threading.Lock()
_loaded: list = []  # [Passes or None], once tried


def passes(pairs: int) -> Passes:
    """The passes for a baseline of ``pairs`` score pairs: compiled (numba) or numpy's."""
    mode = choice()
    if mode == "numpy" or (mode == "auto" and pairs < COMPILED_PAIRS):
        return NUMPY
    compiled = _compiled()
    if compiled is None and mode == "numba":
        raise AttnlabError(
            f"expected numba to be installed for {ENV}=numba, but it is not: "
            "pip install 'attnlab[fast]', or set it to auto or numpy"
        )
    return NUMPY if compiled is None else compiled


def load_ahead(pairs: int) -> None:
    """Start loading the compiled passes on a thread of their own, if a baseline of ``pairs``
    score pairs will take them: numba's load (0.6 s of CPU, one core) then overlaps the
    exact answer's work instead of preceding the baseline's. Changes no result; an error is
    left for the baseline's own call of ``passes`` to raise."""
    if _loaded or choice() == "numpy" or (choice() == "auto" and pairs < COMPILED_PAIRS):
        return

    def load():
        try:
            fast = passes(pairs)
            x, one, half = np.zeros((1, 8), np.float32), np.ones((1, 1), np.float32), np.float16
            fast.round(x, np.dtype(half))  # a first call loads each kernel's machine code
            fast.divide_round(x, one, np.dtype(half))
            fast.grad_round(x, x, one, np.dtype(half))
        except Exception:  # the baseline's own call of passes reports it
            pass

    threading.Thread(target=load, name="attnlab-numba-load", daemon=True).start()


def _compiled() -> Passes | None:
    with _lock:
        if not _loaded:
            try:
                nb = importlib.import_module("attnlab.verifier._rounding_numba")
            except ImportError:
                _loaded.append(None)
            else:
                _loaded.append(_compiled_passes(nb))
    return _loaded[0]


def _compiled_passes(nb) -> Passes:
    def round_(x, dtype):
        nb.round_flat(x.reshape(-1), dtype == np.float16)
        return x

    def divide_round(e, total, dtype):
        rows = e.shape[-1]
        nb.divide_round(e.reshape(-1, rows), total.reshape(-1), dtype == np.float16)

    def grad_round(dp, w, d, dtype):
        rows = dp.shape[-1]
        nb.grad_round(dp.reshape(-1, rows), w.reshape(-1, rows), d.reshape(-1), dtype == np.float16)

    return Passes(round_, divide_round, grad_round)
