"""Where a blockwise pass spends its time: each phase of one tile, alone, at the tile shape.

Shape legend: Bq query rows per tile, Bk keys per tile, d = d_k = d_v, M keys in all.

For each tile shape, one query block of Bq rows is swept over M keys tile by tile, one phase
at a time, on one thread with OpenBLAS pinned to one thread (as every pool worker runs):

    qk      np.matmul(q, kᵀ[:, tile], out=s)       the first GEMM, (Bq, d) x (d, Bk)
    exp2    np.exp2(s, out=s)                      the only transcendental pass, in log2 units
    exp     np.exp(s, out=s)                       the same pass in natural units
    fused   the compiled exp (kernels/_fused.py, numba), in place, natural units
    rowsum  np.matmul(s, ones, out=l)              Σ p as a matrix-vector product
    pv      np.matmul(s, v[tile], out=r)           the second GEMM, (Bq, Bk) x (Bk, d)
    acc     acc += r                               the running sums
    max     s.max(axis=1)                          what the exact pass adds (not the fast one)
    whole   attnlab's own fast loop (kernels/_online.py), every phase together, with the
            exponential numpy vectorises on this CPU (kernels/_tiles.py, natural_exp)
    wholeF  the same loop with the compiled exp (needs numba: the ``fast`` extra)

CPU time (time.thread_time), median of ``--repeats`` rounds, each phase once a round; GFLOP/s for the two GEMMs counts
2·Bq·Bk·d each; "x GEMM" compares the whole loop's useful rate (4·Bq·M·d) with a plain
2048³ matmul on one thread. Run:

    PYTHONPATH=src python benchmarks/profile_blockwise.py [--m 4096] [--tiles 512x512,256x512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from attnlab.kernels._online import _fast
from attnlab.kernels._threads import blas_info, one_blas_thread
from attnlab.kernels._tiles import Step, buffers, natural_exp


def _cpu(fn, repeats: int) -> float:
    fn()  # warm: pages, caches
    runs = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        runs.append(time.thread_time() - start)
    return statistics.median(runs)


def profile(bq: int, bk: int, m: int, d: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    from attnlab.kernels._fused_numba import exp_scaled as fused  # the fast extra

    q = rng.standard_normal((bq, d), dtype=np.float32) * np.float32(0.125 * 1.4427)  # (Bq, d)
    kT = np.ascontiguousarray(rng.standard_normal((m, d), dtype=np.float32).T)  # (d, M)
    v = rng.standard_normal((m, d), dtype=np.float32)  # (M, d)
    s = np.empty((bq, bk), np.float32)  # (Bq, Bk)
    rl = np.empty((bq, d + 1), np.float32)  # (Bq, d + 1)
    r, l = rl[:, :d], rl[:, d]
    ones = np.ones(bk, np.float32)
    acc = np.zeros_like(rl)
    cols = [(c0, min(m, c0 + bk)) for c0 in range(0, m, bk)]
    np.matmul(q, kT[:, :bk], out=s)  # scores in log2 units: a few at most, as in attention
    t0 = s.copy()  # (Bq, Bk): exponentiated afresh each time
    np.exp2(t0, out=s)

    def sweep(one):
        return lambda: [one(c0, c1) for c0, c1 in cols]

    phases = {
        "qk": sweep(lambda c0, c1: np.matmul(q, kT[:, c0:c1], out=s[:, : c1 - c0])),
        "exp2": sweep(lambda c0, c1: np.exp2(t0, out=s)),
        "exp": sweep(lambda c0, c1: np.exp(t0, out=s)),
        "fused": sweep(lambda c0, c1: (np.copyto(s, t0), fused(s, 1.0))),
        "rowsum": sweep(lambda c0, c1: np.matmul(s, ones, out=l)),
        "pv": sweep(lambda c0, c1: np.matmul(s, v[c0:c1], out=r)),
        "acc": sweep(lambda c0, c1: np.add(acc, rl, out=acc)),
        "max": sweep(lambda c0, c1: s.max(axis=1)),
    }
    kT1 = np.vstack([kT, np.ones((1, m), np.float32)])  # (d + 1, M): the kernel's layout
    bufs = buffers(np.float32, d, bk)
    steps = [Step(slice(0, bq), c0, c1, *bufs(bq, c1 - c0), None) for c0, c1 in cols]
    natural = natural_exp(np.float32)  # the exponential the kernel uses on this CPU
    phases["whole"] = lambda: _fast(q, kT1, v, steps, (), np.float32(1.0), None, natural)
    phases["wholeF"] = lambda: _fast(q, kT1, v, steps, (), np.float32(1.0), None, True, fused)
    with one_blas_thread():
        out = _interleaved(phases, repeats)
        gemm = _gemm_rate(repeats)
    flops = 2 * bq * m * d
    out["qk_gflops"] = flops / out["qk"] / 1e9
    out["pv_gflops"] = flops / out["pv"] / 1e9
    out["whole_gflops"] = 2 * flops / out["whole"] / 1e9
    out["wholeF_gflops"] = 2 * flops / out["wholeF"] / 1e9
    out["gemm_gflops"] = gemm
    return out


def _interleaved(phases: dict, repeats: int) -> dict:
    """Median CPU time of each phase over ``repeats`` rounds, every phase once per round, so a
    busy spell on a shared machine lands on all of them alike."""
    for fn in phases.values():
        fn()  # warm: pages, caches
    runs: dict = {name: [] for name in phases}
    for _ in range(repeats):
        for name, fn in phases.items():
            start = time.thread_time()
            fn()
            runs[name].append(time.thread_time() - start)
    return {name: statistics.median(r) for name, r in runs.items()}


_GEMM: list[float] = []


def _gemm_rate(repeats: int) -> float:
    if not _GEMM:
        a = np.random.default_rng(1).standard_normal((2048, 2048), dtype=np.float32)
        o = np.empty_like(a)
        _GEMM.append(2 * 2048**3 / _cpu(lambda: np.matmul(a, a, out=o), max(3, repeats // 2)) / 1e9)
    return _GEMM[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--tiles", default="128x512,256x256,256x512,512x256,512x512,512x1024,1024x512")
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args()
    print(f"BLAS: {blas_info()}")
    exp = "exp" if natural_exp(np.float32) else "exp2"
    print(f"M = {a.m}, d = {a.d}, float32, one thread, CPU ms per query block (median)")
    print(f"whole: the kernel's fast pass, with {exp} (the one numpy vectorises here)")
    head = (
        "  Bq x Bk       qk   exp2    exp  fused rowsum     pv    acc    max  whole wholeF"
        "  (sum)  qk GF  pv GF  whole GF  x GEMM  wholeF GF  x GEMM"
    )
    print(head)
    for tile in a.tiles.split(","):
        bq, bk = (int(t) for t in tile.split("x"))
        r = profile(bq, bk, a.m, a.d, a.repeats)
        parts = sum(r[k] for k in ("qk", "exp2", "rowsum", "pv", "acc"))
        names = ("qk", "exp2", "exp", "fused", "rowsum", "pv", "acc", "max", "whole", "wholeF")
        ms = [r[k] * 1e3 for k in names]
        print(
            f"{bq:5d} x {bk:<5d}" + "".join(f"{t:7.2f}" for t in ms) + f" {parts * 1e3:6.2f}"
            f" {r['qk_gflops']:6.0f} {r['pv_gflops']:6.0f} {r['whole_gflops']:9.0f}"
            f" {r['whole_gflops'] / r['gemm_gflops']:7.2f}"
            f" {r['wholeF_gflops']:10.0f} {r['wholeF_gflops'] / r['gemm_gflops']:7.2f}"
        )
    print(f"one-thread GEMM (2048^3): {_GEMM[0]:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
