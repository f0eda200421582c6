"""`attnlab lab NAME` and `attnlab exercises`: thin front ends to attnlab.labs and .exercises.

One command per lab, generated from its spec (``attnlab.labs.LABS``): each of the lab's
parameters becomes an option with the spec's default, bounds and help, so nothing here repeats
a lab's numbers. Every lab prints a Rich table and a few sentences, or ``--json`` / ``--csv`` on
stdout for teachers; ``--plot FILE.html`` writes an offline Plotly page (plotly.js embedded) of
the same plot the explorer draws. A run estimated past ``LONG_S`` seconds is refused unless
``--yes``; a long run shows a progress bar (stderr, on a terminal only) and Ctrl-C stops it with
one line, "interrupted", and exit code 130. A bad option or argument is one red line and exit
code 2; `exercises check` exits 0 when right and 1 when wrong.

A lab that declares ``client`` (the sampling labs) takes ``--scheduler ADDRESS``: the command
connects a ``dask.distributed.Client`` (within ``CONNECT_S`` seconds, else one line naming the
address and exit code 2), runs the lab's chunks on that cluster and closes the client; the
numbers are bitwise those of a local run. The estimate is then the lab's own for the cluster:
the chunks' work divided by the cluster's worker threads (over the 2 threads it was measured
on), plus a few milliseconds per chunk for scheduling; the saturation lab's chunks form a chain
on one stream, so only the sweep's widths and the score chunks share out.
"""

from __future__ import annotations

import gc
import inspect
import json
import socket
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from attnlab.cli._app import app, clip, console, err_console, fail, friendly_errors
from attnlab.cli._files import check_target, write_target
from attnlab.core.numbers import format_cell
from attnlab.labs import LABS, LabSpec, Param, jsonable
from attnlab.labs._spec import machine_bytes

try:  # Typer >= 0.2x vendors click; its usage errors are that copy's, not click's
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError

LONG_S = 60.0  # seconds of estimated work a run may take without --yes
PAST_LIMITS_S = 5.0  # the same, for a run past the explorer's bounds (a single trial of
# d_k = 65,536 and 4,096 keys is estimated at 5.4 s and took 12 s of CPU, 40 s on a busy machine)
INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT (128 + 2)
CONNECT_S = 5.0  # seconds to reach a --scheduler before giving up


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

AsJson = Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")]
AsCsv = Annotated[bool, typer.Option("--csv", help="Print the table as CSV.")]
Plot = Annotated[
    Path | None, typer.Option("--plot", dir_okay=False, help="Write a Plotly page (.html).")
]
Force = Annotated[
    bool, typer.Option("--force", help="Replace the --plot (or --save) file if it exists.")
]
Yes = Annotated[
    bool, typer.Option("--yes", help=f"Run even when the estimate passes {LONG_S:.0f} s.")
]
_OUTPUTS = {"as_json": (AsJson, False), "as_csv": (AsCsv, False), "plot": (Plot, None),
            "yes": (Yes, False), "force": (Force, False)}  # fmt: skip


def _cell(x) -> str:
    """A table cell as the notebook and the page write it (``core/numbers.py``), NaN as "—"."""
    return escape(format_cell(x))  # a user's word such as "[/x]" is text, not Rich markup


@contextmanager
def _progress(label: str):
    """A transient progress bar on stderr, shown only on a terminal."""
    columns = (TextColumn(label), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(
        *columns, console=err_console, transient=True, disable=not err_console.is_terminal
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _option(p: Param) -> inspect.Parameter:
    """The Typer option of one spec parameter: its type, flag, help, CLI bounds and default."""
    kind = Literal[p.choices] if p.choices else p.kind
    kind = list[kind] if p.many else kind
    if p.default is None:
        kind = kind | None
    low, high = p.bounds()
    bounds = {"min": low, "max": high} if p.kind in (int, float) and not p.choices else {}
    option = typer.Option(p.option, help=p.help, **bounds)
    return inspect.Parameter(
        p.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=p.default_for(),
        annotation=Annotated[kind, option],
    )


def _run(spec: LabSpec, params: dict, as_json, as_csv, plot: Path | None, yes: bool, force: bool):
    """Run on the --scheduler's cluster when one is named (``client``), else here."""
    _check_save(params, force)
    address = params.get("client")
    if address is None:
        return _run_here(spec, params, as_json, as_csv, plot, yes, force)
    with _scheduler(address) as client:
        threads = sum(client.nthreads().values())
        err_console.print(
            f"[dim]on {escape(address)}: {threads} worker thread(s)[/]", highlight=False
        )
        _run_here(spec, {**params, "client": client}, as_json, as_csv, plot, yes, force)


def _check_save(params: dict, force: bool) -> None:
    """A lab's ``--save`` file, as ``--plot``'s: an .npz name, checked before the training."""
    save = params.get("save")
    if params.get("snapshots") and not save:
        raise fail("--snapshots: expected --save FILE to keep the snapshots in, but got no --save")
    if not save:
        return
    if Path(save).suffix.lower() != ".npz":
        raise fail(f"--save: expected an .npz file, but got {clip(save)} instead")
    check_target("--save", save, force)


def _unreachable(address: str) -> str | None:
    """Why no Dask scheduler answers at a tcp:// address, or None when one seems to.

    Found before paying for importing dask, and bounded by CONNECT_S: a scheduler sends its
    handshake as soon as it accepts, while distributed's Client would wait forever on a port
    that accepts and never speaks. Addresses other than plain tcp://HOST:PORT are left to the
    Client (None).
    """
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S) as peer:
            first = peer.recv(1, socket.MSG_PEEK)  # the handshake's first byte, left unread
    except TimeoutError:
        return f"nothing answered within {CONNECT_S:g} s"
    except (OSError, ValueError, OverflowError) as exc:  # OverflowError: a port past 65535
        return getattr(exc, "strerror", None) or str(exc)
    return None if first else "it closed the connection"


@contextmanager
def _scheduler(address: str):
    """A Client connected to ``address``, closed on the way out; one line if it cannot be."""
    why = _unreachable(address)
    if why is not None:
        raise fail(f"--scheduler: no Dask scheduler answered at {clip(address)} ({why})")
    try:
        from distributed import Client
    except ImportError:
        raise fail("--scheduler needs dask.distributed: pip install 'attnlab[dask]'") from None
    try:
        client = Client(address, timeout=CONNECT_S, set_as_default=False)
    except ValueError as exc:  # not an address: 'foo', 'http://...'
        problem = f"expected an address like tcp://HOST:PORT, but got {clip(address)} ({exc})"
    except OSError:  # nothing answers there (refused, unknown host, a timeout)
        problem = f"no Dask scheduler answered at {clip(address)} within {CONNECT_S:g} s"
    else:
        try:
            yield client
        finally:
            client.close()
        return
    # The half-made Client closes now, while its event loop still runs: left to the end of the
    # interpreter, its close waits for a dead loop and prints a traceback.
    gc.collect()
    raise fail(f"--scheduler: {problem}")


def _run_here(
    spec: LabSpec, params: dict, as_json, as_csv, plot: Path | None, yes: bool, force: bool
):
    """Refuse work estimated past LONG_S without --yes, then run the lab and present it."""
    estimate = spec.estimate(**params)
    past = _past_explorer(spec, params)
    limit = LONG_S if not past else PAST_LIMITS_S
    have = machine_bytes()
    if have is not None and estimate.bytes > have // 2 and not yes:
        raise fail(
            f"expected at most half this machine's memory ({have / 2**31:,.1f} GiB), but this "
            f"run is estimated at {estimate.bytes / 2**30:,.1f} GiB; add --yes to run it anyway"
        )
    if estimate.seconds > limit and not yes:
        where = f" past the explorer's limits ({', '.join(past)})" if past else ""
        raise fail(
            f"expected at most {limit:.0f} s of work{where}, but this run is estimated at "
            f"{estimate}; add --yes to run it anyway"
        )
    run = partial(spec.run, **params)
    title = spec.heading.format(**params)
    _present(
        run, title, as_json, as_csv, plot, progress=spec.progress, titles=spec.titles, force=force
    )


def _past_explorer(spec: LabSpec, params: dict) -> list[str]:
    """The options whose values pass the web explorer's bounds (sized to answer in seconds),
    as "--d-k <= 1024": there the estimate is furthest from the runs it was measured on."""
    past = []
    for p in spec.params:
        _, high = p.bounds(web=True)
        value = params.get(p.name)
        values = value if isinstance(value, tuple) else (value,)
        if (
            high is not None
            and p.kind in (int, float)
            and any(isinstance(x, int | float) and x > high for x in values)
        ):
            past.append(f"{p.option} <= {high:g}")
    return past


def _present(
    run,
    title: str,
    as_json: bool,
    as_csv: bool,
    plot: Path | None,
    *,
    progress: bool = True,
    titles=lambda columns: columns,
    force: bool = False,
) -> None:
    """Run ``run`` (as ``run(progress=...)`` when ``progress``), then print or write the result.

    Shared with `attnlab bench labs`; ``titles`` maps the table's column keys to headings.
    """
    if as_json and as_csv:
        raise fail("expected at most one of --json and --csv, but got both")
    if plot is not None and plot.suffix.lower() not in (".html", ".htm"):
        raise fail(f"expected --plot to name an .html file, but got {str(plot)!r} instead")
    check_target("--plot", plot, force)
    if progress:
        with _progress(title) as update:
            result = run(progress=update)
    else:
        result = run()
    if plot is not None:
        import plotly.io  # here: only --plot pays for importing plotly

        from attnlab.labs._plotly import lab_figure

        figure = lab_figure(result)
        page = plotly.io.to_html(figure, include_plotlyjs=True, full_html=True)
        write_target("--plot", plot, page, force)
        err_console.print(f"wrote {escape(str(plot))}", highlight=False)
    if as_json:
        typer.echo(result.to_json())
    elif as_csv:
        typer.echo(result.to_csv(), nl=False)
    else:
        columns, rows = result.table()
        table = Table(title=escape(title), title_justify="left")
        for c, name in zip(columns, titles(columns), strict=True):
            table.add_column(name, justify="left" if c in ("case", "token", "lab") else "right")
        for row in jsonable(rows):  # plain Python numbers; NaN becomes None
            table.add_row(*map(_cell, row))
        console.print(table)
        for line in result.summary():
            console.print(f"  {escape(line)}", highlight=False)


def lab_command(name: str):
    """The command function for lab ``name``: the spec's options and the output options."""

    def command(**kwargs) -> None:
        outputs = {key: kwargs.pop(key) for key in _OUTPUTS}
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
        try:
            _run(LABS[name], params, **outputs)
        except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
            err_console.print("interrupted", highlight=False)
            raise typer.Exit(INTERRUPTED) from None

    spec = LABS[name]
    options = [_option(p) for p in spec.params]
    options += [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for key, (kind, default) in _OUTPUTS.items()
    ]
    command.__signature__ = inspect.Signature(options)
    command.__annotations__ = {o.name: o.annotation for o in options}
    command.__name__ = f"{name}_cmd"
    command.__doc__ = spec.summary
    return command


for _name in LABS:
    lab_app.command(_name)(friendly_errors(lab_command(_name)))


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
