"""The benchmark report as plain text: one table, then the targets with PASS or FAIL."""

from __future__ import annotations

import numpy as np

from attnlab.bench._measure import Result

_HEAD = ("N", "mask", "method", "time ms", "GFLOP/s", "x torch", "x GEMM", "peak MiB")
_WIDTH = (6, 12, 10, 10, 8, 8, 7, 9)


def _mask(result: Result) -> str:
    c = result.config
    return f"window {c.window}" if c.mask == "window" else c.mask


def _row(cells) -> str:
    first = [f"{cells[0]:>{_WIDTH[0]}}", f"{cells[1]:<{_WIDTH[1]}}", f"{cells[2]:<{_WIDTH[2]}}"]
    rest = [f"{c:>{w}}" for c, w in zip(cells[3:], _WIDTH[3:], strict=True)]
    return "  ".join(first + rest).rstrip()


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _cells(report, r: Result, show_n: bool, show_mask: bool) -> list[str]:
    c = r.config
    n = (
        (f"{c.n}" if c.heads == report.settings["heads"] else f"{c.n} h={c.heads}")
        if show_n
        else ""
    )
    mask = _mask(r) if show_mask else ""
    if r.error:
        return [n, mask, c.method, "failed:", r.error[:60], "", "", ""]
    torch = report.find("torch", c.n, c.mask, c.heads, c.window)
    vs_torch = None if torch is None or c.method == "torch" else r.gflops / torch.gflops
    peak = _num(r.peak_mib, ".1f" if (r.peak_mib or 0) < 100 else ".0f")
    peak += "" if r.peak_exact else "*"
    return [
        n,
        mask,
        c.method,
        _num(r.seconds * 1e3, ".1f" if r.seconds < 10 else ".0f"),
        _num(r.gflops, ".1f"),
        _num(vs_torch, ".2f"),
        _num(r.gflops / report.gemm_gflops, ".2f"),
        peak,
    ]


def _table(report, results: list[Result]) -> list[str]:
    lines = [_row(_HEAD)]
    last = (None, None)
    for r in results:
        c = r.config
        key = (c.n, c.heads)
        show_n = key != last[0]
        show_mask = show_n or (c.mask, c.window) != last[1]
        if show_mask and last[0] is not None:
            lines.append("")
        lines.append(_row(_cells(report, r, show_n, show_mask)))
        last = (key, (c.mask, c.window))
    return lines


def tile_passes() -> str:
    """Which passes (numpy or numba) float32 calls take in this run (kernels/_fused.py)."""
    import importlib.util

    from attnlab.kernels import _fused
    from attnlab.kernels._tiles import natural_exp

    mode = _fused.choice()
    has = importlib.util.find_spec("numba") is not None
    if mode == "numpy" or not has:
        return f"numpy ({_fused.ENV}={mode}{'' if has else ', numba not installed'})"
    if mode == "auto" and not natural_exp(np.float32):
        return f"numpy ({_fused.ENV}=auto: numpy's float32 exp2 is vectorised on this CPU)"
    return f"numba ({_fused.ENV}={mode}; auto from {_fused.MIN_PAIRS:,} pairs, float32)"


def _rounds(rounds: int) -> str:
    if rounds == 1:
        return ""
    return f" in each of {rounds} rounds, the rows taking turns (the median of all of a row's runs)"


def format_report(report) -> str:
    m, s = report.machine, report.settings
    blas = m["blas"]
    kernel = blas.get("kernel") or "?"
    coretype = blas.get("OPENBLAS_CORETYPE")
    backward = s.get("backward", False)
    what = (
        "attention backward (dq, dk, dv from q, k, v and dO; torch: SDPA forward + .backward)"
        if backward
        else "attention"
    )
    lines = [
        f"{what}, float32, B=1, h={s['heads']}, d={s['d']}: time is the median of up to "
        f"{s['repeats']} runs after a first call"
        + _rounds(s.get("rounds", 1))
        + ("; each configuration in its own process" if s["isolated"] else ""),
        f"machine: {m['cpu']}, {m['cores']} cores; numpy {m['numpy']} with "
        f"{blas.get('version') or blas['library']} "
        f"({kernel} kernel{', OPENBLAS_CORETYPE=' + coretype if coretype else ''}); "
        f"torch {m['torch'] or 'not installed'}; blockwise tile passes: {tile_passes()}",
        f"GEMM ceiling: numpy float32 matmul 2048 x 2048 x 2048, best of 10: "
        f"{report.gemm_gflops:.0f} GFLOP/s",
        (
            "GFLOP/s = useful work 14·B·h·N·M·d / time (forward 4, backward 10; halved for "
            "causal); peak = resident-memory growth during the first call, less the gradients"
            if backward
            else "GFLOP/s = useful work 4·B·h·N·M·d / time (halved for causal; N·window pairs "
            "for a window); peak = resident-memory growth during the first call, less the output"
        ),
        "",
        *_table(report, report.results),
    ]
    if report.checks:
        lines += ["", "extra configurations for the targets:", *_table(report, report.checks)]
    if any(not r.peak_exact for r in report.results + report.checks):
        lines.append("* upper bound: this system would not reset the peak (ru_maxrss)")
    lines += ["", "targets:"]
    for t in report.targets:
        verdict = {True: "PASS", False: "FAIL", None: "----"}[t.passed]
        value = "not run" if t.value is None else f"{t.value:.3f}{t.unit}"
        if t.unit == "MiB" and t.value is not None:
            value = f"{t.value:.0f} MiB"
        detail = f"  ({t.detail})" if t.detail else ""
        lines.append(f"  {verdict}  {t.name}: {value}{detail}")
    return "\n".join(lines)
