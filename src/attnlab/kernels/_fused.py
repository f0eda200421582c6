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
numpy's), and so is the dense paths' softmax of a plain call (``softmax``: scale, boolean
mask, row max, shift and exp in two reads of each row; ``kernels/_small.py``, ``kernels/dense.py``,
which take it on the same calls, so the two still agree bit for bit). float64 always takes
numpy's passes (the exact pass, too, stays numpy's in every case).
"""

from __future__ import annotations

import importlib
import math
import os
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._tiles import natural_exp

__all__ = [
    "ENV",
    "MIN_PAIRS",
    "NO_BLOCKED",
    "NO_REACH",
    "ULPS",
    "Kernels",
    "choice",
    "loaded",
    "may_compile",
    "rows_softmax",
    "tile_kernels",
    "warm",
]

#: The environment variable that picks the tile exponential: numpy, numba or auto.
ENV = "ATTNLAB_KERNEL"
_CHOICES = ("auto", "numpy", "numba")
#: ``auto`` runs the compiled passes on calls of this many score pairs (lead · N · M) or more:
#: a tiny transformer's training batch, (B, h, N) = (64, 4, 32). They save 2-3 ns a pair
#: (the softmax of a causal (8, 8, 128, 64) batch: 4.5 ms of numpy passes against 1.6 ms),
#: about 0.5 ms a call here, so the one-off load (~1 s) is repaid within a few thousand such
#: calls: what a training loop makes. Smaller calls (the chapter's examples, the explorer's
#: figures) never load numba.
MIN_PAIRS = 2**18
#: The most units in the last place the compiled exp is from numpy's float32 exp (measured 3).
ULPS = 4

_F32 = np.dtype(np.float32)
# os.environ keeps its variables in a dict under encoded keys; where it does not, ``_env_set``
# asks os.environ itself.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(ENV) if hasattr(os.environ, "encodekey") else ENV
#: The kernels' "no mask" and "no reach" arguments (typed arrays, as numba needs).
NO_BLOCKED = np.zeros((0, 0), bool)
NO_REACH = np.zeros(0, np.int64)
NO_BLOCKED.flags.writeable = NO_REACH.flags.writeable = False  # as the kept mask tables

_lock = threading.Lock()
_loaded: list = []  # [Kernels or None], once tried


def choice() -> str:
    """The ATTNLAB_KERNEL setting, checked: "auto" (also when unset), "numpy" or "numba"."""
    raw = os.environ.get(ENV)
    if raw is None:  # the common case, on every float32 call of the dense paths: no parsing
        return "auto"
    value = raw.strip().lower() or "auto"
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
    softmax(s, a, b, scale, blocked, reach, top, total, given): rows [a, b) of a (P, R, C)
    score table scaled, masked, shifted by their max, exponentiated and summed, a row at a
    time (``_fused_numba.softmax_rows``; ``kernel_mask`` makes its ``blocked``).
    softmax_grad_rows(ds, p): ds ← p ∘ (ds − rowsum(p ∘ ds)), numpy's result bit for bit
    (the dense backward's steps 3 and 4 in one read of each row).
    """

    exp: Callable
    softmax_grad: Callable
    softmax: Callable
    softmax_grad_rows: Callable | None = None


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


def _env_set() -> bool:
    """Whether ATTNLAB_KERNEL is set at all: a look into the environment's own dict (50 ns),
    where ``ENV in os.environ`` encodes the key and raises and catches a KeyError (1 us of a
    60 us call for the worked example)."""
    if _ENV_DATA is None:
        return ENV in os.environ
    return _ENV_KEY in _ENV_DATA


def rows_softmax(dtype, lead: tuple[int, ...], n: int, m: int, blocked, biases):
    """The compiled softmax pass (``Kernels.softmax``) for a dense call, or None: float32 with
    no float mask part (``biases``) and a boolean one (``blocked``, broadcastable to
    (..., N, M), or None) the same for every batch element, on the calls ``tile_kernels``
    picks from the score table's lead axes ``lead``. ``kernels/_small.py`` and ``kernels/dense.py``
    ask it of the same call, so both paths round alike."""
    if biases or not may_compile(dtype, lead, n, m):
        return None
    if blocked is not None and any(size != 1 for size in blocked.shape[:-2]):
        return None  # the mask differs between batch elements
    kernels = tile_kernels(dtype, math.prod(lead) * n * m)
    return None if kernels is None else kernels.softmax


def may_compile(dtype, lead: tuple[int, ...], n: int, m: int) -> bool:
    """False where ``rows_softmax`` is sure to say None from the call's size and dtype alone
    (the common tiny call, with ATTNLAB_KERNEL unset): a caller can skip drawing the mask."""
    return dtype == _F32 and (math.prod(lead) * n * m >= MIN_PAIRS or _env_set())


def kernel_mask(blocked, n: int, m: int) -> np.ndarray:
    """``blocked`` (broadcastable to (N, M), lead axes all 1, or None) as the kernel takes it:
    a read-only C-contiguous (N, M) table, or ``NO_BLOCKED``. One array type for every call,
    so numba compiles (and caches) one version of the kernel."""
    if blocked is None:
        return NO_BLOCKED
    table = blocked.reshape(blocked.shape[-2:])
    if table.shape != (n, m) or not table.flags.c_contiguous or table.flags.writeable:
        table = np.ascontiguousarray(np.broadcast_to(table, (n, m)))
        table.flags.writeable = False
    return table


def warm() -> Kernels | None:
    """Load the compiled passes now, unless ATTNLAB_KERNEL=numpy; None where numba is not
    installed (or not wanted). Changes no result: only when the one-off load happens.

    Each kernel is also run once on a tiny table with the argument types the dense and
    blockwise paths pass: numba loads a kernel's machine code from its cache on that first
    call, ~60 MiB of resident memory the benchmarks' peak figures would otherwise count
    (dense at N = 2048, h = 8: 100 MiB peak against 36)."""
    kernels = None if choice() == "numpy" else _load()
    if kernels is not None:
        tile = np.zeros((1, 8), np.float32)
        kernels.exp(tile, 1.0)
        kernels.softmax_grad(tile, np.zeros_like(tile), np.zeros(1, np.float32))
        top = np.zeros((1, 1), np.float32)
        rows = tile.reshape(1, 1, 8)
        kernels.softmax(rows, 0, 1, 1.0, NO_BLOCKED, NO_REACH, top, np.zeros_like(top), False)
        if kernels.softmax_grad_rows is not None:
            kernels.softmax_grad_rows(tile, tile)
    return kernels


def loaded() -> Kernels | None:
    """The compiled passes if an earlier call has loaded them, else None: for a path that
    already holds one of them (``rows_softmax``'s pick) and wants the others."""
    return _loaded[0] if _loaded else None


def _load():
    """The compiled kernels, loaded on first use; None when numba cannot be imported."""
    with _lock:
        if not _loaded:
            try:
                nb = importlib.import_module("attnlab.kernels._fused_numba")  # imports numba
            except ImportError:
                _loaded.append(None)
            else:
                _loaded.append(
                    Kernels(nb.exp_scaled, nb.softmax_grad, nb.softmax_rows, nb.softmax_grad_rows)
                )
    return _loaded[0]
