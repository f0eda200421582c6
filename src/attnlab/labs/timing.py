"""How long the labs take at their defaults: the figures behind `attnlab bench labs`.

The target: the default variance lab (4 widths x 200,000 draws) in under 2 s on the
project's 2-core machine. This is a benchmark, never a timed test: wall time depends on the
machine and on whatever else runs on it.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.labs._common import LabResult, Progress, check_int
from attnlab.labs._scores import default_workers

__all__ = ["LabTiming", "TimingResult", "time_labs"]

# Seconds a default run should take; None where the issue sets no target.
TARGETS: dict[str, float | None] = {
    "variance": 2.0,
    "saturation": None,
    "sweep": None,
    "permutation": None,
}


@dataclass(frozen=True)
class LabTiming:
    lab: str
    runs: int
    median_s: float
    min_s: float
    max_s: float
    target_s: float | None
    meets_target: bool | None  # median under the target; None without a target

    @classmethod
    def of(cls, lab: str, seconds: list[float], target: float | None) -> LabTiming:
        """One lab's row from the wall seconds of its runs: median, fastest, slowest."""
        median = statistics.median(seconds)
        meets = None if target is None else median < target
        return cls(lab, len(seconds), median, min(seconds), max(seconds), target, meets)


@dataclass(frozen=True)
class TimingResult(LabResult):
    """Wall time of each lab's default run, with the machine it was measured on."""

    repeats: int
    cpus: int
    workers: int
    numpy: str
    machine: str
    rows: tuple[LabTiming, ...]
    lab = "timing"

    def table(self) -> tuple[list[str], list[list]]:
        columns = ["lab", "runs", "median_s", "min_s", "max_s", "target_s", "meets_target"]
        return columns, [[getattr(r, c) for c in columns] for r in self.rows]

    def summary(self) -> list[str]:
        lines = [f"{self.cpus} CPUs, {self.workers} worker threads, numpy {self.numpy}."]
        for r in self.rows:
            if r.target_s is not None:
                verdict = "within" if r.meets_target else "OVER"
                lines.append(
                    f"{r.lab}: median {r.median_s:.3f} s, {verdict} the {r.target_s:g} s target."
                )
        return lines


def time_labs(
    repeats: int = 3, labs=("variance", "saturation"), *, progress: Progress | None = None
) -> TimingResult:
    """Median wall time of each named lab at its defaults, over ``repeats`` runs.

    Args:
        repeats: runs per lab (1 to 100).
        labs: names from ``attnlab.labs.LABS`` except "cost", which is itself a timing.
        progress: called as progress(runs done, runs in all).
    """
    from attnlab.labs import LABS  # here, not at the top: the package imports this module

    repeats = check_int("repeats", repeats, high=100)
    labs = (labs,) if isinstance(labs, str) else tuple(labs)
    unknown = [name for name in labs if name not in TARGETS]
    if unknown or not labs:
        raise AttnlabError(
            f"expected lab names from {sorted(TARGETS)}, but got {list(labs)!r} instead"
        )
    rows, done = [], 0
    for name in labs:
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            LABS[name]()
            seconds.append(time.perf_counter() - start)
            done += 1
            if progress is not None:
                progress(done, repeats * len(labs))
        rows.append(LabTiming.of(name, seconds, TARGETS[name]))
    return TimingResult(
        repeats=repeats,
        cpus=os.cpu_count() or 1,
        workers=default_workers(),
        numpy=np.__version__,
        machine=platform.machine() or "unknown",
        rows=tuple(rows),
    )
