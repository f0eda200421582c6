"""Time one attention configuration and its peak memory, in this process or in a fresh one.

A configuration times the forward pass, or with ``backward=True`` the gradients of q, k and v
for an upstream gradient (attnlab's ``attention_backward``, which runs the forward pass again;
torch's forward and ``.backward()``): the same work on both sides.

Shape legend: B batch (1 here), h heads, N queries = M keys, d = d_k = d_v.

Each configuration runs in its own subprocess by default, so that one method's allocations,
threads and caches cannot flatter or burden the next, and its peak memory is its own.

Memory is the growth of the process's resident set (Linux VmHWM, reset before the call through
/proc/self/clear_refs) during the *first* call, less the output: everything the method allocates
beyond its inputs, caches and thread pools included. Where the reset is refused, getrusage's
ru_maxrss stands in and the figure is an upper bound (it then includes any earlier peak).
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from attnlab.bench._orphan import command
from attnlab.errors import AttnlabError

METHODS = ("dense", "blockwise", "torch", "textbook")
MASKS = ("none", "causal", "window")


@dataclass(frozen=True)
class Config:
    """One measurement: a method on one (B, h, N, d) problem with one mask."""

    method: str
    n: int
    heads: int = 8
    d: int = 64
    mask: str = "none"  # "none" | "causal" | "window"
    window: int | None = None
    dtype: str = "float32"
    repeats: int = 7  # timed runs after the first (which also measures memory)
    budget_s: float = 20.0  # stop timing after this long, once 3 runs are done
    seed: int = 0
    backward: bool = False  # time the forward and backward passes together

    @property
    def useful_flops(self) -> int:
        """4·B·h·N·M·d: two matmuls of 2·N·M·d FLOPs over the pairs the mask allows: halved for
        causal (as FlashAttention's papers count it), about N·window for a sliding window.
        With the backward pass 14·B·h·N·M·d: the forward's 4 and the backward's 10 (five
        matmuls: S again, dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q; FlashAttention-2, §3.2)."""
        pairs = self.n * self.n
        if self.mask == "causal":
            pairs //= 2
        elif self.mask == "window":
            w = min(self.window, self.n)
            pairs = self.n * w - w * (w - 1) // 2
        return (14 if self.backward else 4) * self.heads * pairs * self.d

    @property
    def output_bytes(self) -> int:
        """The output, or with the backward pass the three gradients (dq, dk, dv)."""
        return (
            (3 if self.backward else 1)
            * self.heads
            * self.n
            * self.d
            * np.dtype(self.dtype).itemsize
        )


@dataclass
class Result:
    config: Config
    seconds: float | None = None  # median of the timed runs
    runs: list[float] = field(default_factory=list)
    first_s: float | None = None  # the first (cold) call
    peak_mib: float | None = None  # resident-set growth during the first call, less the output
    peak_exact: bool = True  # False when the peak is ru_maxrss's upper bound
    error: str | None = None
    threads: int | None = None  # the threads the method used (torch's or attnlab's pool)

    @property
    def gflops(self) -> float | None:
        return None if not self.seconds else self.config.useful_flops / self.seconds / 1e9

    def to_dict(self) -> dict:
        out = asdict(self)
        out["gflops"] = self.gflops
        out["useful_flops"] = self.config.useful_flops
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Result:
        keep = {k: v for k, v in data.items() if k not in ("gflops", "useful_flops")}
        return cls(**{**keep, "config": Config(**data["config"])})


# -- the methods --------------------------------------------------------------------------------


def textbook_attention(q, k, v, mask=None):
    """softmax(q kᵀ / √d + mask) v as a first attempt writes it: every step a new N x M array."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ v


def _prepare(cfg: Config, info: dict):
    """Inputs for cfg and a zero-argument function that computes attention on them."""
    info["threads"] = os.cpu_count() if cfg.method == "blockwise" else None
    rng = np.random.default_rng(cfg.seed)
    shape = (1, cfg.heads, cfg.n, cfg.d)  # (B, h, N, d)
    q, k, v = (
        rng.standard_normal(shape, dtype=np.float32).astype(cfg.dtype, copy=False) for _ in range(3)
    )
    if cfg.backward:
        return _prepare_backward(cfg, info, q, k, v, rng)
    if cfg.method == "torch":
        import torch  # the benchmark's oracle only: never imported by attnlab at run time
        import torch.nn.functional as F

        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        info["threads"] = torch.get_num_threads()
        mask = None
        if cfg.mask == "window":
            i = torch.arange(cfg.n)
            mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - cfg.window)  # (N, N)

        def call():
            with torch.inference_mode():
                return F.scaled_dot_product_attention(
                    tq, tk, tv, attn_mask=mask, is_causal=cfg.mask == "causal"
                )

        return call
    if cfg.method == "textbook":
        spec = _spec(cfg)
        mask = None if spec is None else spec.additive(cfg.n, dtype=cfg.dtype)  # (N, N)
        return lambda: textbook_attention(q, k, v, mask)

    import attnlab as al

    _warm_kernels(info)
    spec = _spec(cfg)
    return lambda: al.attention(q, k, v, spec, method=cfg.method)


def _warm_kernels(info: dict) -> None:
    """Load the optional compiled tile passes (kernels/_fused.py) before the first call, so their
    one-off load lands in neither its time nor its memory; note which passes ran."""
    from attnlab.kernels import _fused

    info["kernel"] = "numba" if _fused.warm() is not None else "numpy"


def _prepare_backward(cfg: Config, info: dict, q, k, v, rng):
    """Gradients of q, k, v for a random grad_output: forward and backward, both sides."""
    g = rng.standard_normal(q.shape, dtype=np.float32).astype(cfg.dtype, copy=False)  # dO
    if cfg.method == "torch":
        import torch  # the benchmark's oracle only
        import torch.nn.functional as F

        tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
        tg = torch.from_numpy(g)
        info["threads"] = torch.get_num_threads()
        if cfg.mask not in ("none", "causal"):
            raise AttnlabError(f"expected mask 'none' or 'causal' for torch, but got {cfg.mask!r}")

        def call():
            for t in (tq, tk, tv):
                t.grad = None
            out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=cfg.mask == "causal")
            out.backward(tg)  # its fused CPU backward (flash attention's)
            return tq.grad, tk.grad, tv.grad

        return call
    import attnlab as al

    _warm_kernels(info)
    spec = _spec(cfg)
    return lambda: al.attention_backward(q, k, v, g, spec, method=cfg.method)


def _spec(cfg: Config):
    from attnlab.core.masks import Causal, SlidingWindow

    if cfg.mask == "causal":
        return Causal()
    return SlidingWindow(cfg.window) if cfg.mask == "window" else None


# -- memory -------------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    # Hand freed heap memory back to the system first, or a call could reuse it unseen.
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the resident high-water mark (Linux >= 4.0)
        return True
    except OSError:
        return False


def _peak() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- measuring ----------------------------------------------------------------------------------


def measure(cfg: Config) -> Result:
    """Run cfg in this process: the first call gives the memory, then timed runs (median)."""
    result = Result(cfg)
    try:
        info: dict = {}
        call = _prepare(cfg, info)
        result.threads = info["threads"]
        gc.collect()
        _trim()
        exact = _reset_peak()
        before = _rss() if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        start = time.perf_counter()
        out = call()
        result.first_s = time.perf_counter() - start
        result.peak_mib = max(0.0, (_peak() - before - cfg.output_bytes) / 2**20)
        result.peak_exact = exact
        del out
        spent = result.first_s
        while len(result.runs) < cfg.repeats and (len(result.runs) < 3 or spent < cfg.budget_s):
            start = time.perf_counter()
            call()
            result.runs.append(time.perf_counter() - start)
            spent += result.runs[-1]
        result.seconds = statistics.median(result.runs) if result.runs else result.first_s
    except Exception as exc:  # a benchmark reports a failed configuration and goes on
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def merge_rounds(first: Result, later: Result) -> Result:
    """One row measured in two rounds (``bench.attention(rounds=...)``): every timed run
    pooled and its time their median; the first round's cold call, peak memory and threads;
    the error of either round, if one failed."""
    if first.error or later.error:
        return first if first.error else later
    runs = first.runs + later.runs
    return replace(first, runs=runs, seconds=statistics.median(runs) if runs else first.seconds)


def measure_isolated(cfg: Config, timeout_s: float = 900.0) -> Result:
    """Run cfg in a fresh Python process (this module as ``__main__``) and return its Result."""
    data, error = run_isolated("attnlab.bench._measure", asdict(cfg), timeout_s)
    return Result(cfg, error=error) if error else Result.from_dict(data)


def run_isolated(
    module: str, job: dict, timeout_s: float = 900.0
) -> tuple[dict | None, str | None]:
    """Run ``module`` as ``__main__`` with JSON(job) in a fresh process (``_orphan.command``:
    it exits when this process dies), this attnlab first on its path:
    (the JSON object its last line of output printed, None), or (None, what went wrong)."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            command(module, json.dumps(job)),  # a child that exits with this process
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s:.0f} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"exit code {proc.returncode}: {tail}"
    return json.loads(lines[-1]), None


def gemm_ceiling(dtype: str = "float32", size: int = 2048, repeats: int = 10) -> float:
    """numpy's matmul rate in GFLOP/s on size x size matrices: this machine's ceiling, so the
    best of ``repeats`` runs (a ceiling is what the machine can reach, not what it usually does)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32).astype(dtype) for _ in range(2))
    out = np.empty_like(a)
    np.matmul(a, b, out=out)  # warm-up: BLAS threads start, pages fault in
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        runs.append(time.perf_counter() - start)
    return 2 * size**3 / min(runs) / 1e9


if __name__ == "__main__":
    print(json.dumps(measure(Config(**json.loads(sys.argv[1]))).to_dict()))
