"""Where a whole blockwise forward spends its time around its tiles, one thread, beside torch.

Shape legend: B = 1, h heads, N queries = M keys, d = d_k = d_v, float32.

``attention(q, k, v, mask, method="blockwise", threads=1)`` with OpenBLAS pinned to one thread
(as each pool worker runs), its wall time split by wrapping the kernel's parts:

    tiles    ``_online._fast``: the fast pass's two products, exponential and sums, every tile
    check    ``_online.solve`` less ``_fast``: the test that sends a block to the exact pass
    render   ``_Call.render``: each query block's mask tiles and lone keys, drawn once
    finish   ``_Call.finish``: each block's rows divided by their sums, written to the output
    keys     ``_Keys``: the keys transposed, once per head
    rest     the call less all of the above: validation, the finite check, planning, the pool

The last column is torch's SDPA on the same inputs, CPU time of all its threads: the work
torch does for the call, to set beside attnlab's one-thread time.
The wrappers cost about a microsecond a call, against milliseconds for each part. Run:

    PYTHONPATH=src python benchmarks/profile_call.py [--n 2048,4096] [--heads 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import attnlab as al
from attnlab.kernels import _fused, _online, blockwise
from attnlab.kernels._threads import blas_info, one_blas_thread
from attnlab.core.masks import Causal

PARTS = ("tiles", "check", "render", "finish", "keys")
_spent: dict = {}  # part -> seconds in the call being timed


def _wrapped(owner, name: str, part: str, spent: dict) -> None:
    inner = getattr(owner, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[part] = spent.get(part, 0.0) + time.perf_counter() - start

    setattr(owner, name, timed)


def instrument() -> None:
    """Wrap the kernel's parts, once per process, to add their time to ``_spent``."""
    _wrapped(_online, "_fast", "tiles", _spent)
    _wrapped(blockwise, "_solve", "solve", _spent)
    _wrapped(blockwise._Call, "render", "render", _spent)
    _wrapped(blockwise._Call, "finish", "finish", _spent)
    _wrapped(blockwise._Keys, "__call__", "keys", _spent)


def split(q, k, v, mask, rounds: int) -> dict:
    """Median seconds per call of each part (see the module docstring) and of the whole."""
    spent, rows = _spent, []
    with one_blas_thread():
        al.attention(q, k, v, mask, method="blockwise", threads=1)  # warm: caches, numba
        for _ in range(rounds):
            spent.clear()
            start = time.perf_counter()
            al.attention(q, k, v, mask, method="blockwise", threads=1)
            whole = time.perf_counter() - start
            row = dict(spent, whole=whole)
            row["check"] = row.pop("solve") - row["tiles"]
            row["rest"] = whole - sum(row[p] for p in PARTS)
            rows.append(row)
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def torch_cpu(q, k, v, causal: bool, rounds: int) -> float | None:
    """Median CPU seconds of torch's SDPA forward on the same inputs, or None without torch."""
    try:
        import torch  # an oracle for the benchmark only
        import torch.nn.functional as F
    except ImportError:
        return None
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    times = []
    with torch.inference_mode():
        for i in range(rounds + 1):
            start = time.process_time()
            F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            if i:  # the first call warms torch's own caches
                times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", default="2048,4096")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    _fused.warm()
    instrument()
    info = blas_info()
    print(f"one thread, OpenBLAS {info.get('version')} ({info.get('kernel')} kernel), float32")
    print(f"h = {args.heads}, d = {args.d}; ms per call, median of {args.rounds}")
    head = "     N  mask    " + "".join(f"{p:>8}" for p in (*PARTS, "rest", "whole"))
    print(head + "  torch CPU")
    rng = np.random.default_rng(0)
    for n in (int(s) for s in args.n.split(",")):
        shape = (1, args.heads, n, args.d)
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        for name, mask in (("none", None), ("causal", Causal())):
            got = split(q, k, v, mask, args.rounds)
            theirs = torch_cpu(q, k, v, mask is not None, args.rounds)
            cells = "".join(f"{1e3 * got[p]:8.1f}" for p in (*PARTS, "rest", "whole"))
            tail = "" if theirs is None else f"{1e3 * theirs:11.1f}"
            print(f"{n:6d}  {name:7s} {cells}{tail}")


if __name__ == "__main__":
    main()
