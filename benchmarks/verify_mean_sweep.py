"""The mean rule's calibration: verify every correct torch kernel of the sweep, print the
largest mean ratio per tensor, and every rejection (there should be none): a tool, not a test.

Shape legend: h query heads, h_kv key/value heads, N queries, M keys, d head width.

The sweep and the kernels are those of ``tests/verify_kernels.py`` (imported from there, so
the tool and the sampled test, tests/verifier/test_verify_mean_rule.py, cannot drift apart):
SDPA in float32 on float16 or bfloat16 inputs, each output rounded once, causal or not, MHA,
GQA and MQA, N and M from 1 to 4,096, d from 32 to 256, with the backward while N x M is at
most 2^16. Then the planted bfloat16 P . V accumulation at 256 keys, which must fail. Run:

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/verify_mean_sweep.py [--max-pairs P]
        [--every K]

--max-pairs skips cases with more than P (h x N x M) score pairs; --every K runs every K-th
case (a slice of the whole, spread over it).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests")]

import torch  # noqa: E402

import verify_kernels as vk  # noqa: E402
from attnlab.verifier import verify  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-pairs", type=int, default=None, help="skip h x N x M past this")
    ap.add_argument("--every", type=int, default=1, help="run every K-th case")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    worst = collections.defaultdict(lambda: (0.0, None))  # tensor -> (mean ratio, case)
    rejected, done, start = [], 0, time.perf_counter()
    for i, case in enumerate(vk.sweep()):
        _, causal, heads, n, m, _ = case
        if i % args.every or (args.max_pairs and heads[0] * n * m > args.max_pairs):
            continue
        report = verify(**vk.sweep_case(torch, *case), causal=causal, layout="bhsd")
        done += 1
        for name, t in report.tensors.items():
            ratio = t.mean_abs_error / t.mean_tolerance  # past 1 is a rejection
            if ratio > worst[name][0]:
                worst[name] = (ratio, case)
        if not report.passed:
            rejected.append((case, report.summary()))
            print("REJECTED", case, report.summary(), flush=True)
    print(f"{done} correct kernels in {time.perf_counter() - start:.0f} s, "
          f"{len(rejected)} rejected")  # fmt: skip
    for name, (ratio, case) in worst.items():
        print(f"  {name}: largest mean error / mean tolerance {ratio:.3f} at {case}")
    x = vk.inputs(torch, torch.bfloat16, h=8, h_kv=8, n=256, m=256, d=64, seed=1)
    t = verify(**vk.bf16_pv_accumulation(torch, x), layout="bhsd").tensors["out"]
    print(f"planted bfloat16 P.V accumulation, 256 keys: mean ratio {t.mean_ratio:.2f}, "
          f"max ratio {t.ratio:.2f}, {'rejected' if not t.passed else 'PASSED (wrong)'}")  # fmt: skip
    return 1 if rejected or t.passed else 0


if __name__ == "__main__":
    raise SystemExit(main())
