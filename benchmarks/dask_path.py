"""The Dask path of ``attnlab.distributed.attention`` alone, without its arithmetic.

Usage: python benchmarks/dask_path.py N ROUNDS SCHEDULER_ADDRESS
(start one with ``dask scheduler`` and ``dask worker ADDRESS --nworkers 2 --nthreads 1``).

Each worker's kernel is replaced by one that only allocates its (lse, output), so what is timed
is moving q, k, v (h = 8, d = 64, float32) to the workers, scheduling, merging and gathering:
the direct road (``distributed/_placed.py``: chunks scattered to the workers that read them)
against the graph that carries the chunks (``distributed/_graph.py``), interleaved round by
round, medians printed. Wall-clock seconds: a shared machine's load moves both alike.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from distributed import Client

from attnlab.distributed import _placed, attention


def _no_arithmetic(q, k, v, mask, scale, block=512):
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n = q.shape[-2]
    return np.zeros(lead + (n,), q.dtype), np.zeros(lead + (n, v.shape[-1]), q.dtype)


def _patch_workers():
    from attnlab.distributed import _partial

    _partial.partial = _no_arithmetic


def main(n: int, rounds: int, address: str) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((8, n, 64), dtype=np.float32) for _ in range(3))
    direct = _placed.run
    roads = {"direct (scattered)": direct, "graph (embedded)": lambda *args: None}
    with Client(address) as client:
        client.run(_patch_workers)
        attention(q, k, v, client=client)  # warm-up
        seconds: dict[str, list[float]] = {name: [] for name in roads}
        for _ in range(rounds):
            for name, road in roads.items():
                _placed.run = road
                start = time.perf_counter()
                attention(q, k, v, client=client)
                seconds[name].append(time.perf_counter() - start)
        _placed.run = direct
    for name, times in seconds.items():
        print(f"N = {n:,}: {name:<20} median {sorted(times)[len(times) // 2]:.2f} s of {rounds}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
