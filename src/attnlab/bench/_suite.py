"""The side-by-side attention benchmark: a sweep over N, the checks and the speed targets.

Shape legend: B = 1, h heads, N queries = M keys, d = d_k = d_v, float32 unless told.

Every number is measured in the run that prints it: ratios (to PyTorch, to the GEMM ceiling,
causal to no mask) compare rows taken minutes apart on the same machine, never across runs.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from attnlab.bench._measure import (
    Config,
    Result,
    gemm_ceiling,
    measure,
    measure_isolated,
    merge_rounds,
)
from attnlab.errors import AttnlabError
from attnlab.kernels.blockwise import blas_info

DEFAULT_NS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_NS = (512, 1024, 2048)
#: The dense path is skipped where its score table would pass this: 2 GiB (N = 8192 at h = 8).
DENSE_LIMIT = 2 * 2**30
MEMORY_N = 65_536  # the memory check: one head, where the dense table alone is 16 GiB
MEMORY_LIMIT_MIB = 512.0


@dataclass
class Target:
    """One speed target: the measured value, the goal, and whether it was met."""

    name: str
    goal: float
    value: float | None = None  # None: not measured in this run
    unit: str = "x"
    detail: str = ""
    below: bool = False  # True when the value must stay under the goal

    @property
    def passed(self) -> bool | None:
        if self.value is None:
            return None
        return self.value < self.goal if self.below else self.value >= self.goal

    def to_dict(self) -> dict:
        return {**self.__dict__, "passed": self.passed}


@dataclass
class Report:
    """Everything one run measured, ready to print (``format``) or save (``to_dict``)."""

    machine: dict
    settings: dict
    gemm_gflops: float
    results: list[Result] = field(default_factory=list)
    checks: list[Result] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def find(self, method: str, n: int, mask: str = "none", heads: int | None = None, window=512):
        """The measured result for one configuration (a window mask: of ``window`` keys)."""
        heads = self.settings["heads"] if heads is None else heads
        for r in self.results + self.checks:
            c = r.config
            if (c.method, c.n, c.mask, c.heads) == (method, n, mask, heads) and r.seconds:
                if mask != "window" or c.window == window:
                    return r
        return None

    def to_dict(self) -> dict:
        return {
            "machine": self.machine,
            "settings": self.settings,
            "gemm_gflops": self.gemm_gflops,
            "results": [r.to_dict() for r in self.results],
            "checks": [r.to_dict() for r in self.checks],
            "targets": [t.to_dict() for t in self.targets],
        }

    def format(self) -> str:
        from attnlab.bench._report import format_report

        return format_report(self)


def machine_info() -> dict:
    """What the numbers were measured on: CPU, cores, numpy and its BLAS kernel, torch."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas_info(),
        "torch": torch_version,
    }


def torch_available() -> bool:
    """Whether torch can be imported here (it is never imported to find out)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


#: The most rounds a benchmark run takes (``rounds``): each is a whole suite.
MAX_ROUNDS = 20


def plan_run(ns, default_ns, quick: bool, repeats, rounds, checks, use_torch: bool, isolate: bool):
    """What a benchmark run measures, the same for every suite: (lengths, timed runs, whether
    to run the target checks, whether torch runs beside attnlab, the measuring function), once
    ``rounds`` is checked (``check_rounds``). The checks default to on only for the full
    default run (no ``ns``, not ``quick``). Both benchmarks write out the same sizes (``ns``,
    ``heads``, ``d``, ``masks``) and run controls (``quick`` .. ``progress``) in their
    signatures and hand the controls here; tests/test_public_signatures.py holds their names,
    order and defaults equal."""
    check_rounds(rounds)
    full = ns is None and not quick
    return (
        tuple(ns or default_ns),
        repeats or (3 if quick else 7),
        full if checks is None else checks,
        use_torch and torch_available(),
        measure_isolated if isolate else measure,
    )


def _measure_checks(measured, report: Report, base: Config, ns, *, quick: bool, checks: bool):
    """The extra configurations the targets need, each measured once into ``report.checks``:
    with ``quick`` only the textbook expression at N = 2048, with ``checks`` all of them."""
    if quick and 2048 in ns:  # the one cheap check: the textbook expression beside dense
        measured(replace(base, method="textbook", n=2048), report.checks)
    if checks:
        wanted = [
            replace(base, method="dense", n=2048),
            replace(base, method="textbook", n=2048),
            replace(base, n=8192),
            replace(base, n=8192, mask="causal"),
            replace(base, n=16384),
            replace(base, n=16384, mask="window", window=512),
        ]
        for cfg in wanted:
            if report.find(cfg.method, cfg.n, cfg.mask, cfg.heads) is None:
                measured(cfg, report.checks)
        # One call: the peak is what matters, and one call takes seconds.
        measured(replace(base, n=MEMORY_N, heads=1, repeats=0), report.checks)


def attention(
    ns: Sequence[int] | None = None,
    *,
    heads: int = 8,
    d: int = 64,
    masks: Sequence[str] = ("none", "causal"),
    window: int = 512,
    quick: bool = False,
    repeats: int | None = None,
    rounds: int = 1,
    use_torch: bool = True,
    isolate: bool = True,
    checks: bool | None = None,
    progress: Callable[[Result], None] | None = None,
) -> Report:
    """Run the benchmark: attnlab dense and blockwise beside PyTorch's SDPA, and the checks.

    Args:
        ns: sequence lengths N (= M); default 512 to 16384 (512 to 2048 with ``quick``).
        heads, d: h and d_k = d_v; B = 1, float32.
        masks: any of "none", "causal", "window" (a sliding window of ``window`` keys).
        quick: small sizes and 3 timed runs: a fast look, not the targets.
        repeats: timed runs per configuration after the first (default 7, 3 with quick);
            a configuration stops after 20 s once it has 3.
        rounds: measure every row this many times, the rows taking turns (dense, blockwise,
            torch, ..., then all again), each row's time the median of all its runs: a machine
            whose speed drifts over minutes then slows both sides of a ratio alike.
        use_torch: include torch.nn.functional.scaled_dot_product_attention when importable.
        isolate: measure each configuration in its own subprocess (default; needed for peak
            memory to belong to one configuration). False runs them here, for tests.
        checks: also run the target checks that need extra configurations (N = 65536 memory,
            textbook at 2048, window at 16384); default: only for the full default suite
            (``quick`` adds only the textbook expression at N = 2048).
        progress: called with each Result as it is measured.

    Returns:
        A Report; ``report.format()`` is the table the CLI prints.
    """
    for mask in masks:
        if mask not in ("none", "causal", "window"):
            raise AttnlabError(f"expected masks among 'none', 'causal', 'window', but got {mask!r}")
    ns, repeats, checks, with_torch, run = plan_run(
        ns, (QUICK_NS if quick else DEFAULT_NS), quick, repeats, rounds, checks, use_torch, isolate
    )
    settings = {"window": window, "isolated": isolate, "torch": with_torch, "rounds": rounds}
    report, measured = sweep(ns, heads, d, masks, repeats, run, progress, settings)

    base = Config("blockwise", 0, heads, d, repeats=repeats)
    _measure_checks(measured, report, base, ns, quick=quick, checks=checks)
    report.targets = targets(report)
    return report


def sweep(ns, heads: int, d: int, masks, repeats: int, run, progress, settings: dict):
    """A Report of every (N, mask, method) row, measured with ``run``, and the function that
    measures one more configuration into a list: the loop both suites share. ``settings``:
    what the report records beyond the shape; with ``"backward": True`` the rows time the
    gradients, and dense (two N x M tables then) is skipped where its tables pass 2 GiB."""
    backward = bool(settings.get("backward"))
    shape = {"ns": list(ns), "heads": heads, "d": d, "masks": list(masks), "dtype": "float32"}
    settings = {**shape, "repeats": repeats, **settings}
    report = Report(machine_info(), settings, gemm_ceiling())

    def measured(cfg: Config, into: list[Result] | None = None) -> Result:
        result = run(cfg)
        if into is not None:
            into.append(result)
        if progress is not None:
            progress(result)
        return result

    methods = ["dense", "blockwise"] + (["torch"] if settings.get("torch") else [])
    window = settings.get("window")
    configs = [
        Config(
            method,
            n,
            heads,
            d,
            mask,
            window if mask == "window" else None,
            repeats=repeats,
            backward=backward,
        )
        for n in ns
        for mask in masks
        for method in methods
        # dense's table(s) alone would not fit a sane budget past DENSE_LIMIT
        if method != "dense" or (1 + backward) * heads * n * n * 4 <= DENSE_LIMIT
    ]
    rows: list = [None] * len(configs)
    for _ in range(settings.get("rounds", 1)):
        for i, cfg in enumerate(configs):  # every row once a round, in turn
            got = measured(cfg)
            rows[i] = got if rows[i] is None else merge_rounds(rows[i], got)
    report.results.extend(rows)
    return report, measured


def check_rounds(rounds) -> int:
    """``rounds``, checked: a whole number from 1 to MAX_ROUNDS."""
    if type(rounds) is not int or not 1 <= rounds <= MAX_ROUNDS:
        raise AttnlabError(
            f"expected rounds to be a whole number from 1 to {MAX_ROUNDS}, but got {rounds!r}"
        )
    return rounds


def torch_targets(report: Report, ns, name: str, goal: float) -> list[Target]:
    """Per N and mask (none, causal), blockwise's GFLOP/s over torch's in this report against
    ``goal``: the comparison both suites' targets start with."""
    out = []
    for n in ns:
        for mask in ("none", "causal"):
            t = Target(f"{name}, N={n}, {label(mask)}", goal)
            ours, theirs = report.find("blockwise", n, mask), report.find("torch", n, mask)
            if ours and theirs:
                t.value = ours.gflops / theirs.gflops
                t.detail = f"{ours.gflops:.0f} vs {theirs.gflops:.0f} GFLOP/s"
            out.append(t)
    return out


def targets(report: Report) -> list[Target]:
    """The speed targets, each from numbers measured in this report (None where not run)."""
    out = torch_targets(report, (2048, 4096, 8192), "blockwise >= 0.8x torch SDPA", 0.8)
    for name, n, mask, goal in (
        ("causal >= 1.7x faster than no mask, N=8192", 8192, "causal", 1.7),
        ("sliding window 512 >= 3.5x faster than no mask, N=16384", 16384, "window", 3.5),
    ):
        t = Target(name, goal)
        full, masked = report.find("blockwise", n), report.find("blockwise", n, mask)
        if full and masked:
            t.value = full.seconds / masked.seconds
            t.detail = f"{masked.seconds * 1e3:.0f} ms vs {full.seconds * 1e3:.0f} ms"
        out.append(t)
    t = Target(f"peak memory < 512 MiB, blockwise N={MEMORY_N}, h=1", MEMORY_LIMIT_MIB, unit="MiB")
    t.below = True
    mem = report.find("blockwise", MEMORY_N, heads=1)
    if mem and mem.peak_mib is not None:
        t.value = mem.peak_mib
        table = MEMORY_N * MEMORY_N * 4 / 2**30
        t.detail = f"above inputs and output; the dense table would be {table:.0f} GiB"
    out.append(t)
    t = Target("dense >= 3x the textbook expression, N=2048", 3.0)
    dense, textbook = report.find("dense", 2048), report.find("textbook", 2048)
    if dense and textbook:
        t.value = textbook.seconds / dense.seconds
        t.detail = f"{dense.seconds * 1e3:.0f} ms vs {textbook.seconds * 1e3:.0f} ms"
    out.append(t)
    return out


def label(mask: str) -> str:
    """A mask's name in a target's words."""
    return {"none": "no mask", "causal": "causal"}.get(mask, mask)
