"""The backward benchmark: attnlab's gradients beside PyTorch's fused CPU backward.

Shape legend: B = 1, h heads, N queries = M keys, d = d_k = d_v, float32.

Each configuration times the forward and the backward pass together on both sides: attnlab's
``attention_backward`` runs the forward pass again (the blockwise path keeps each row's
logsumexp), and torch's is ``scaled_dot_product_attention`` followed by ``.backward()``. As in
the forward benchmark (``_suite.py``), every ratio compares rows measured in the same run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from attnlab.bench._measure import Config, Result
from attnlab.bench._suite import (
    Report,
    Target,
    plan_run,
    sweep,
    torch_targets,
)
from attnlab.errors import AttnlabError

DEFAULT_NS = (1024, 2048, 4096, 8192)
QUICK_NS = (512, 1024)
MEMORY_N = 16_384  # the memory check: one head, where the dense tables alone are 2 GiB
MEMORY_LIMIT_MIB = 256.0


def backward(
    ns: Sequence[int] | None = None,
    *,
    heads: int = 8,
    d: int = 64,
    masks: Sequence[str] = ("none", "causal"),
    quick: bool = False,
    repeats: int | None = None,
    rounds: int = 1,
    use_torch: bool = True,
    isolate: bool = True,
    checks: bool | None = None,
    progress: Callable[[Result], None] | None = None,
) -> Report:
    """Run the backward benchmark: attnlab dense and blockwise beside torch, and the targets.

    Args:
        ns: sequence lengths N (= M); default 1024 to 8192 (512 and 1024 with ``quick``).
        heads, d: h and d_k = d_v; B = 1, float32.
        masks: "none" and/or "causal".
        quick: small sizes and 3 timed runs: a fast look, not the targets.
        repeats: timed runs per configuration after the first (default 7, 3 with quick);
            a configuration stops after 20 s once it has 3.
        rounds: measure every row this many times, the rows taking turns, each row's time
            the median of all its runs (as ``bench.attention``).
        use_torch: include torch's SDPA forward and backward when importable.
        isolate: each configuration in its own subprocess (default; its peak memory is its own).
        checks: also run the memory check (blockwise, N = 16384, h = 1); default: only for the
            full default suite.
        progress: called with each Result as it is measured.

    Returns:
        A Report; ``report.format()`` is the table ``attnlab bench backward`` prints.
    """
    for mask in masks:
        if mask not in ("none", "causal"):
            raise AttnlabError(f"expected masks among 'none', 'causal', but got {mask!r}")
    ns, repeats, checks, with_torch, run = plan_run(
        ns, (QUICK_NS if quick else DEFAULT_NS), quick, repeats, rounds, checks, use_torch, isolate
    )
    settings = {"isolated": isolate, "torch": with_torch, "backward": True, "rounds": rounds}
    report, measured = sweep(ns, heads, d, masks, repeats, run, progress, settings)
    if checks:
        base = Config("blockwise", MEMORY_N, 1, d, backward=True)
        measured(replace(base, repeats=0), report.checks)  # one call: the peak is what matters
    report.targets = targets(report)
    return report


def targets(report: Report) -> list[Target]:
    """The backward targets, each from numbers measured in this report (None where not run)."""
    out = torch_targets(report, (2048, 4096), "blockwise backward >= 1.0x torch", 1.0)
    t = Target("causal >= 1.7x faster than no mask, N=8192", 1.7)
    full, causal = report.find("blockwise", 8192), report.find("blockwise", 8192, "causal")
    if full and causal:
        t.value = full.seconds / causal.seconds
        t.detail = f"{causal.seconds * 1e3:.0f} ms vs {full.seconds * 1e3:.0f} ms"
    out.append(t)
    t = Target(
        f"peak memory < 256 MiB, blockwise backward N={MEMORY_N}, h=1",
        MEMORY_LIMIT_MIB,
        unit="MiB",
        below=True,
    )
    mem = report.find("blockwise", MEMORY_N, heads=1)
    if mem and mem.peak_mib is not None:
        t.value = mem.peak_mib
        tables = 2 * MEMORY_N * MEMORY_N * 4 / 2**30
        t.detail = (
            f"above inputs and gradients; the dense backward's tables would be {tables:.0f} GiB"
        )
    out.append(t)
    return out
