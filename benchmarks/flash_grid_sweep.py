"""FlashAttention's float32 accuracy rule over a chosen slice of its test grid: a tool, not a test.

Shape legend: B batch, h heads (k and v: h_k), N queries, M keys, d = d_k = d_v.

The grid and the rule are those of ``tests/api/test_peer_grids.py`` (imported from there, so
the tool and the test cannot drift apart): for each case, dense and blockwise, the output and
(unless --no-grads) dq, dk, dv of attnlab in float32 are compared with the float64 torch
reference, allowed rtol times the error of the same torch formula run in float32 plus the
rule's atol. Every failing check is printed with its ratio (error - atol) / torch's error; the
last line counts cases, checks and failures. Run (keep it to slices; torch is pinned to one
thread, and the machine is shared):

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/flash_grid_sweep.py \
        --seqlens 113x203,128x217 --headdims 32,111 [--features causal,local] [--heads gqa]

--features keeps the cases whose switched-on features are all among those named ("none":
only the plain case); --max-scores drops cases with more than that many (N x M) scores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "api")]

import test_peer_grids as grid  # noqa: E402
import torch  # noqa: E402

FEATURES = ("causal", "local", "alibi", "softcap", "sinks")


def _pairs(text: str | None) -> list[tuple[int, int]] | None:
    if not text:
        return None
    return [tuple(int(n) for n in p.split("x")) for p in text.split(",")]


def _keep(case, seqlens, headdims, features, heads, max_scores) -> bool:
    sq, sk, d, feats, kind = case
    on = {f for f, flag in zip(FEATURES, feats, strict=True) if flag}
    return (
        (seqlens is None or (sq, sk) in seqlens)
        and (headdims is None or d in headdims)
        and (features is None or on <= features)
        and (heads is None or kind in heads)
        and sq * sk <= max_scores
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqlens", help="N x M pairs, e.g. 113x203,128x217 (default: all)")
    ap.add_argument("--headdims", help="e.g. 32,111 (default: all)")
    ap.add_argument("--features", help=f"subset of {','.join(FEATURES)} or 'none'")
    ap.add_argument("--heads", help="mha,mqa,gqa (default: all)")
    ap.add_argument("--methods", default="dense,blockwise")
    ap.add_argument("--max-scores", type=int, default=256 * 512)
    ap.add_argument("--no-grads", action="store_true", help="the output only")
    ap.add_argument("--all", action="store_true", help="print every check, not only failures")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    features = None
    if a.features:
        features = set() if a.features == "none" else set(a.features.split(","))
    heads = a.heads and a.heads.split(",")
    dims = a.headdims and [int(d) for d in a.headdims.split(",")]
    seqlens = _pairs(a.seqlens)
    cases = [c for c in grid.FA_CASES if _keep(c, seqlens, dims, features, heads, a.max_scores)]
    checks = failures = 0
    failed_cases = set()
    start = time.perf_counter()
    for case in cases:
        for method in a.methods.split(","):
            for name, ratio, ok in grid.flash_rule_checks(torch, case, method, not a.no_grads):
                checks += 1
                if not ok or a.all:
                    flag = "FAIL" if not ok else "ok  "
                    print(f"{flag} {case} {method:9s} {name:3s} ratio {ratio:.3f}", flush=True)
                if not ok:
                    failures += 1
                    failed_cases.add(case)
    took = time.perf_counter() - start
    print(
        f"{len(cases)} cases, {checks} checks, {failures} failing checks in "
        f"{len(failed_cases)} cases ({took:.0f} s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
