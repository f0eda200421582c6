"""Lab: time multi-head attention across N and set the clock beside the cost model (§6.6).

The model (attnlab.cost) counts 4·N·d_model² multiply-adds in the projections and 2·N²·d_model
in the attention core (Q Kᵀ and A V), so the core's share is N / (N + 2·d_model) and crosses
one half at N = 2·d_model. This lab times the two parts separately and reports where the
measured share crosses one half. The core also runs the softmax, which the model leaves out;
on a CPU its exp is far dearer than a multiply-add, so the measured crossover comes earlier.

Beside it, at each N, the run's h heads of width d_k = d_model/h against one head of width
d_model, on the same numbers (the heads' queries, keys and values laid side by side): the
model counts the same N² multiply-adds for both, h·2·N²·d_k = 2·N²·d_model (§6.6: splitting
into heads costs nothing extra), and the lab times both cores and both pairs of products. The
h heads softmax h times as many score entries (h·N² against N²), which the model leaves out.

Shape legend: N tokens, d_model model width, h heads, d_k = d_v = d_model / h.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from attnlab import MultiHeadAttention, attention
from attnlab.cost import breakdown, crossover_length, score_memory_bytes
from attnlab.errors import AttnlabError
from attnlab.labs._common import COST, LabResult, Progress, rng_for, row_table
from attnlab.labs._spec import SEED, Estimate, LabSpec, Line, Param, RowPlot

__all__ = ["SPEC", "CostRow", "CostTimingResult", "cost_timing"]

MAX_SCORE_BYTES = 2 << 30  # refuse lengths whose (h, N, N) score table passes 2 GiB


@dataclass(frozen=True)
class CostRow:
    """One length N: seconds per part (fastest of ``repeats`` runs) and the two shares."""

    n: int
    projection_s: float  # Q, K, V projections and W^O
    core_s: float  # attention itself: scores, softmax, weighted sum
    matmul_s: float  # the core's two products Q Kᵀ and A V alone: what the model counts
    total_s: float  # attnlab.multi_head_attention end to end
    measured_share: float  # core_s / (projection_s + core_s)
    matmul_share: float  # matmul_s / (projection_s + matmul_s)
    model_share: float  # attnlab.cost: 2N²d / (4Nd² + 2N²d)
    max_abs_diff: float  # projections + core against multi_head_attention: they agree
    one_head_core_s: float  # the core with one head of width d_model on the same numbers
    one_head_matmul_s: float  # its two products alone
    heads_core_ratio: float  # core_s / one_head_core_s: h heads against one, measured
    heads_matmul_ratio: float  # matmul_s / one_head_matmul_s
    heads_madds: int  # cost model: h · 2N²d_k, the h heads' Q Kᵀ and A V
    one_head_madds: int  # cost model: 2N²d_model, one head's; equal to heads_madds

    @property
    def heads_madds_ratio(self) -> float:
        """The cost model's h heads against one: 1 at every N (plotted, not stored)."""
        return self.heads_madds / self.one_head_madds


@dataclass(frozen=True, repr=False)
class CostTimingResult(LabResult):
    """Timings per N with the cost model beside them, and both crossovers."""

    settings: dict  # d_model, heads, repeats, dtype, seed: ``r.heads`` reads one
    model_crossover: int  # 2·d_model
    measured_crossover: float | None  # N where the measured share crosses 1/2 (interpolated)
    matmul_crossover: float | None  # the same for the matmul share
    rows: tuple[CostRow, ...]
    lab = "cost"

    def table(self) -> tuple[list[str], list[list]]:
        # h heads against one (the one head's own seconds are in the JSON, as_dict()).
        return row_table(self.rows, SPEC.columns)

    def summary(self) -> list[str]:
        return [
            f"The model puts the crossover at N = 2·d_model = {self.model_crossover}.",
            f"Timed, the attention core (with its softmax) overtakes the projections "
            f"{self._where(self.measured_crossover)}; its two products alone "
            f"{self._where(self.matmul_crossover)}.",
            self._softmax(),
            self._heads(),
        ]

    def _softmax(self) -> str:
        """What the softmax did to the crossover in this run, never assumed: the core with its
        softmax against its two products alone, and where neither crosses, what the shares say."""
        with_exp, without = self.measured_crossover, self.matmul_crossover
        model = "The model counts multiply-adds and leaves the softmax out"
        if with_exp is not None and without is not None:
            if with_exp < without:
                return (
                    f"{model}; on this CPU its exp is dear and moves the timed crossover earlier."
                )
            return f"{model}; here it did not move the timed crossover earlier."
        if with_exp is None and self.rows[0].measured_share >= 0.5:
            return f"{model}; timed with it, the core already takes half at the shortest N."
        if with_exp is None:
            return f"{model}; timed with it, the core never reaches half, so no crossover moved."
        return f"{model}; with it the core reaches half, without it the products never do."

    def _heads(self) -> str:
        last, d_k = self.rows[-1], self.d_model // self.heads
        return (
            f"{self.heads} heads of width {d_k} against one head of width {self.d_model}: the "
            f"model counts {last.heads_madds:,} multiply-adds for both at N = {last.n}; timed, "
            f"the heads' core takes {last.heads_core_ratio:.2f} times one head's "
            f"({last.heads_matmul_ratio:.2f} times for the two products alone), the extra being "
            f"the softmax over {self.heads} times as many scores and the smaller products."
        )

    def _where(self, n: float | None) -> str:
        if n is None:
            return f"nowhere between N = {self.rows[0].n} and N = {self.rows[-1].n}"
        return f"near N = {n:.0f}"


def _crossover(rows: list[CostRow], share: str) -> float | None:
    """Where ``share`` first crosses 1/2 going up, interpolated linearly in log N."""
    for a, b in itertools.pairwise(rows):
        sa, sb = getattr(a, share), getattr(b, share)
        if sa < 0.5 <= sb:
            t = (0.5 - sa) / (sb - sa)
            return float(2 ** (math.log2(a.n) + t * (math.log2(b.n) - math.log2(a.n))))
    return None


def _fastest(fn, repeats: int) -> tuple[float, object]:
    """Fastest of ``repeats`` runs: slower runs measure interference, not the code."""
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _time_length(mha: MultiHeadAttention, x: np.ndarray, repeats: int) -> CostRow:
    w_q, w_k, w_v, w_o = mha.w_q, mha.w_k, mha.w_v, mha.w_o
    xh = x[None, :, :]  # (1, N, d_model): one copy per head by broadcasting

    def project():  # the 4·N·d² part, as multi_head_attention's steps 1) and 3) do it
        return xh @ w_q, xh @ w_k, xh @ w_v  # each (h, N, d_k)

    def join(heads):
        joined = np.swapaxes(heads, 0, 1).reshape(x.shape[0], -1)  # (N, h * d_v)
        return joined @ w_o  # (N, d_model)

    t_in, (q, k, v) = _fastest(project, repeats)
    t_core, heads = _fastest(lambda: attention(q, k, v), repeats)  # (h, N, d_v)
    t_out, out = _fastest(lambda: join(heads), repeats)
    # The two products alone; any (h, N, N) table costs what the weights would.
    kt = np.swapaxes(k, -1, -2)  # (h, d_k, N)
    t_scores, table = _fastest(lambda: q @ kt, repeats)  # (h, N, N)
    t_av, _ = _fastest(lambda: table @ v, repeats)  # (h, N, d_v)
    t_total, ref = _fastest(lambda: mha(x), repeats)  # end to end, for comparison
    n, d_model = x.shape
    heads, d_k = q.shape[0], q.shape[-1]
    # One head of width d_model on the same numbers: the heads side by side.
    q1, k1, v1 = (np.swapaxes(a, 0, 1).reshape(1, n, -1) for a in (q, k, v))  # (1, N, d_model)
    t_one, _ = _fastest(lambda: attention(q1, k1, v1), repeats)  # (1, N, d_model)
    k1t = np.swapaxes(k1, -1, -2)  # (1, d_model, N)
    t_one_scores, table1 = _fastest(lambda: q1 @ k1t, repeats)  # (1, N, N)
    t_one_av, _ = _fastest(lambda: table1 @ v1, repeats)  # (1, N, d_model)
    return CostRow(
        n=n,
        projection_s=t_in + t_out,
        core_s=t_core,
        matmul_s=t_scores + t_av,
        total_s=t_total,
        measured_share=t_core / (t_in + t_out + t_core),
        matmul_share=(t_scores + t_av) / (t_in + t_out + t_scores + t_av),
        model_share=breakdown(n, d_model).quadratic_share,
        max_abs_diff=float(np.abs(out - ref).max()),
        one_head_core_s=t_one,
        one_head_matmul_s=t_one_scores + t_one_av,
        heads_core_ratio=t_core / t_one,
        heads_matmul_ratio=(t_scores + t_av) / (t_one_scores + t_one_av),
        heads_madds=heads * breakdown(n, d_k).quadratic,  # h heads of width d_k
        one_head_madds=breakdown(n, d_model).quadratic,  # one head of width d_model
    )


def cost_timing(
    d_model: int = 256,
    lengths=(64, 128, 256, 512, 1024, 2048, 4096),
    heads: int = 4,
    repeats: int = 3,
    seed: int = 0,
    *,
    dtype: str = "float32",
    progress: Progress | None = None,
) -> CostTimingResult:
    """Time multi-head attention (no mask, no bias) at each N; a benchmark, not a test.

    Args:
        d_model: model width; ``heads`` must divide it.   lengths: the N values.
        repeats: runs per part; the fastest counts.   dtype: "float32" or "float64".
        progress: called as progress(lengths done, lengths).
    """
    d_model, heads = SPEC.check(d_model=d_model, heads=heads)
    if d_model % heads:
        raise AttnlabError(
            f"expected heads to divide d_model, but got d_model={d_model} and heads={heads}"
        )
    lengths, repeats, seed = SPEC.check(lengths=lengths, repeats=repeats, seed=seed)
    if dtype not in ("float32", "float64"):
        raise AttnlabError(f"expected dtype 'float32' or 'float64', but got {dtype!r} instead")
    biggest = score_memory_bytes(max(lengths), heads=heads, dtype=dtype)
    if biggest > MAX_SCORE_BYTES:
        raise AttnlabError(
            f"expected lengths whose score tables fit in {MAX_SCORE_BYTES >> 30} GiB, but "
            f"got N={max(lengths)}, which needs {biggest / 2**30:.1f} GiB with {heads} heads"
        )
    rng = rng_for(seed, COST)
    mha = MultiHeadAttention(d_model, heads, bias=False, seed=rng)
    # Weights in the timed dtype, so the end-to-end call computes in it too.
    mha.w_q, mha.w_k, mha.w_v, mha.w_o = (
        w.astype(dtype) for w in (mha.w_q, mha.w_k, mha.w_v, mha.w_o)
    )
    # One untimed run first: the first BLAS call starts its threads, which is not attention.
    _time_length(mha, rng.standard_normal((min(lengths), d_model)).astype(dtype), 1)
    rows = []
    for i, n in enumerate(sorted(lengths)):
        x = rng.standard_normal((n, d_model)).astype(dtype)  # (N, d_model)
        rows.append(_time_length(mha, x, repeats))
        if progress is not None:
            progress(i + 1, len(lengths))
    return CostTimingResult(
        {"d_model": d_model, "heads": heads, "repeats": repeats, "dtype": dtype, "seed": seed},
        model_crossover=crossover_length(d_model),
        measured_crossover=_crossover(rows, "measured_share"),
        matmul_crossover=_crossover(rows, "matmul_share"),
        rows=tuple(rows),
    )


# -- the declaration: CLI options, web fields, plot and estimate come from here ----------------

# Measured on the project's 2-core machine (numpy 2 with OpenBLAS): one pass of N = 512 at
# d_model = 1024 (mostly products) took 0.63 s, 5.3e-11 s per float32 multiply-add; d_model =
# 64 with 16 heads at N = 1024 (mostly softmax) 0.92 s, about 12 ns per score entry; float64
# took 1.6 times as long at N = 2048. The default run (N up to 4096) was estimated at 12.5 s
# and took 12.2 s. A pass at N runs the projections and the core twice (parts, then end to
# end) and the two products once: 8·N·d² + 6·N²·d multiply-adds and 2·h·N² softmax entries;
# the one-head comparison adds a core and the two products once more (4·N²·d multiply-adds)
# and N² softmax entries. Near the web limits (8 lengths of 256, d_model = 256, 8 heads, 3
# repeats) with one BLAS thread, on 2 December 2026: float64 1.24 s of CPU against 1.20 s
# estimated, float32 0.46 s against 0.74 s; float64 carries 12% on top. (With OpenBLAS's
# threads on a loaded machine CPU time says nothing: its waiting threads spin.)
_S_PER_MADD = {"float32": 5.3e-11, "float64": 1.2e-10}
_S_PER_ENTRY = {"float32": 12e-9, "float64": 16e-9}


def _estimate(d_model, lengths, heads, repeats, dtype="float32", **_) -> Estimate:
    dtype = dtype if dtype in _S_PER_MADD else "float64"
    passes = [(min(lengths), 1)] + [(n, repeats) for n in lengths]  # the untimed warm-up first
    seconds = 0.01 + sum(
        times * ((8 * n * d_model**2 + 10 * n * n * d_model) * _S_PER_MADD[dtype]
                 + (2 * heads + 1) * n * n * _S_PER_ENTRY[dtype])
        for n, times in passes
    )  # fmt: skip
    n, size = max(lengths), np.dtype(dtype).itemsize
    return Estimate(seconds, size * (5 * heads * n * n + 12 * n * d_model + 4 * d_model**2))


_PLOT = RowPlot(
    "Share of time in the attention core, d_model = {d_model} "
    "(model crossover N = {model_crossover})",
    "share of the time; heads ÷ one head",
    (
        Line("measured: core with softmax", "measured_share"),
        Line("measured: Q Kᵀ and A V only", "matmul_share"),
        Line("cost model 2N²d / (4Nd² + 2N²d)", "model_share", dash=True),
        Line("measured: {heads} heads ÷ one head, core time", "heads_core_ratio"),
        Line("cost model: {heads} heads ÷ one head, h·2N²d_k / 2N²d = 1", "heads_madds_ratio",
             dash=True),
    ),
    x=("n", "N (tokens)"),
    log_x=True,
)  # fmt: skip


SPEC = LabSpec(
    name="cost",
    title="Cost across N",
    summary="Time multi-head attention across N beside the cost model of §6.6 (a benchmark).",
    heading="MHA time, d_model={d_model}, {heads} heads, {dtype}",
    run=cost_timing,
    params=(
        Param("d_model", "Model width; heads must divide it.", low=1, high=8192, web_low=8,
              web_high=256, web_default=64),
        Param("lengths", "The sequence lengths N.", low=1, web_high=256, flag="--n",
              web_default=(32, 64, 128, 256), budget=True),
        Param("heads", "Heads h; must divide d_model.", low=1, web_high=8),
        Param("repeats", "Runs per part; the fastest counts.", low=1, high=100, web_high=3),
        SEED,
        Param("dtype", "Arithmetic.", choices=("float32", "float64")),
    ),
    columns=(("n", "N"), ("projection_s", "projections s"), ("core_s", "core s"),
             ("matmul_s", "QKᵀ+AV s"), ("total_s", "total s"), ("measured_share", "core share"),
             ("matmul_share", "QKᵀ+AV share"), ("model_share", "model share"),
             ("heads_core_ratio", "heads÷1 core"), ("heads_matmul_ratio", "heads÷1 QKᵀ+AV"),
             ("heads_madds", "model heads"), ("one_head_madds", "model 1 head")),
    plot=_PLOT,
    estimate=_estimate,
)  # fmt: skip
