"""The small-shapes benchmark: attnlab beside PyTorch's SDPA where per-call cost decides.

Shape legend: (B, h, N, d): B batch, h heads, N queries = M keys, d = d_k = d_v; float32,
causal.

A tiny transformer's training batch, the shapes of the chapter's examples and the worked example
itself run in microseconds to milliseconds, where validation, mask building and dispatch weigh
as much as the arithmetic. Each shape runs in its own process, which times four calls
interleaved, a block of each in turn after a short idle pause (``GAP_S``), so that a busy
machine slows all of them alike and no block runs beside another library's spinning threads:

- forward: ``attnlab.attention(q, k, v, Causal())`` beside torch's SDPA (``is_causal``, in
  inference mode), and attnlab's general path (the same call with ``threads`` set, which skips
  the small-problem fast path of ``kernels/_small.py``) for comparison;
- forward + backward, a training step: ``attention`` then ``attention_backward`` beside torch's
  SDPA and ``.backward()``.

torch runs on as many threads as attnlab may use (this machine's cores). The ratio "x torch" is
torch's time over attnlab's: 1.0 is parity, 0.5 half torch's speed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from attnlab.bench._measure import run_isolated
from attnlab.bench._report import tile_passes
from attnlab.bench._suite import Target, machine_info, torch_available

#: The table's shapes (B, h, N, d): a tiny transformer's batch, two wider ones, the worked example.
SHAPES = ((64, 4, 32, 16), (8, 8, 128, 64), (1, 8, 512, 64), (1, 1, 4, 2))
WORKED_EXAMPLE = (1, 1, 4, 2)
CALLS = ("forward", "forward_general", "torch_forward", "step", "step_general", "torch_step")
BLOCK_S = 0.02  # each timed block: about this long, so the clock's resolution does not matter
#: A pause before each timed block. torch's OpenMP threads keep spinning on the cores for a
#: while after a call returns, waiting for the next parallel region; without a pause the
#: block after torch's ran beside them (at (1, 8, 512, 64) attnlab's forward took 13-15 ms
#: right after a torch call against 7-9 ms back to back, on the 2-core AMD EPYC).
GAP_S = 0.05


@dataclass
class Row:
    """One shape: the median seconds per call of each of ``CALLS`` (None where not run)."""

    shape: tuple[int, int, int, int]
    seconds: dict[str, float | None] = field(default_factory=dict)
    torch_threads: int | None = None
    error: str | None = None

    def ratio(self, ours: str, theirs: str) -> float | None:
        a, b = self.seconds.get(ours), self.seconds.get(theirs)
        return None if not a or not b else b / a


@dataclass
class SmallReport:
    machine: dict
    settings: dict
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "machine": self.machine,
            "settings": self.settings,
            "rows": [asdict(r) for r in self.rows],
            "targets": [t.to_dict() for t in self.targets],
        }

    def format(self) -> str:
        return format_small(self)


def small(
    shapes=SHAPES,
    *,
    rounds: int = 7,
    use_torch: bool = True,
    isolate: bool = True,
    block_s: float = BLOCK_S,
    gap_s: float = GAP_S,
    progress=None,
) -> SmallReport:
    """Time every shape (forward, and forward + backward) beside torch; check the targets.

    Args:
        shapes: (B, h, N, d) tuples, causal, float32.
        rounds: blocks of each call per shape; the median block's time per call is reported.
        use_torch: include torch's SDPA when it can be imported.
        isolate: each shape in its own process (default); False runs them here, for tests.
        block_s: the length of each timed block in seconds.
        gap_s: the idle pause before each block, in seconds (see ``GAP_S``).
        progress: called with each Row as it is measured.
    """
    with_torch = use_torch and torch_available()
    settings = {
        "rounds": rounds,
        "torch": with_torch,
        "isolated": isolate,
        "block_s": block_s,
        "gap_s": gap_s,
    }
    report = SmallReport(machine_info(), {**settings, "shapes": [list(s) for s in shapes]})
    for shape in shapes:
        job = {"shape": list(shape), **settings}
        row = _isolated(job) if isolate else measure_shape(job)
        report.rows.append(row)
        if progress is not None:
            progress(row)
    report.targets = targets(report)
    return report


def measure_shape(job: dict) -> Row:
    """Time the calls of one shape in this process, interleaved (see the module docstring)."""
    shape = tuple(job["shape"])
    row = Row(shape)
    try:
        calls = _calls(shape, job["torch"], row)
        per_call = {name: [] for name in calls}
        reps = {name: _calibrate(call, job["block_s"]) for name, call in calls.items()}
        for _ in range(job["rounds"]):
            for name, call in calls.items():
                time.sleep(job["gap_s"])  # each block starts on idle cores (see GAP_S)
                start = time.perf_counter()
                for _ in range(reps[name]):
                    call()
                per_call[name].append((time.perf_counter() - start) / reps[name])
        row.seconds = {name: statistics.median(t) for name, t in per_call.items()}
    except Exception as exc:  # a benchmark reports a failed shape and goes on
        row.error = f"{type(exc).__name__}: {exc}"
    return row


def _calibrate(call, block_s: float) -> int:
    call()  # warm-up: caches, thread pools, the fast path's kept mask
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, min(100_000, round(block_s / once)))


def _calls(shape, with_torch: bool, row: Row) -> dict:
    import attnlab as al
    from attnlab.core.masks import Causal

    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal(shape, dtype=np.float32) for _ in range(4))
    causal, cores = Causal(), os.cpu_count() or 1

    def step(threads=None):
        al.attention(q, k, v, causal, threads=threads)
        return al.attention_backward(q, k, v, g, causal, threads=threads)

    calls = {
        "forward": lambda: al.attention(q, k, v, causal),
        "forward_general": lambda: al.attention(q, k, v, causal, threads=cores),
        "step": step,
        "step_general": lambda: step(cores),
    }
    if with_torch:
        calls.update(_torch_calls(q, k, v, g, cores, row))
    return {name: calls[name] for name in CALLS if name in calls}


def _torch_calls(q, k, v, g, threads: int, row: Row) -> dict:
    import torch  # the benchmark's oracle only: never imported by attnlab's library code
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    row.torch_threads = torch.get_num_threads()
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    fq, fk, fv, tg = (torch.from_numpy(a) for a in (q, k, v, g))

    def forward():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(fq, fk, fv, is_causal=True)

    def step():
        for t in (tq, tk, tv):
            t.grad = None
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tg)
        return tq.grad, tk.grad, tv.grad

    return {"torch_forward": forward, "torch_step": step}


def _isolated(job: dict, timeout_s: float = 900.0) -> Row:
    """measure_shape in a fresh Python process (this module as ``__main__``)."""
    data, error = run_isolated("attnlab.bench._small", job, timeout_s)
    if error:
        return Row(tuple(job["shape"]), error=error)
    return Row(**{**data, "shape": tuple(data["shape"])})


def targets(report: SmallReport) -> list[Target]:
    """The small-shape targets, each from this report's rows (None where not measured)."""
    out = []
    for row in report.rows:
        name = "x".join(str(s) for s in row.shape)
        pairs = [("forward + backward", "step", "torch_step", 0.8)]
        if row.shape != WORKED_EXAMPLE:  # its forward has a target of its own, below
            pairs.append(("forward", "forward", "torch_forward", 0.5))
        for what, ours, theirs, goal in pairs:
            t = Target(f"{what} >= {goal}x torch, {name} causal", goal)
            t.value = row.ratio(ours, theirs)
            if t.value is not None:
                t.detail = _pair(row, ours, theirs)
            out.append(t)
        if row.shape == WORKED_EXAMPLE:
            t = Target(f"forward within 5x of torch's time, {name} (the worked example)", 5.0)
            t.below = True
            ratio = row.ratio("forward", "torch_forward")
            t.unit = "x torch's time"
            if ratio is not None:
                t.value = 1 / ratio
                t.detail = _pair(row, "forward", "torch_forward")
            out.append(t)
    return out


def _pair(row: Row, ours: str, theirs: str) -> str:
    return f"{_us(row.seconds[ours])} vs {_us(row.seconds[theirs])}"


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def format_small(report: SmallReport) -> str:
    """The table ``attnlab bench small`` prints, then the targets with PASS or FAIL."""
    m, s = report.machine, report.settings
    blas = m["blas"]
    threads = next((r.torch_threads for r in report.rows if r.torch_threads), None)
    lines = [
        "attention at small shapes, float32, causal: time per call, the median of "
        f"{s['rounds']} interleaved blocks of about {s['block_s'] * 1e3:.0f} ms"
        + (f", each after {s['gap_s'] * 1e3:.0f} ms idle" if s.get("gap_s") else "")
        + ("; each shape in its own process" if s["isolated"] else ""),
        f"machine: {m['cpu']}, {m['cores']} cores; numpy {m['numpy']} with "
        f"{blas.get('version') or blas['library']} ({blas.get('kernel') or '?'} kernel"
        + (
            f", OPENBLAS_CORETYPE={blas['OPENBLAS_CORETYPE']}"
            if blas.get("OPENBLAS_CORETYPE")
            else ""
        )
        + f"); torch {m['torch'] or 'not installed'}"
        + (f" on {threads} threads" if threads else ""),
        f"compiled passes (softmax, tiles): {tile_passes()}",
        "attnlab: attention(q, k, v, Causal()); general: the same with threads= set (no "
        "small-problem fast path); step: attention then attention_backward (torch: SDPA and "
        ".backward()); x torch = torch's time / attnlab's",
        "",
    ]
    head = ("B, h, N, d", "attnlab", "general", "torch", "x torch")
    fmt = "{:<16}{:>12}{:>12}{:>12}{:>9}"
    for title, ours, general, theirs in (
        ("forward", "forward", "forward_general", "torch_forward"),
        ("forward + backward", "step", "step_general", "torch_step"),
    ):
        lines += [title, fmt.format(*head)]
        for row in report.rows:
            shape = ", ".join(str(x) for x in row.shape)
            if row.error:
                lines.append(f"{shape:<16}failed: {row.error[:70]}")
                continue
            ratio = row.ratio(ours, theirs)
            cells = [_us(row.seconds.get(c)) for c in (ours, general, theirs)]
            lines.append(fmt.format(shape, *cells, "-" if ratio is None else f"{ratio:.2f}"))
        lines.append("")
    lines.append("targets:")
    for t in report.targets:
        verdict = {True: "PASS", False: "FAIL", None: "----"}[t.passed]
        value = "not run" if t.value is None else f"{t.value:.2f}{t.unit}"
        detail = f"  ({t.detail})" if t.detail else ""
        lines.append(f"  {verdict}  {t.name}: {value}{detail}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(asdict(measure_shape(json.loads(sys.argv[1])))))
