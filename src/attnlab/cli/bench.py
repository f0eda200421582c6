"""``attnlab bench ...``: side-by-side benchmarks (a sub-app; each benchmark is one command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from attnlab.cli._app import (
    OneLineErrors,
    app,
    console,
    err_console,
    fail,
    friendly_errors,
)
from attnlab.cli._files import check_target, write_target

bench_app = typer.Typer(
    cls=OneLineErrors,
    help="Side-by-side benchmarks: attnlab beside PyTorch and the machine's GEMM ceiling.",
    no_args_is_help=True,
)

#: The longest sequence a benchmark times: N = 2^20 already takes hours per configuration here.
MAX_N = 2**20
app.add_typer(bench_app, name="bench")


def _lengths(values: list[str] | None) -> list[int] | None:
    # Accept --n 512 --n 1024 and --n 512,1024 alike.
    if not values:
        return None
    out = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            # Digits only: int() would also take "1_000", "+5" and 10,000-digit numbers.
            if not part.isascii() or not part.isdigit() or len(part) > 9:
                raise fail(f"--n: expected whole numbers such as 512,1024, but got {part[:40]!r}")
            n = int(part)
            if not 1 <= n <= MAX_N:
                raise fail(f"--n: expected lengths from 1 to {MAX_N:,}, but got {n:,}")
            out.append(n)
    return out


@bench_app.command("attention")
@friendly_errors
def attention_command(
    n: Annotated[
        list[str] | None,
        typer.Option(
            "--n",
            help="Sequence lengths N (= M): repeat the option or give a comma list "
            "(--n 512,1024). Default: 512 to 16384 and the targets' checks.",
        ),
    ] = None,
    heads: Annotated[int, typer.Option(min=1, help="Heads h (B = 1).")] = 8,
    d: Annotated[int, typer.Option(min=1, help="Head width d_k = d_v.")] = 64,
    causal: Annotated[
        bool, typer.Option(help="Causal rows only (default: no mask and causal).")
    ] = False,
    window: Annotated[
        int | None, typer.Option(min=1, help="Also time a sliding window of this many keys.")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="N = 512 to 2048, 3 runs each: about 20 s on 2 cores.")
    ] = False,
    repeats: Annotated[
        int | None, typer.Option(min=1, help="Timed runs per row (default 7; 3 with --quick).")
    ] = None,
    torch: Annotated[bool, typer.Option(help="Time PyTorch's SDPA beside attnlab.")] = True,
    isolate: Annotated[
        bool,
        typer.Option(help="Run each configuration in its own process (peak memory is its own)."),
    ] = True,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write every number to this JSON file.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --json file if it already exists.")
    ] = False,
) -> None:
    """Time attnlab dense and blockwise attention beside torch SDPA, and check the speed targets (docs/bench.md)."""
    from attnlab import bench

    check_target("--json", json_path, force)
    masks = ["causal"] if causal else ["none", "causal"]
    if window is not None:
        masks.append("window")

    report = bench.attention(
        _lengths(n),
        heads=heads,
        d=d,
        masks=masks,
        window=window or 512,
        quick=quick,
        repeats=repeats,
        use_torch=torch,
        isolate=isolate,
        progress=_progress,
    )
    _show(report, json_path, force)


def _progress(result) -> None:
    c = result.config
    what = f"{c.method} N={c.n} h={c.heads} {c.mask}"
    done = result.error or f"{result.seconds * 1e3:.1f} ms"
    err_console.print(f"[dim]  {what}: {done}[/]", highlight=False)


def _show(report, json_path: Path | None, force: bool) -> None:
    text = (
        report.format()
        .replace("  PASS  ", "  [green]PASS[/]  ")
        .replace("  FAIL  ", "  [red]FAIL[/]  ")
    )
    console.print(text, highlight=False, soft_wrap=True)
    if json_path is not None:
        write_target("--json", json_path, json.dumps(report.to_dict(), indent=2) + "\n", force)
        console.print(f"wrote {json_path}", highlight=False)
    runs = report.results + report.checks
    if runs and all(r.error for r in runs):  # nothing was measured: a script must not read 0
        raise fail(f"every configuration failed; the first: {runs[0].error[:120]}", code=1)


@bench_app.command("backward")
@friendly_errors
def backward_command(
    n: Annotated[
        list[str] | None,
        typer.Option(
            "--n",
            help="Sequence lengths N (= M): repeat the option or give a comma list "
            "(--n 1024,2048). Default: 1024 to 8192 and the memory check at 16384.",
        ),
    ] = None,
    heads: Annotated[int, typer.Option(min=1, help="Heads h (B = 1).")] = 8,
    d: Annotated[int, typer.Option(min=1, help="Head width d_k = d_v.")] = 64,
    causal: Annotated[
        bool, typer.Option(help="Causal rows only (default: no mask and causal).")
    ] = False,
    quick: Annotated[bool, typer.Option(help="N = 512 and 1024, 3 runs each.")] = False,
    repeats: Annotated[
        int | None, typer.Option(min=1, help="Timed runs per row (default 7; 3 with --quick).")
    ] = None,
    torch: Annotated[
        bool, typer.Option(help="Time PyTorch's SDPA forward + backward beside attnlab.")
    ] = True,
    isolate: Annotated[
        bool,
        typer.Option(help="Run each configuration in its own process (peak memory is its own)."),
    ] = True,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write every number to this JSON file.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --json file if it already exists.")
    ] = False,
) -> None:
    """Time attnlab's gradients (dense and blockwise) beside torch's fused backward, against its targets."""
    from attnlab import bench

    check_target("--json", json_path, force)
    report = bench.backward(
        _lengths(n),
        heads=heads,
        d=d,
        masks=["causal"] if causal else ["none", "causal"],
        quick=quick,
        repeats=repeats,
        use_torch=torch,
        isolate=isolate,
        progress=_progress,
    )
    _show(report, json_path, force)


@bench_app.command("labs")
@friendly_errors
def labs_command(
    repeats: Annotated[int, typer.Option(min=1, max=100, help="Runs per lab.")] = 3,
    lab: Annotated[
        list[str] | None,
        typer.Option("--lab", help="Labs to time (default: variance and saturation)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the table as CSV.")] = False,
) -> None:
    """Median wall time of the labs at their defaults, against the 2 s target."""
    from functools import partial

    from attnlab.cli.labs import _present
    from attnlab.labs.timing import time_labs

    labs = tuple(lab) if lab else ("variance", "saturation")
    run = partial(time_labs, repeats, labs)
    _present(run, f"Lab wall time, median of {repeats}", as_json, as_csv, None)
