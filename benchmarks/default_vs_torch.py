"""The default call beside torch, before and after a change: CPU time, fresh processes, interleaved.

Shape legend: B = 1, h = 8 heads, N queries = M keys, d = 64, float32.

Times ``al.attention(q, k, v, mask)`` ("fwd") or a training step, ``attention`` then
``attention_backward`` ("step"; "step_lse": the forward's ``return_lse=True`` handed to the
backward as ``lse=``, as a training loop keeps it), for each attnlab source tree given, beside
torch's SDPA (forward, or forward + ``.backward()``). Every measurement is a fresh process (one warm call,
the best of 2 timed calls); the implementations take turns, round by round, and each row prints
medians of CPU time (all threads: a shared machine inflates wall time, not CPU time) and wall
time. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are dropped, so OpenBLAS picks its native kernel.

    python benchmarks/default_vs_torch.py --tree before=/tmp/old/src --tree after=src \\
        --n 2048,4096 --kinds fwd,step --rounds 3

A tree may name the tile passes it runs with (ATTNLAB_KERNEL, kernels/_fused.py), so one source
tree compares numpy's passes with the compiled ones: ``--tree numpy=src@numpy --tree
numba=src@numba``. The warm call loads numba, so the timed calls see only its steady state.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def one(impl: str, n: int, mask: str, kind: str) -> tuple[float, float]:
    """(CPU s, wall s) of the best of 2 calls, in this process."""
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, 8, n, 64), dtype=np.float32) for _ in range(4))
    causal = mask == "causal"
    if impl == "torch":
        import torch  # an oracle for the benchmark only
        import torch.nn.functional as F

        train = kind != "fwd"  # both steps are one forward and one backward on torch's side
        tq, tk, tv = (torch.from_numpy(a).requires_grad_(train) for a in (q, k, v))

        def call():
            if kind == "fwd":
                with torch.inference_mode():
                    return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
            for t in (tq, tk, tv):
                t.grad = None
            F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(
                torch.from_numpy(g)
            )
    else:
        import attnlab as al
        from attnlab.core.masks import Causal

        spec = Causal() if causal else None

        def call():
            if kind == "step_lse":  # the forward's lse kept: the backward needs no row stats
                _, lse = al.attention(q, k, v, spec, return_lse=True)
                al.attention_backward(q, k, v, g, spec, lse=lse)
                return
            al.attention(q, k, v, spec)
            if kind == "step":
                al.attention_backward(q, k, v, g, spec)

    call()
    runs = []
    for _ in range(2):
        cpu, wall = time.process_time(), time.perf_counter()
        call()
        runs.append((time.process_time() - cpu, time.perf_counter() - wall))
    return min(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", action="append", default=[], help="name=path of an attnlab src")
    p.add_argument("--n", default="2048,4096")
    p.add_argument("--kinds", default="fwd,step")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # impl n mask kind, in a child
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.one[2], a.one[3])))
        return
    trees = dict(t.split("=", 1) for t in a.tree) or {"attnlab": "src"}
    kernels = {name: path.partition("@")[2] for name, path in trees.items()}
    trees = {name: path.partition("@")[0] for name, path in trees.items()}
    impls = {**{name: os.path.abspath(path) for name, path in trees.items()}, "torch": None}
    drop = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    for kind in a.kinds.split(","):
        for n in (int(x) for x in a.n.split(",")):
            for mask in ("none", "causal"):
                runs: dict = {name: [] for name in impls}
                for _ in range(a.rounds):
                    for name, path in impls.items():
                        src = path or next(iter(impls.values()))  # torch: any tree imports
                        child = [sys.executable, __file__, "--one", name if path is None else "a"]
                        proc = subprocess.run(
                            [*child, str(n), mask, kind],
                            env={
                                **env,
                                "PYTHONPATH": src,
                                "ATTNLAB_KERNEL": kernels.get(name) or "auto",
                            },
                            capture_output=True,
                            text=True,
                            check=True,
                        )
                        runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                med = {
                    name: [statistics.median(r[i] for r in rs) * 1e3 for i in (0, 1)]
                    for name, rs in runs.items()
                }
                ratios = "  ".join(
                    f"{name} {med['torch'][0] / med[name][0]:.2f}x" for name in trees
                )
                cells = "  ".join(f"{name} {c:7.0f} / {w:7.0f}" for name, (c, w) in med.items())
                print(f"{kind:4s} N={n:5d} {mask:6s}  {cells}  | x torch (CPU): {ratios}")


if __name__ == "__main__":
    main()
