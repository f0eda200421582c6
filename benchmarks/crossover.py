"""Where blockwise overtakes dense: the measurement behind ``method="auto"``'s crossover.

Shape legend: B = 1, h heads, N queries = M keys, d = d_k = d_v.

For each (N, mask, dtype) both exact paths run on the same inputs, interleaved round by round
(the machine may be shared: a slow round slows both), forward (``attention``) and forward +
backward (``attention_backward``). Printed: CPU ms (time.process_time, all threads) and wall ms,
medians, and blockwise / dense CPU time (below 1: blockwise is faster). Run:

    PYTHONPATH=src python benchmarks/crossover.py [--n 128,256,512,1024,2048] [--heads 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import attnlab as al
from attnlab.kernels.blockwise import blas_info
from attnlab.core.masks import Causal


def _rounds(calls: dict, repeats: int) -> dict:
    for call in calls.values():
        call()  # warm: pools, buffers, pages
    times: dict = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            cpu, wall = time.process_time(), time.perf_counter()
            call()
            times[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    return {
        name: tuple(statistics.median(t[i] for t in runs) * 1e3 for i in (0, 1))
        for name, runs in times.items()
    }


def compare(n: int, heads: int, d: int, mask: str, dtype, backward: bool, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, heads, n, d)).astype(dtype) for _ in range(4))
    spec = Causal() if mask == "causal" else None
    # block_size / memory_budget keep each call on the general path with the method it names.
    options = {"memory_budget": 2**40}
    if backward:
        calls = {
            m: (lambda m=m: al.attention_backward(q, k, v, g, spec, method=m, **options))
            for m in ("dense", "blockwise")
        }
    else:
        calls = {
            m: (lambda m=m: al.attention(q, k, v, spec, method=m, **options))
            for m in ("dense", "blockwise")
        }
    return _rounds(calls, repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", default="128,256,512,1024,2048")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    print(f"BLAS: {blas_info()}")
    print(f"B = 1, h = {a.heads}, d = {a.d}; CPU ms / wall ms, medians of {a.repeats} interleaved")
    print("pass       dtype     mask       N    dense cpu/wall    blockwise cpu/wall   blk/dense")
    for backward in (False, True):
        for dtype in a.dtypes.split(","):
            for mask in ("none", "causal"):
                for n in (int(x) for x in a.n.split(",")):
                    r = compare(n, a.heads, a.d, mask, dtype, backward, a.repeats)
                    (dc, dw), (bc, bw) = r["dense"], r["blockwise"]
                    print(
                        f"{'fwd+bwd' if backward else 'forward':8s}  {dtype:8s}  {mask:7s}"
                        f" {n:6d}  {dc:8.1f} /{dw:8.1f}  {bc:9.1f} /{bw:8.1f}  {bc / dc:9.2f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
