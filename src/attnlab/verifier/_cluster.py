"""verify on a Dask cluster: each task one sequence's rows for a range of key/value heads.

Shape legend: as ``_case.py``; a part is sequence b's rows (N_b queries, M_b keys) for key/value
heads kv0:kv1 and their query heads kv0·g : kv1·g.

Every number verify computes for a (sequence, key/value head) belongs to it alone: the exact
answer's rows, the plain baseline's (whose blocks are sized as in the whole case, so its float32
sums are the local run's, bit for bit), and the gradients dk, dv summed over the head's group.
A task takes such a part as its own small case, returns its exact and plain tensors, and the
parts are put back in place; the verdict is then computed here exactly as locally, so it
equals the local run's (the exact answer's rounding aside: attnlab's kernels may take another
path for fewer heads, within 1e-12 relative).

Fault handling is ``attnlab.distributed``'s: each part's arrays travel inside its task, held by
the scheduler, so a worker lost mid-run has its tasks rerun elsewhere; a cluster left with no
worker for 30 s is an error naming the scheduler; a part estimated past the smallest worker's
memory (its limit x Dask's pause fraction / its threads) is split further, or refused before
anything is scheduled.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.verifier._baseline import baseline
from attnlab.verifier._case import Case
from attnlab.verifier._truth import truth

__all__ = ["cluster_answers"]

_KEY_SIDE = ("k", "v", "dk", "dv")
# float64 copies of a part's arrays alive in a task: the inputs as float64, the exact and plain
# answers, and the baseline's float32 inputs; measured loosely, rounded up.
_COPIES = 6


def _part(case: Case, b: int, kv: tuple[int, int]) -> Case:
    """The case restricted to sequence b and key/value heads kv[0]:kv[1]."""
    g = case.group[1]
    hq = slice(kv[0] * g, kv[1] * g)
    (q0, q1), (k0, k1) = (case.cu_q[b], case.cu_q[b + 1]), (case.cu_k[b], case.cu_k[b + 1])
    arrays = {}
    for name, arr in case.arrays.items():
        heads, rows = (slice(*kv), (k0, k1)) if name in _KEY_SIDE else (hq, (q0, q1))
        arrays[name] = np.ascontiguousarray(arr[heads, rows[0] : rows[1]])
    opt = case.options
    opt = dataclasses.replace(
        opt,
        alibi_slopes=None if opt.alibi_slopes is None else opt.alibi_slopes[b : b + 1, hq],
        sinks=None if opt.sinks is None else opt.sinks[hq],
    )
    drop = case.dropout
    if drop is not None and drop.keep is not None:
        drop = dataclasses.replace(drop, keep=drop.keep[b : b + 1, hq])
    cu_q = np.array([0, q1 - q0], np.int64)
    cu_k = np.array([0, k1 - k0], np.int64)
    return Case(arrays, cu_q, cu_k, opt, case.layout, drop)


def run_part(part: Case, budget: float, plan: list, masked: bool, share: int):
    """One task: the part's exact answers and its plain ones per baseline dtype."""
    if masked:
        exact = baseline(part, budget, np.float64, stored=False, threads=1, share=share)
    else:
        exact = truth(part, budget)
    plain = {}
    for dtype, names in plan:
        plain.update(baseline(part, budget, dtype, names, threads=1, share=share))
    return exact, plain


def _bytes(case: Case, b: int, heads: int) -> int:
    """A part's estimated peak in a task: its arrays as float64 copies, with ``heads`` of the
    case's key/value heads."""
    rows_q = int(case.cu_q[b + 1] - case.cu_q[b])
    rows_k = int(case.cu_k[b + 1] - case.cu_k[b])
    total = 0
    for name, arr in case.arrays.items():
        rows = rows_k if name in _KEY_SIDE else rows_q
        per_head = arr.shape[0] // case.kv_heads
        total += per_head * heads * rows * math.prod(arr.shape[2:]) * 8
    return _COPIES * total


def _parts(case: Case, threads: int, budget: float, limit) -> list:
    """(b, (kv0, kv1)) for every part: at least two tasks per worker thread where the heads
    allow, and each part within ``limit`` (bytes, how) if the workers have one."""
    h_kv = case.kv_heads
    seqs = [b for b, _, _ in case.sequences()]
    per_seq = min(h_kv, max(1, math.ceil(2 * threads / max(1, len(seqs)))))
    if limit is not None:
        while (
            per_seq < h_kv
            and max(_bytes(case, b, math.ceil(h_kv / per_seq)) + budget for b in seqs) > limit[0]
        ):
            per_seq += 1
        need = max(_bytes(case, b, math.ceil(h_kv / per_seq)) + budget for b in seqs)
        if need > limit[0]:
            raise AttnlabError(
                f"client: one task of this case (a sequence's rows for one key/value head) "
                f"needs about {need / 2**20:.0f} MiB, past the smallest worker's "
                f"{limit[0] / 2**20:.0f} MiB ({limit[1]}); give the workers more memory"
            )
    cuts = np.linspace(0, h_kv, per_seq + 1).round().astype(int)
    spans = [(int(x), int(y)) for x, y in itertools.pairwise(cuts) if y > x]
    return [(b, kv) for b in seqs for kv in spans]


def cluster_answers(case: Case, budget: float, client, plan: list, masked: bool):
    """(exact, plain) for the whole case, computed part by part on ``client``'s workers."""
    from attnlab.distributed._graph import wait_for_workers
    from attnlab.distributed._plan import worker_budget

    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    threads = max(1, sum(w.get("nthreads", 1) for w in workers.values()))
    parts = _parts(case, threads, budget, worker_budget(client))
    share = case.kv_heads  # every part sizes its blocks as the whole case does
    futures = [
        client.submit(run_part, _part(case, b, kv), budget, plan, masked, share, pure=False)
        for b, kv in parts
    ]
    try:
        wait_for_workers(client, futures)
    except BaseException:
        client.cancel(futures)
        raise
    results = client.gather(futures)
    names = {name for _, names in plan for name in names}
    exact = {n: np.zeros(case.arrays[n].shape) for n in results[0][0]}
    plain = {n: np.zeros(case.arrays[n].shape) for n in names}
    g = case.group[1]
    for (b, kv), (part_exact, part_plain) in zip(parts, results, strict=True):
        for whole, got in ((exact, part_exact), (plain, part_plain)):
            for name, arr in got.items():
                key = name in _KEY_SIDE
                heads = slice(*kv) if key else slice(kv[0] * g, kv[1] * g)
                cu = case.cu_k if key else case.cu_q
                whole[name][heads, cu[b] : cu[b + 1]] = arr
    return exact, plain
