"""Random scores z = q·k with i.i.d. N(0, 1) entries (§6.3), drawn in bounded memory.

Shape legend: m draws in a chunk, d_k the query/key width, B coordinates per block.

Layout of the randomness: draws come in chunks of ``CHUNK_DRAWS`` pairs, and the coordinates of
a chunk in blocks of ``BLOCK``; block b of chunk j comes from ``rng_for(seed, tag, j, b)``.
Hence:
- at several widths the scores are nested: the d_k = 32 score of a pair is the sum of its
  first 32 products, and the d_k = 64 score continues the same sum (common random numbers).
  Each width on its own is an exact experiment on ``draws`` fresh pairs, and the draws are
  shared, so four widths cost what the widest one costs;
- a width's scores never depend on which other widths were asked for, on ``workers``, or on
  ``draws`` beyond their own count (the first 16,384 pairs are the same for any ``draws``);
- memory stays at a few MiB per worker thread, whatever ``draws`` is;
- a chunk is a pure function of (seed, tag, widths, chunk index), so it can be computed
  anywhere: inline, on a thread, or as a task on a Dask worker (``_chunks``). A lab reduces
  each chunk to a small partial where it is computed and folds the partials in chunk order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np

from attnlab.labs._chunks import in_order
from attnlab.labs._common import rng_for
from attnlab.labs._spec import Param

__all__ = [
    "BLOCK",
    "CHUNK_DRAWS",
    "WORKERS",
    "chunk_count",
    "default_workers",
    "score_chunks",
    "score_partials",
]

CHUNK_DRAWS = 1 << 14  # pairs per chunk
BLOCK = 16  # coordinates per block: one block of q and k is 2 x 16,384 x 16 float64 = 4 MiB


#: Declared by every lab that draws its scores in threads (``workers``): a CLI-only option.
WORKERS = Param("workers", "Threads for the draws (default: the usable cores, at most 8).",
                low=1, high=64, web=False, kind=int)  # fmt: skip


def default_workers() -> int:
    """Threads for chunked draws: numpy's samplers release the GIL, so threads use every core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _chunk(seed: int, tag: int, widths: tuple[int, ...], j: int, m: int) -> np.ndarray:
    """Scores of chunk j at each width: (len(widths), m). ``widths`` ascending."""
    out = np.empty((len(widths), m))
    total = np.zeros(m)  # (m,) the sum over the blocks done so far
    w = 0  # index into widths
    for b in range(-(-widths[-1] // BLOCK)):
        q, k = rng_for(seed, tag, j, b).standard_normal((2, m, BLOCK))  # each (m, B)
        products = q * k  # (m, B)
        # Widths that end inside this block take a partial sum of its first columns.
        while w < len(widths) and widths[w] <= (b + 1) * BLOCK:
            out[w] = total + products[:, : widths[w] - b * BLOCK].sum(axis=1)  # (m,)
            w += 1
        total += products.sum(axis=1)
    return out


def _reduced(
    seed: int,
    tag: int,
    ascending: tuple[int, ...],
    rows: list[int],
    draws: int,
    reduce: Callable,
    j: int,
) -> object:
    """reduce(scores of chunk j), the scores (len(rows), m) in the caller's width order."""
    m = min(CHUNK_DRAWS, draws - j * CHUNK_DRAWS)
    return reduce(_chunk(seed, tag, ascending, j, m)[rows])


def _same(z: np.ndarray) -> np.ndarray:
    return z


def chunk_count(draws: int) -> int:
    return -(-draws // CHUNK_DRAWS)


def score_partials(
    seed: int,
    tag: int,
    widths: tuple[int, ...],
    draws: int,
    reduce: Callable[[np.ndarray], object],
    *,
    workers: int | None = None,
    client=None,
) -> Iterator:
    """Yield reduce(z) for the scores z (len(widths), m) of each chunk, in chunk order.

    ``reduce`` runs where the chunk is drawn (a thread, or a Dask worker with ``client``), so
    only its small result travels; for a client it must be picklable (module-level, or a
    ``functools.partial`` of a module-level function). Row i of z holds the scores at
    ``widths[i]`` (any order, repeats allowed).
    """
    ascending = tuple(sorted(set(widths)))
    rows = [ascending.index(w) for w in widths]  # back to the caller's order
    fn = partial(_reduced, seed, tag, ascending, rows, draws, reduce)
    workers = default_workers() if workers is None else workers
    yield from in_order(fn, chunk_count(draws), workers=workers, client=client)


def score_chunks(
    seed: int, tag: int, widths: tuple[int, ...], draws: int, *, workers: int | None = None
) -> Iterator[np.ndarray]:
    """Yield raw scores of ``draws`` pairs, chunk by chunk: arrays (len(widths), m), in order."""
    yield from score_partials(seed, tag, widths, draws, _same, workers=workers)
