"""A compiled exponential for the blockwise tiles, used when numba is installed (the ``fast``
extra): the one elementwise pass numpy runs slowly on some CPUs.

Shape legend: rows x cols a tile (query rows x keys).

Why: numpy 2.4's float32 exp and exp2 run as scalar loops on a CPU without AVX-512 (measured
on the 2-core AMD EPYC, AVX2: 1.3-1.9 ms for a 512 x 512 tile, against 0.05 ms for a plain
copy). At the tile shape that one pass took more time than both matmuls together
(benchmarks/profile_blockwise.py: 6.3 ms of exp against 2.9 + 2.6 ms of GEMMs per query block
of 256 rows over 4096 keys). The kernel below is exp written out in plain float32 arithmetic
(range reduction by ln 2 in two parts, a degree-7 polynomial, 2^n from the exponent bits), so
LLVM vectorises it without fast-math: 0.43 ms for the same tile, within ``ULPS`` of numpy's
exp (a sweep of [-110, 90] in 2·10^6 steps measured at most 3).

The choice, per call (``tile_kernels``): the environment variable ATTNLAB_KERNEL = ``numpy``
(never compile), ``numba`` (always, float32; an error if numba is missing) or ``auto`` (the
default): the compiled passes for float32 where numpy's exp is the scalar one
(``_tiles.natural_exp``), on calls of ``MIN_PAIRS`` score pairs or more. The rule reads only
the call, the CPU and the setting, never the process's history, so every call of a shape
rounds alike. numba is imported by the first call that uses it, never at ``import attnlab``;
that load (numba itself, and the kernels from its on-disk cache, ``cache=True``: only a
machine's first use compiles them) costs ~1.3 s of CPU time once per process (measured,
2-core AMD EPYC), about what the passes save over a dozen calls at N = 2048, h = 8.
``warm()`` loads it ahead (the benchmarks do, so it lands in no timed call).
The backward's dS = p ∘ (dP' − D) is fused the same way (``softmax_grad``, bit for bit
numpy's). float64 always takes numpy's passes (the exact pass, too, stays numpy's in every
case).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from attnlab.core._tiles import natural_exp
from attnlab.errors import AttnlabError

__all__ = ["ENV", "MIN_PAIRS", "ULPS", "Kernels", "choice", "tile_kernels", "warm"]

#: The environment variable that picks the tile exponential: numpy, numba or auto.
ENV = "ATTNLAB_KERNEL"
_CHOICES = ("auto", "numpy", "numba")
#: ``auto`` runs the compiled passes on calls of this many score pairs (lead · N · M) or more:
#: N = 2048 with h = 8, the smallest of the long-sequence targets. They save ~3 ns a pair
#: (forward or backward, measured there: ~0.1 s a call), so smaller calls, which the dense
#: path mostly takes anyway, would take many to repay the load.
MIN_PAIRS = 2**25
#: The most units in the last place the compiled exp is from numpy's float32 exp (measured 3).
ULPS = 4

_lock = threading.Lock()
_loaded: list = []  # [Kernels or None], once tried


def choice() -> str:
    """The ATTNLAB_KERNEL setting, checked: "auto" (also when unset), "numpy" or "numba"."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in _CHOICES:
        raise AttnlabError(
            f"expected {ENV} to be one of auto, numpy, numba, but got {value!r}: it picks "
            "the blockwise kernels' tile exponential"
        )
    return value


class Kernels(NamedTuple):
    """The compiled tile passes, each in place on C-contiguous float32 tiles (rows, cols).

    exp(s, c): s ← exp(s · c), within ``ULPS`` of numpy's float32 exp.
    softmax_grad(dp, p, d): dp ← p ∘ (dp − d[:, None]), numpy's result bit for bit.
    """

    exp: Callable
    softmax_grad: Callable


def tile_kernels(dtype, pairs: int) -> Kernels | None:
    """The compiled tile passes for a call of ``pairs`` score pairs (lead · N · M) in
    ``dtype``, or None where numpy's passes are to run."""
    mode = choice()
    if mode == "numpy" or np.dtype(dtype) != np.float32:
        return None
    if mode == "auto" and (pairs < MIN_PAIRS or not natural_exp(dtype)):
        return None
    kernels = _load()
    if kernels is None and mode == "numba":
        raise AttnlabError(
            f"expected numba to be installed for {ENV}=numba, but it is not: "
            "pip install 'attnlab[fast]', or set it to auto or numpy"
        )
    return kernels


def warm() -> Kernels | None:
    """Load the compiled passes now, unless ATTNLAB_KERNEL=numpy; None where numba is not
    installed (or not wanted). Changes no result: only when the one-off load happens."""
    return None if choice() == "numpy" else _load()


def _load():
    """The compiled kernels, loaded on first use; None when numba cannot be imported."""
    with _lock:
        if not _loaded:
            try:
                nb = importlib.import_module("attnlab.core._fused_numba")  # imports numba
            except ImportError:
                _loaded.append(None)
            else:
                _loaded.append(Kernels(nb.exp_scaled, nb.softmax_grad))
    return _loaded[0]
