"""``attnlab verify CASE``: judge a kernel's attention output (and gradients) saved to a file.

Exit codes: 0 every tensor passes, 1 one fails, 2 the case cannot be judged (a missing array,
shapes that disagree, an unknown entry, a bad dtype, an unreadable file), with one red line
naming the array or option. The library does the work (``attnlab.verifier``); this module
parses, calls and presents.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from attnlab._atomic import probe_folder
from attnlab.cli._app import app, clip, console, err_console, fail, friendly_errors

FAIL = 1


def _check_plot(plot: Path | None, force: bool) -> None:
    """Refuse a plot path before any work: the wrong suffix, no folder, or a file to keep."""
    if plot is None:
        return
    if plot.suffix.lower() not in (".html", ".htm"):
        raise fail(f"--plot: expected an .html file, but got {clip(str(plot))} instead")
    folder = plot.parent if str(plot.parent) else Path(".")
    if plot.is_dir() or not folder.is_dir():
        raise fail(f"--plot: expected a file in an existing folder, but got {clip(str(plot))}")
    if plot.exists() and not force:
        raise fail(f"--plot: {clip(str(plot))} already exists; pass --force to overwrite it")
    try:  # what only a real write finds (/proc, a read-only mount, for root), before the work
        probe_folder(plot)
    except OSError as exc:
        raise fail(f"--plot: cannot write {clip(str(plot))} ({exc.strerror or exc})") from None


def _show(report) -> None:
    table = Table(title=f"attnlab verify: {report.dtype} kernel, layout {report.layout}")
    for column in report.COLUMNS:
        right = column not in ("tensor", "dtype", "verdict") and not column.startswith("worst")
        table.add_column(column, justify="right" if right else "left")
    for row in report.rows():
        verdict = row[-1]
        style = "green" if verdict == "pass" else "bold red"
        table.add_row(*(escape(c) for c in row[:-1]), f"[{style}]{verdict}[/]")
    console.print(table)
    style = "green" if report.passed else "bold red"
    console.print(f"[{style}]{escape(report.summary())}[/]", highlight=False)
    console.print(
        f"[dim]rule: error <= {report.factor:g} x baseline error + atol; baseline: a plain "
        f"attention in each tensor's baseline dtype; exact: attnlab in float64[/]",
        highlight=False,
    )


@app.command("verify")
@friendly_errors
def verify_command(
    case: Annotated[
        Path,
        typer.Argument(
            help="A .npz or .safetensors file: q, k, v, out [, lse, do, dq, dk, dv] and options "
            "(causal, window_size, softcap, softmax_scale, alibi_slopes, sinks, "
            "cu_seqlens_q, cu_seqlens_k, dropout_p with dropout_mask or S_dmask); or a KV-cache "
            "case (k_cache, v_cache, cache_seqlens, ...), an FP8 case (float8 q, k, v with "
            "q/k/v_descale), split-K partials (out_partials, lse_partials, kv_splits) or a "
            "FlashMLA case (head_dim_v, or indices); docs/verify.md."
        ),
    ],
    layout: Annotated[
        str,
        typer.Option(help="bshd: (batch, seq, heads, dim), FlashAttention's; bhsd: SDPA's."),
    ] = "bshd",
    factor: Annotated[
        float, typer.Option(min=0.0, help="Pass when error <= factor x baseline error + atol.")
    ] = 2.0,
    atol: Annotated[
        float | None,
        typer.Option(min=0.0, help="The allowance added; default 2 ulps of each tensor's dtype."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(dir_okay=False, help="Write the error per (head, row) and per tile (.html)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the --plot file if it exists.")
    ] = False,
    tile: Annotated[int, typer.Option(min=1, help="Query rows per tile in the plot.")] = 128,
    repeat: Annotated[
        Path | None,
        typer.Option(help="A second dump of the same run: every array must be bitwise equal."),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(help="tcp://HOST:PORT: compute the case on that Dask cluster's workers."),
    ] = None,
    max_bytes: Annotated[
        int,
        typer.Option(min=1, help="Bytes of arrays the case file may declare, read first."),
    ] = 2 * 2**30,
) -> None:
    """Judge a kernel's output against the exact answer, as FlashAttention's tests do.

    The exact answer is attnlab's, in float64; the baseline is a plain attention in the wider
    of the kernel's dtype and the tensor's. Each tensor passes when its largest error is at
    most --factor times the baseline's plus --atol. Exit 0: pass, 1: fail (or a --repeat not
    bitwise equal), 2: a case that cannot be judged.
    """
    from attnlab.verifier import verify_file, write_plot

    if layout not in ("bshd", "bhsd"):
        raise fail(f"--layout: expected bshd or bhsd, but got {clip(layout)} instead")
    _check_plot(plot, force)
    judging = {"factor": factor, "atol": atol, "max_bytes": max_bytes, "repeat": repeat}
    with contextlib.ExitStack() as stack:
        client = None
        if scheduler is not None:  # connected (or one line) before any work
            from attnlab.cli.labs import _scheduler

            client = stack.enter_context(_scheduler(scheduler))
        report = verify_file(case, layout=layout, client=client, **judging)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _show(report)
    if plot is not None:
        write_plot(report, plot, force=force, tile=tile)
        err_console.print(f"wrote {escape(str(plot))}", highlight=False)
    if not report.passed:
        raise typer.Exit(FAIL)
