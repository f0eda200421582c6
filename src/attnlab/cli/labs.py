"""`attnlab lab NAME` and `attnlab exercises`: thin front ends to attnlab.labs and .exercises.

Every lab prints a Rich table and a few sentences, or ``--json`` / ``--csv`` on stdout for
teachers; ``--plot FILE.html`` writes an offline Plotly page (plotly.js embedded). Progress
bars and notes go to stderr, so stdout stays machine-readable. A bad option or argument is one
red line and exit code 2; `exercises check` exits 0 when right and 1 when wrong.
"""

from __future__ import annotations

import csv
import io
import json
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from attnlab.cli._app import app, console, err_console, fail, friendly_errors, writable
from attnlab.labs import COLUMN_TITLES

try:  # Typer >= 0.2x vendors click; its usage errors are that copy's, not click's
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError


class _OneLineErrors(typer.core.TyperGroup):
    """Usage errors inside this group become one red line and exit code 2, like attnlab's own."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            names = ", ".join(self.list_commands(ctx))
            raise fail(f"expected one of {names}, but got {name!r} instead")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as exc:  # a bad option value, a missing argument
            raise fail(exc.format_message()) from None


lab_app = typer.Typer(
    cls=_OneLineErrors, no_args_is_help=True, help="Run one of the chapter's labs (§6.3-§6.6)."
)
exercises_app = typer.Typer(
    cls=_OneLineErrors, invoke_without_command=True, help="The chapter's seven exercises."
)
app.add_typer(lab_app, name="lab")
app.add_typer(exercises_app, name="exercises")

Seed = Annotated[int, typer.Option("--seed", min=0, help="Same seed, same numbers.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")]
AsCsv = Annotated[bool, typer.Option("--csv", help="Print the table as CSV.")]
Plot = Annotated[
    Path | None, typer.Option("--plot", dir_okay=False, help="Write a Plotly page (.html).")
]
Widths = Annotated[list[int] | None, typer.Option("--width", min=1, max=65536, help="d_k.")]
Threshold = Annotated[
    float,
    typer.Option("--threshold", min=0.0, max=1.0, help="p_max above it saturates; in (0, 1)."),
]


def _cell(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.5g}" if x == 0 or 1e-3 <= abs(x) < 1e5 else f"{x:.3e}"
    return str(x)


@contextmanager
def _progress(label: str):
    """A transient progress bar on stderr, shown only on a terminal."""
    columns = (TextColumn(label), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(
        *columns, console=err_console, transient=True, disable=not err_console.is_terminal
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _present(
    run, title: str, as_json: bool, as_csv: bool, plot: Path | None, *, progress: bool = True
) -> None:
    """Run the lab (``run(progress=...)`` when ``progress``), then print or write the result."""
    if as_json and as_csv:
        raise fail("expected at most one of --json and --csv, but got both")
    if plot is not None and plot.suffix.lower() not in (".html", ".htm"):
        raise fail(f"expected --plot to name an .html file, but got {str(plot)!r} instead")
    writable("--plot", plot)
    if not progress:  # instant labs: no bar
        result = run()
    else:
        with _progress(title) as update:
            result = run(progress=update)
    if plot is not None:
        import plotly.io  # here: only --plot pays for importing plotly

        from attnlab.labs.plots import figure

        plotly.io.write_html(figure(result), str(plot), include_plotlyjs=True, full_html=True)
        err_console.print(f"wrote {plot}", highlight=False)
    columns, rows = result.table()
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2, allow_nan=False))
    elif as_csv:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([columns, *[
            ["" if x is None else x for x in row] for row in rows]])  # fmt: skip
        typer.echo(out.getvalue(), nl=False)
    else:
        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(
                COLUMN_TITLES.get(c, c), justify="left" if c in ("case", "token") else "right"
            )
        for row in rows:
            table.add_row(*map(_cell, row))
        console.print(table)
        for line in result.summary():
            console.print(f"  {line}", highlight=False)


@lab_app.command("variance")
@friendly_errors
def variance_cmd(
    width: Widths = None,
    draws: Annotated[int, typer.Option("--draws", min=2, help="Pairs (q, k) per width.")] = 200_000,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Threads.")] = None,
    seed: Seed = 0,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    plot: Plot = None,
) -> None:
    """Var(q·k) grows like d_k; divided by d_k it stays at 1 (§6.3, lab 2b)."""
    from attnlab.labs import variance_scaling

    widths = tuple(width) if width else (32, 64, 128, 256)
    run = partial(variance_scaling, widths, draws, seed, workers=workers)
    _present(run, f"Score variance, {draws:,} draws per width, seed {seed}", as_json, as_csv, plot)


@lab_app.command("saturation")
@friendly_errors
def saturation_cmd(
    d_k: Annotated[int, typer.Option("--d-k", min=1, max=65536, help="Query/key width.")] = 128,
    keys: Annotated[int, typer.Option("--keys", min=2, max=4096, help="Keys per trial.")] = 64,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Softmax trials.")] = 500,
    threshold: Threshold = 0.99,
    seed: Seed = 0,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    plot: Plot = None,
) -> None:
    """How often softmax saturates without the 1/√d_k scaling, and with it (§6.3, lab 2b)."""
    from attnlab.labs import saturation

    run = partial(saturation, d_k, keys, trials, threshold, seed)
    _present(run, f"Saturation, d_k={d_k}, {keys} keys, seed {seed}", as_json, as_csv, plot)


@lab_app.command("sweep")
@friendly_errors
def sweep_cmd(
    width: Widths = None,
    keys: Annotated[int, typer.Option("--keys", min=2, max=4096, help="Keys per trial.")] = 64,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Trials per width.")] = 500,
    threshold: Threshold = 0.99,
    draws: Annotated[int, typer.Option("--draws", min=2, help="Scores per histogram.")] = 20_000,
    bins: Annotated[int, typer.Option("--bins", min=1, max=10_000, help="Histogram bins.")] = 40,
    seed: Seed = 0,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    plot: Plot = None,
) -> None:
    """Saturation and score histograms across d_k, scaled and unscaled (figure sqrt-dk-histogram)."""
    from attnlab.labs import width_sweep

    widths = tuple(width) if width else (16, 32, 64, 128, 256)
    run = partial(width_sweep, widths, keys, trials, threshold, draws, bins, seed)
    _present(run, f"Width sweep, {trials} trials per width, seed {seed}", as_json, as_csv, plot)


@lab_app.command("permutation")
@friendly_errors
def permutation_cmd(
    d_model: Annotated[int, typer.Option("--d-model", min=1, max=4096, help="Vector width.")] = 8,
    sentence: Annotated[str, typer.Option(help="The sentence.")] = "The dog bit the man",
    shuffled: Annotated[str, typer.Option(help="Its words reordered.")] = "The man bit the dog",
    word: Annotated[str, typer.Option(help="The word to follow.")] = "dog",
    seed: Seed = 0,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    plot: Plot = None,
) -> None:
    """Attention alone cannot see word order; position vectors let it (§6.5)."""
    from attnlab.labs import permutation

    run = partial(permutation, seed, d_model, sentence=sentence, shuffled=shuffled, word=word)
    title = f"Permutation, d_model={d_model}, seed {seed}"
    _present(run, title, as_json, as_csv, plot, progress=False)


@lab_app.command("cost")
@friendly_errors
def cost_cmd(
    d_model: Annotated[int, typer.Option("--d-model", min=1, max=8192, help="Model width.")] = 256,
    n: Annotated[list[int] | None, typer.Option("--n", min=1, help="Sequence lengths N.")] = None,
    heads: Annotated[int, typer.Option("--heads", min=1, help="Heads; must divide d_model.")] = 4,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=100, help="Runs per part.")] = 3,
    dtype: Annotated[Literal["float32", "float64"], typer.Option(help="Arithmetic.")] = "float32",
    seed: Seed = 0,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    plot: Plot = None,
) -> None:
    """Time multi-head attention across N beside the cost model of §6.6 (a benchmark)."""
    from attnlab.labs import cost_timing

    lengths = tuple(n) if n else (64, 128, 256, 512, 1024, 2048, 4096)
    run = partial(cost_timing, d_model, lengths, heads, repeats, seed, dtype=dtype)
    _present(run, f"MHA time, d_model={d_model}, {heads} heads, {dtype}", as_json, as_csv, plot)


# -- exercises ----------------------------------------------------------------------------------

Number = Annotated[int, typer.Argument(min=1, max=7, help="Exercise number, 1 to 7.")]


@exercises_app.callback()
def exercises_list(ctx: typer.Context, as_json: AsJson = False) -> None:
    """List the exercises; `show N` prints one, `check N ANSWER` grades an answer."""
    if ctx.invoked_subcommand is not None:
        return
    from attnlab.exercises import EXERCISES

    if as_json:
        typer.echo(json.dumps([ex.as_dict() for ex in EXERCISES], indent=2, allow_nan=False))
        return
    table = Table(title="Exercises (§6)", title_justify="left", show_lines=True)
    for col in ("#", "kind", "answer", "question"):
        table.add_column(col)
    for ex in EXERCISES:
        table.add_row(str(ex.number), ex.kind, "numeric" if ex.answer is not None else "written",
                      ex.question)  # fmt: skip
    console.print(table)


@exercises_app.command("show")
@friendly_errors
def exercises_show(
    number: Number,
    solution: Annotated[bool, typer.Option("--solution", help="Show the worked solution.")] = False,
    as_json: AsJson = False,
) -> None:
    """Print exercise N (and its worked solution with --solution)."""
    from attnlab.exercises import get

    ex = get(number)
    if as_json:
        typer.echo(json.dumps(ex.as_dict(), indent=2, allow_nan=False))
        return
    console.print(f"[bold]Exercise {ex.number}[/] ({ex.kind})\n{ex.question}", highlight=False)
    if solution:
        console.print(f"\n[bold]Solution[/]\n{ex.solution}", highlight=False)
    elif ex.answer is not None:
        console.print(f"\n[dim]attnlab exercises check {ex.number} ANSWER[/]", highlight=False)


@exercises_app.command("check")
@friendly_errors
def exercises_check(
    number: Number,
    answer: Annotated[str, typer.Argument(help="Your answer: a number for 2 and 5.")],
    as_json: AsJson = False,
) -> None:
    """Grade ANSWER to exercise N: exit 0 if right, 1 if wrong (written ones: see the solution)."""
    from attnlab.exercises import check

    verdict = check(number, answer)
    if as_json:
        typer.echo(json.dumps(verdict.as_dict(), indent=2, allow_nan=False))
    else:
        colour = {True: "green", False: "red", None: "yellow"}[verdict.correct]
        console.print(f"[bold {colour}]{verdict.message}[/]", highlight=False)
        if verdict.correct is not False:
            console.print(f"\n{verdict.solution}", highlight=False)
        else:
            console.print(f"[dim]attnlab exercises show {number} --solution[/]", highlight=False)
    if verdict.correct is False:
        raise typer.Exit(1)
