"""Exact attention by tiles: the online softmax, memory O(N), tiles skipped by masks.

Shape legend (the chapter's letters):
    ...  leading batch axes (for example (B, h)), broadcast between q, k and v
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width
    Bq   query rows per tile   Bk   keys per tile

The N x M table of §6.2 is never stored. Query rows are cut into blocks of Bq rows, keys into
blocks of Bk; for each query block the tiles (Bq x Bk) are visited left to right, keeping per row

    base   a reference point for the exponentials (the running maximum of FlashAttention),
    acc    the running sum of exp(score - base) * v_j,
    l      the running sum of exp(score - base), so the output is acc / l at the end.

Softmax does not change when every score of a row moves by the same amount, so any finite base
gives the same answer; the base only has to keep the exponentials inside the float range. The
textbook online softmax moves the base to the new row maximum at every tile and rescales acc and
l by exp(old - new). Here that exact step runs only when a tile's exponentials would leave a safe
range (its row sums, which the tile needs anyway, say so); otherwise a tile costs two matmuls,
one exponential and a row sum, and nothing else. This is the lazy rescaling of FlashAttention-4
(Dao et al., 2025), pushed one step further: on a CPU every pass over a tile costs about as much
as a matmul, so the row maximum itself is only computed when needed. Four tricks keep the
passes down:

1. the scale is folded into q once, and each tile takes whichever exponential numpy
   vectorises on the CPU at hand (``_tiles.natural_exp``): with AVX-512, float32 exp2 is twice
   as fast as exp, so q carries scale · log2(e) and exp(s · scale) = exp2(s · scale · log2 e);
   on AVX2 alone exp2 is a scalar loop at half exp's speed, so the fast pass uses exp (and,
   with the ``fast`` extra, a compiled, vectorised exp: kernels/_fused.py). The exact pass
   always works in log2 units (trick 4).
2. base starts at 0 for every row, so the first matmul needs no correction at all; once an
   exact step has moved a base, -base rides along as an extra column of q against a row of
   ones in kᵀ, so the matmul returns score - base directly.
3. The row sums l come from a matrix-vector product with a vector of ones: 16 us for a
   512 x 512 tile, where np.sum takes 60 and a column of ones in v slows the p v matmul by 35
   (OpenBLAS runs a width of 65 ~12% slower than 64).
4. base is kept an integer, so every rescaling is a multiplication by a power of two, exact in
   floating point (np.ldexp), and can never overflow on its own.

A blocked pair's exponential is multiplied by 0 (never computed as exp2(-inf), which numpy's
float32 exp2 handles on a slow path), and the base is always finite, so a row that allows no key
in a tile adds exactly 0 there and the NaN of exp(-inf - -inf) cannot arise. A row whose sum is 0
at the end allowed no key at all and raises FullyMaskedRowError, exactly as the dense path does.

The variants cost nothing when unused. A softcap folds scale / softcap into q instead, and
caps each tile's scores with a tanh and a multiply (the exact pass caps before subtracting
its base); a sink joins each row's divisor once, at the end, moving the integer base up to it
when it is larger (exact powers of two again); ALiBi and two-sided windows are masks. A row
whose mask allows exactly one key is given that key's value: the lazy base never makes its
weight exactly 1, and p · v / p can miss v by an ulp.

Tiles a mask blocks are skipped (``Mask.tile_state``); tiles it allows whole need no mask
arithmetic; a partial tile is cut into strips trimmed to the keys they need (causal: 5/8 of a
diagonal tile). Query blocks run on a thread pool: numpy's matmul and exp2 release the GIL.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from attnlab.core._validate import (
    Inputs,
    check_block_size,
    check_scores_in_bands,
    check_threads,
    may_overflow,
    raise_empty_rows,
    validate_later,
)
from attnlab.core.masks import tile_at as _pick
from attnlab.errors import AttnlabError
from attnlab.kernels._fused import tile_kernels
from attnlab.kernels._online import solve as _solve
from attnlab.kernels._precision import WIDE, narrow, widen
from attnlab.kernels._threads import blas_info, pool_map
from attnlab.kernels._tiles import (
    LOG2E,
    Step,
    TileMask,
    buffers,
    exp2_floor,
    lead_at,
    lone_keys,
    natural_exp,
    plan,
    work_items,
)

__all__ = [
    "DEFAULT_BLOCK_K",
    "DEFAULT_BLOCK_Q",
    "DEFAULT_MEMORY_BUDGET",
    "blas_info",
    "blockwise_attention",
    "dense_table_bytes",
]

#: The budget for the dense score table that ``attention(method="auto")`` allows before it
#: switches to the blockwise path: 256 MiB. Change it for the process by assigning to
#: ``attnlab.kernels.blockwise.DEFAULT_MEMORY_BUDGET``, or per call with ``memory_budget=``.
DEFAULT_MEMORY_BUDGET = 256 * 2**20

# Default tile: 512 query rows x 512 keys, from measurement on the project's 2-core Xeon
# (AVX-512, OpenBLAS SkylakeX kernel), float32, d = 64, N = 4096, one thread: 512 x 512, 1024 x 256,
# 768 x 384 and 640 x 640 all run at 100-102 GFLOP/s, 256 x 512 at 96 (a 256-row q kᵀ matmul
# with an inner width of 64 spends more of its time storing its output). Of the fastest, 512 x 512
# is the smallest: at N = 2048 it still gives each of two threads 16 query blocks of work, and
# it keeps a 1 MiB float32 tile (half the L2) in cache through its exp2 and two matmuls.
# A tile sized from each machine's L2 instead (half of it in float32: 256 x 256 on the 2-core
# AMD EPYC's 512 KiB) did not pay there: N = 4096, h = 8, CPU ms no mask / causal, medians of 5,
# forward 256 x 256 1183 / 718 against 512 x 512 1158 / 750 (noise); backward at N = 2048
# 1054 / 618 against 916 / 586. So 512 x 512 stays the default on both CPU families.
DEFAULT_BLOCK_Q = 512
DEFAULT_BLOCK_K = 512

_LN2 = math.log(2.0)
# Work items per thread: the forward renders each block's masks once for all its items, so
# it can cut finely, and the last item on each thread is short. Against 4, one call after the
# other, alternated (2-core AMD EPYC, h = 8, d = 64, medians of 12-30 calls): N = 2048
# 95.3 -> 93.7 ms (causal 74.0 -> 70.8), 4096 400 -> 389 (causal 238 -> 231), 8192 1386 -> 1363;
# with 4, a timeline of 4096 showed one thread idle for 50-110 ms at the end of a 480 ms call.
_ITEMS_PER_THREAD = 16


# -- the public entry point ---------------------------------------------------------------------
def blockwise_attention(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    return_weights=False,
    check_finite=True,
    block_size=None,
    threads=None,
):
    """Exact attention computed tile by tile, never holding the N x M table.

    Same arguments, masks, errors and results as ``attnlab.attention`` (float64 within 1e-12,
    float32 within 2e-5 of the dense path), plus:

    Args:
        block_size: None for the measured default (512, 512); an int for square tiles; or a
            pair (Bq, Bk) of query rows and keys per tile.
        threads: how many query blocks run at once (default: os.cpu_count()). numpy's matmul
            and exp2 release the GIL, so threads use every core. While more than one runs,
            OpenBLAS is pinned to one thread of its own (two BLAS threads under each of two
            pool threads oversubscribe the cores: at N = 2048, h = 8 measured 116 GFLOP/s
            against 162 with BLAS pinned, and 122 with one pool thread and BLAS on both cores).
        return_weights: refused: the weights are the N x M table this path exists to avoid.

    >>> import numpy as np
    >>> from attnlab.core.masks import Causal
    >>> q = [[3, -3], [1, 1]]; k = [[-3, 3], [1, 1]]; v = [[0, -1], [1, 2]]
    >>> blockwise_attention(q, k, v, mask=Causal(), block_size=1).round(3)
    array([[ 0.   , -1.   ],
           [ 0.804,  1.413]])
    """
    if return_weights:
        raise_no_weights()
    bq, bk = check_block_size(block_size, (DEFAULT_BLOCK_Q, DEFAULT_BLOCK_K))
    n_threads = check_threads(threads)
    x, finite = validate_later(q, k, v, mask, scale=scale, check_finite=check_finite)
    return run(x, bq, bk, n_threads, check=finite)


def raise_no_weights() -> None:
    raise AttnlabError(
        "expected return_weights=False with the blockwise method, but got return_weights=True: "
        "the weights are the N x M table that blockwise attention never stores. Use "
        "method='dense' (or trace_attention) to get them, on inputs small enough to hold it"
    )


def dense_table_bytes(lead: tuple[int, ...], n: int, m: int, dtype) -> int:
    """Bytes of the dense path's score table (..., N, M): what method='auto' weighs."""
    return math.prod(lead) * n * m * np.dtype(dtype).itemsize


def run(
    x: Inputs, bq=DEFAULT_BLOCK_Q, bk=DEFAULT_BLOCK_K, threads=1, check=None, lse=None,
    empty_rows="raise",
) -> np.ndarray:  # fmt: skip
    """Blockwise attention on validated inputs (``_validate.Inputs``); returns (..., N, d_v).
    ``lse``, an array (..., N), receives each row's log Σ exp(score · scale + mask) (natural
    log, the sink included), for the backward pass: (base + log2 l) · ln 2, base in the log2
    units of q · c. ``empty_rows="zero"``: a row that allows no key gets output 0 and lse -inf
    instead of FullyMaskedRowError (a chunk of keys in ``attnlab.distributed`` may allow a
    row none; ``attention(fully_masked="zero")``).

    ``check``, if given, is validate's finite-input check: it runs on the pool beside the first
    tiles (at N = 2048, 5% of the time was this check alone, before any tile could start) and
    its error, if any, is raised before any other.
    """
    if may_overflow(x):  # rare: huge q or k. Check first, in order, as the dense path does.
        if check is not None:
            check()
            check = None
        check_scores_in_bands(x)
    call = _Call(x, bk, lse)
    blocks = [(r0, min(x.n, r0 + bq)) for r0 in range(0, x.n, bq)]
    plans = {rows: plan(x.mask, rows, x.n, x.m, bk, len(x.lead)) for rows in blocks}
    items = work_items(blocks, plans, x.lead, threads, _ITEMS_PER_THREAD)
    call.pending = {rows: sum(it[0] == rows for it in items) for rows in blocks}
    call.plans = plans
    refused: list[Exception] = []

    def work(item) -> None:
        if item is None:  # the finite-input check
            try:
                check()
            except AttnlabError as exc:
                refused.append(exc)
        else:
            call.work(*item)

    with pool_map(threads, len(items) + (check is not None)) as each:
        list(each(work, ([None] if check is not None else []) + items))
    if refused:
        raise refused[0]
    if call.empty and empty_rows == "raise":
        raise_empty_rows(x, sorted(_table_rows(call.empty, x.table_lead())))
    if call.wide:  # float32 scores far from 0: see kernels/_precision.py
        wide = None if lse is None else np.empty(lse.shape, np.float64)
        out = run(widen(x), bq, bk, threads, lse=wide, empty_rows=empty_rows)
        if lse is not None:
            lse[...] = wide
        return narrow(out)
    return call.out


class _Call:
    """One call's constants, its output, and the work of one item (a query block for a group
    of lead elements): render the block's masked tiles once, solve, normalise, write."""

    def __init__(self, x: Inputs, bk: int, lse):
        self.x, self.bk, self.lse = x, bk, lse
        dtype = self.dtype = x.q.dtype
        finfo = np.finfo(dtype)
        self.tiny = dtype.type(2.0 ** -(finfo.maxexp // 2))  # f32: 2^-64 (see _solve)
        self.floor = exp2_floor(dtype)  # M of them are invisible beside a row sum >= 1/2
        if x.softcap is None:
            self.c, self.cap = dtype.type(x.scale * LOG2E), None
            natural = (dtype.type(x.scale), None)
        else:  # q · scale / softcap, tanh, then · softcap · log2 e (see _fast)
            self.c, self.cap = dtype.type(x.scale / x.softcap), dtype.type(x.softcap * LOG2E)
            natural = (self.c, dtype.type(x.softcap))
        # The fast pass's constants: natural units where numpy's exp is the vectorised one, or
        # where the compiled exp runs (kernels/_fused.py).
        fused = tile_kernels(dtype, math.prod(x.lead) * x.n * x.m)
        if fused is not None:
            self.fast = (*natural, True, fused.exp)
        else:
            self.fast = (*natural, True, None) if natural_exp(dtype) else None
        self.sinks = None if x.sinks is None else x.sinks * dtype.type(LOG2E)  # log2 units
        # A row with one allowed key returns that key's value exactly: the lazy base never
        # makes its weight 1, and p · v / p can be an ulp off. (Not with a sink: then the
        # value is shared with the sink; nor with non-finite inputs, which must show.)
        self.lone_keys = x.sinks is None and x.check_finite
        self.watch = dtype == np.float32 and x.check_finite  # for scores far from 0
        self.wide = False
        self.log2m = np.log2(x.m)
        self.v = np.ascontiguousarray(x.v)  # (..., M, d_v): BLAS reads tiles of it in place
        self.out = np.empty(x.lead + (x.n, x.v.shape[-1]), dtype)  # (..., N, d_v)
        self.keys = _Keys(x.k)
        self.lock = threading.Lock()
        self.empty: list[tuple[int, ...]] = []
        self.masks: dict = {}  # query block -> (its rendered tiles, its lone keys), shared
        self.plans: dict = {}  # query block -> its steps (_tiles.plan), set by run
        self.pending: dict = {}  # query block -> its items not yet done

    def render(self, rows) -> tuple[dict, tuple | None]:
        """The block's masked tiles, rendered once for every lead element, and its lone keys."""
        x, r0 = self.x, rows[0]
        tiles = {
            (a, c0): TileMask(x.mask, (r0 + a, r0 + b), (c0, c1), x.n, x.m, len(x.lead), self.dtype)
            for a, b, (c0, c1), masked in self.plans[rows]
            if masked
        }
        lone = lone_keys(self.plans[rows], tiles, rows[1] - r0) if self.lone_keys else None
        return tiles, lone

    def shared(self, rows) -> tuple[dict, tuple | None]:
        with self.lock:
            got = self.masks.get(rows)
        if got is None:
            got = self.render(rows)  # outside the lock; a race renders twice, harmlessly
            with self.lock:
                got = self.masks.setdefault(rows, got)
        return got

    def work(self, rows, group) -> None:
        with np.errstate(all="ignore"):  # overflow is detected and redone; errstate is per thread
            tiles, lone = self.shared(rows)
            bufs = buffers(self.dtype, self.v.shape[-1], self.bk)
            steps = [  # per step: the loop's arguments, looked up once for the whole group
                Step(slice(a, b), c0, c1, *bufs(b - a, c1 - c0), tiles[a, c0] if masked else None)
                for a, b, (c0, c1), masked in self.plans[rows]
            ]
            for idx in group:
                q_rows = _pick(self.x.q, idx)[rows[0] : rows[1]]  # (Bq, d_k)
                v = _pick(self.v, idx)  # (M, d_v)
                acc, l, base = _solve(
                    q_rows, self.keys(idx), v, steps, idx, self.c, self.floor, self.tiny, self.cap,
                    self.fast,
                )  # fmt: skip
                self.finish(idx, rows, acc, l, base, v, lone)
        with self.lock:
            self.pending[rows] -= 1
            if self.pending[rows] == 0:
                self.masks.pop(rows, None)

    def finish(self, idx, rows, acc, l, base, v, lone) -> None:
        """Normalise one block's rows (acc / l), after the sink joins the divisor."""
        hollow = np.flatnonzero(l == 0)  # rows that allowed no key at all
        if self.watch and not self.wide:
            self.wide = self._wide(l, base)
        if self.sinks is not None:
            acc, l, base = _add_sink(acc, l, base, lead_at(self.sinks, idx))
        if self.lse is not None:
            lse = (np.log2(l) + base) * _LN2  # (Bq,)
            lse[hollow] = -np.inf
            self.lse[idx][rows[0] : rows[1]] = lse
        if hollow.size:
            l[hollow] = 1.0  # their acc is 0: output 0, not 0/0
            with self.lock:
                self.empty.extend(idx + (rows[0] + int(i),) for i in hollow)
        out = self.out[idx][rows[0] : rows[1]]  # (Bq, d_v)
        np.divide(acc, l[:, None], out=out)
        if lone is not None:
            count, first = (_pick(a, idx)[:, 0] for a in lone)  # (Bq,), (Bq,)
            one = np.flatnonzero(count == 1)
            out[one] = v[first[one]]  # (ones, d_v): weight exactly 1

    def _wide(self, l, base) -> bool:
        """Whether some row's maximum surely passes ±WIDE: it lies in [lse - log M, lse]."""
        with np.errstate(divide="ignore"):
            lse2 = np.log2(l) + base  # (Bq,), log2 units; -inf for a row with no key
        lse2 = lse2[np.isfinite(lse2)]
        wide = WIDE * LOG2E
        return bool(lse2.size and (lse2.max() - self.log2m > wide or lse2.min() < -wide))


class _Keys:
    """kᵀ with a row of ones, (..., d_k + 1, M), contiguous: each lead element's keys are
    transposed by the first work item that needs them, so the copy runs on the pool,
    overlapped with other items, instead of before all of them."""

    def __init__(self, k: np.ndarray):
        self.k, dk, m = k, k.shape[-1], k.shape[-2]
        self.kT = np.empty(k.shape[:-2] + (dk + 1, m), k.dtype)  # (..., d_k + 1, M)
        self.ready = {i: threading.Lock() for i in np.ndindex(k.shape[:-2])}

    def __call__(self, idx) -> np.ndarray:
        k = self.k
        own = tuple(
            i if s != 1 else 0
            for i, s in zip(idx[len(idx) - (k.ndim - 2) :], k.shape[:-2], strict=True)
        )
        gate = self.ready.get(own)
        if gate is not None:
            with gate:  # whoever holds it is transposing these keys
                if own in self.ready:
                    self.kT[own][:-1] = k[own].T  # (d_k, M)
                    self.kT[own][-1] = 1.0  # meets q's -base column: matmul gives score - base
                    del self.ready[own]
        return self.kT[own]  # (d_k + 1, M)


def _add_sink(acc, l, base, sink):
    """Add exp2(sink - base) to each row's divisor l, moving the base up to the sink first
    where the sink is larger (by whole numbers: acc and l shrink by exact powers of two)."""
    top = np.maximum(np.broadcast_to(base, l.shape), np.ceil(sink))  # (Bq,) integers
    shrink = np.clip(top - base, 0, 2**30).astype(np.int64)  # (Bq,)
    acc = np.ldexp(acc, -shrink[:, None])  # (Bq, d_v)
    l = np.ldexp(l, -shrink) + np.exp2(sink - top)  # (Bq,)
    return acc, l, top


def _table_rows(rows, table_lead: tuple[int, ...]) -> set[tuple[int, ...]]:
    # Rows of the dense path's score table, whose leading axes may be fewer (only v batched).
    keep = len(table_lead)
    out = set()
    for r in rows:
        lead = r[:-1][len(r) - 1 - keep :] if keep else ()
        out.add(tuple(i if s != 1 else 0 for i, s in zip(lead, table_lead, strict=True)) + r[-1:])
    return out
