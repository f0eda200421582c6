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


def _lengths_option(example_and_default: str):
    """--n, repeatable or a comma list; the text names an example and the default."""
    text = f"Sequence lengths N (= M): repeat the option or give a comma list {example_and_default}"
    return Annotated[list[str] | None, typer.Option("--n", help=text)]


# The options both benchmarks take, declared once.
Heads = Annotated[int, typer.Option(min=1, help="Heads h (B = 1).")]
Width = Annotated[int, typer.Option(min=1, help="Head width d_k = d_v.")]
CausalOnly = Annotated[bool, typer.Option(help="Causal rows only (default: no mask and causal).")]
Repeats = Annotated[
    int | None, typer.Option(min=1, help="Timed runs per row (default 7; 3 with --quick).")
]
Rounds = Annotated[
    int,
    typer.Option(
        min=1,
        max=20,
        help="Measure every row this many times, the rows taking turns; each row's time is "
        "the median of all its runs, so a machine whose speed drifts slows every row alike.",
    ),
]
Isolate = Annotated[
    bool, typer.Option(help="Run each configuration in its own process (peak memory is its own).")
]
JsonPath = Annotated[
    Path | None, typer.Option("--json", help="Also write every number to this JSON file.")
]
Force = Annotated[bool, typer.Option("--force", help="Replace the --json file if it exists.")]


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
    n: _lengths_option("(--n 512,1024). Default: 512 to 16384 and the targets' checks.") = None,
    heads: Heads = 8,
    d: Width = 64,
    causal: CausalOnly = False,
    window: Annotated[
        int | None, typer.Option(min=1, help="Also time a sliding window of this many keys.")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="N = 512 to 2048, 3 runs each: about 20 s on 2 cores.")
    ] = False,
    repeats: Repeats = None,
    rounds: Rounds = 1,
    torch: Annotated[bool, typer.Option(help="Time PyTorch's SDPA beside attnlab.")] = True,
    isolate: Isolate = True,
    json_path: JsonPath = None,
    force: Force = False,
) -> None:
    """Time attnlab dense and blockwise attention beside torch SDPA, and check the speed targets of docs/bench.md."""
    extra = {"masks": ["window"] if window is not None else [], "window": window or 512}
    extra["rounds"] = rounds
    _measure("attention", n, (heads, d, causal), quick, repeats, torch, isolate, (json_path, force),
             **extra)  # fmt: skip


def _measure(name, n, shape, quick, repeats, torch, isolate, json_out, masks=(), **options):
    """Run one benchmark (``bench.attention`` or ``bench.backward``, by ``name``) with the
    options both commands share, showing each row as it is measured, then the report.
    ``shape`` is (--heads, --d, --causal), ``json_out`` the (--json path, --force) pair, and
    ``masks`` any masks timed beyond no mask and causal."""
    from attnlab import bench

    check_target("--json", json_out[0], json_out[1])
    heads, d, causal = shape
    masks = (["causal"] if causal else ["none", "causal"]) + list(masks)
    report = getattr(bench, name)(
        _lengths(n), heads=heads, d=d, masks=masks, quick=quick, repeats=repeats,
        use_torch=torch, isolate=isolate, progress=_progress, **options,
    )  # fmt: skip
    _show(report, *json_out)


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
    n: _lengths_option(
        "(--n 1024,2048). Default: 1024 to 8192 and the memory check at 16384."
    ) = None,
    heads: Heads = 8,
    d: Width = 64,
    causal: CausalOnly = False,
    quick: Annotated[bool, typer.Option(help="N = 512 and 1024, 3 runs each.")] = False,
    repeats: Repeats = None,
    rounds: Rounds = 1,
    torch: Annotated[
        bool, typer.Option(help="Time PyTorch's SDPA forward + backward beside attnlab.")
    ] = True,
    isolate: Isolate = True,
    json_path: JsonPath = None,
    force: Force = False,
) -> None:
    """Time attnlab's gradients (dense and blockwise) beside torch's fused backward (docs/bench.md)."""
    _measure("backward", n, (heads, d, causal), quick, repeats, torch, isolate, (json_path, force),
             rounds=rounds)  # fmt: skip


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
    """Median wall time of the labs at their defaults, against their 2 s target."""
    from functools import partial

    from attnlab.cli.labs import _present
    from attnlab.labs.timing import time_labs

    labs = tuple(lab) if lab else ("variance", "saturation")
    run = partial(time_labs, repeats, labs)
    _present(run, f"Lab wall time, median of {repeats}", as_json, as_csv, None)


@bench_app.command("verify")
@friendly_errors
def verify_command(
    n: Annotated[int, typer.Option("--n", min=16, max=65536, help="N = M.")] = 4096,
    heads: Heads = 8,
    d: Width = 128,
    dtype: Annotated[str, typer.Option(help="The kernel's dtype: float16 or float32.")] = "float16",
    causal: Annotated[bool, typer.Option(help="A causal case.")] = True,
    backward: Annotated[bool, typer.Option(help="Judge dq, dk, dv too.")] = True,
    repeats: Annotated[int, typer.Option(min=1, max=20, help="Timed calls per side.")] = 1,
    torch: Annotated[bool, typer.Option(help="Time torch's float64 SDPA beside it.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(help="tcp://HOST:PORT: verify on that Dask cluster's workers."),
    ] = None,
) -> None:
    """Time `attnlab verify` on one case beside torch's float64 SDPA forward and backward."""
    from attnlab.bench import verify_cost

    if dtype not in ("float16", "float32"):
        raise fail(f"--dtype: expected float16 or float32, but got {dtype[:40]!r} instead")
    if scheduler is not None:  # one line now, not a failed child after the case is written
        from attnlab.cli.labs import _scheduler

        with _scheduler(scheduler):
            pass
    result = verify_cost(n, heads, d, dtype, causal, backward, repeats, torch, scheduler=scheduler)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    c = result["case"]
    console.print(
        f"verify cost: B=1 N={c['N']} h={c['h']} d={c['d']} {c['dtype']}"
        f"{' causal' if c['causal'] else ''}{', forward and backward' if c['backward'] else ''}"
        f"{f', on the Dask cluster at {scheduler}' if scheduler else ''}",
        highlight=False,
    )
    for side in ("attnlab", "torch"):
        r = result.get(side)
        if r is None:
            continue
        said = r.get("error") or f"{r['seconds']:.2f} s, peak resident {r['peak_mib']:.0f} MiB"
        label = "attnlab verify" if side == "attnlab" else "torch float64 SDPA"
        console.print(f"  {label:<20} {said}", highlight=False)
        if r.get("diagnosis_seconds"):  # the random case fails: its diagnosis, on its own
            part, rest = r["diagnosis_seconds"], r["verdict_seconds"]
            console.print(
                f"  {'of which diagnosis':<20} {part:.2f} s ({part / max(rest, 1e-9):.2f} x the "
                "rest of the call)",
                highlight=False,
            )
    if "ratio" in result:
        console.print(
            f"  ratio {result['ratio']:.2f} x torch's time (the verdict, diagnosis left out)",
            highlight=False,
        )


from attnlab.cli.bench_small import small_command  # noqa: E402  (its own module)

bench_app.command("small")(small_command)


@bench_app.command("model")
@friendly_errors
def model_command(
    n: _lengths_option("(--n 256,1024). Default: 256 and 1024.") = None,
    repeats: Annotated[int, typer.Option(min=1, max=50, help="Timed runs per row (median).")] = 3,
    json_path: JsonPath = None,
    force: Force = False,
) -> None:
    """Time a GPT-2-small-shaped forward pass (attnlab.models) beside transformers' eager one,
    with each process's peak memory (needs torch and transformers)."""
    from attnlab import bench
    from attnlab.bench._suite import torch_available

    check_target("--json", json_path, force)
    if not torch_available():
        raise fail("bench model needs torch and transformers (the dev extras and torch==2.13.0)")
    lengths = [x for x in (_lengths(n) or bench._model.DEFAULT_NS) if x <= 1024]
    if not lengths:
        raise fail("--n: GPT-2 small reads at most 1,024 tokens")

    def progress(row):
        err_console.print(
            f"[dim]  {row['library']} N={row['n']}: {row['seconds'] * 1e3:.1f} ms[/]",
            highlight=False,
        )

    report = bench.model(lengths, repeats=repeats, progress=progress)
    console.print(report.format(), highlight=False, soft_wrap=True)
    if json_path is not None:
        write_target("--json", json_path, json.dumps(report.to_dict(), indent=2) + "\n", force)
