"""CPU time of one attention training step, with and without the forward's log-sum-exp.

Usage: python benchmarks/train_step.py SRC B,h,N,d REPS
(SRC: the ``src`` folder of the attnlab to time, put first on the path.)

plain: ``attention`` then ``attention_backward``; lse: ``attention(..., return_lse=True)`` then
``attention_backward(..., lse=lse)``; float32, causal; 7 interleaved blocks of REPS steps each,
the median block's CPU time per step (CPU time, since the machine is shared).
"""

from __future__ import annotations

import sys
import time

import numpy as np

sys.path.insert(0, sys.argv[1])

import attnlab as al
from attnlab.masks import Causal


def main(shape: tuple[int, ...], reps: int) -> None:
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal(shape, dtype=np.float32) for _ in range(4))
    mask = Causal()

    def plain():
        al.attention(q, k, v, mask)
        al.attention_backward(q, k, v, g, mask)

    def with_lse():
        _, lse = al.attention(q, k, v, mask, return_lse=True)
        al.attention_backward(q, k, v, g, mask, lse=lse)

    calls = {"plain": plain, "lse": with_lse}
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(7):
        for name, call in calls.items():
            start = time.process_time()
            for _ in range(reps):
                call()
            seconds[name].append((time.process_time() - start) / reps)
    medians = {name: f"{sorted(t)[3] * 1e6:,.0f} µs" for name, t in seconds.items()}
    print(al.__file__, shape, medians)


if __name__ == "__main__":
    main(tuple(int(s) for s in sys.argv[2].split(",")), int(sys.argv[3]))
