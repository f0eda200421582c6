"""The Typer app object and the helpers every command module shares.

Command modules (``core``, ``labs``, ``bench``, ``serve``) register their commands on ``app``;
``attnlab.cli`` imports them all. Errors a user can cause become one red line and exit code 2.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated

import typer
from rich.console import Console

from attnlab.errors import AttnlabError

app = typer.Typer(
    name="attnlab",
    help="Attention you can compute by hand, check, see, and run fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

USAGE_ERROR = 2


def fail(message: str, code: int = USAGE_ERROR) -> typer.Exit:
    """Print one red line on stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def friendly_errors(fn):
    """Turn attnlab's typed errors (all ValueErrors) into one line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (AttnlabError, ValueError, TypeError) as exc:
            raise fail(str(exc)) from None

    return wrapper


def writable(option: str, path) -> None:
    """Fail before any work if ``path`` cannot be written (a lab or benchmark may take minutes)."""
    if path is None:
        return
    from pathlib import Path

    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not folder.is_dir():
        raise fail(f"{option}: expected a file in an existing folder, but got {str(path)!r}")
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        raise fail(f"{option}: cannot write {str(path)!r} ({exc.strerror})") from None


def parse_matrix(name: str, text: str) -> list[list[float]]:
    """Parse '[[3,-3],[1,1]]' into a rectangular list of rows of numbers, or fail clearly."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise fail(
            f"--{name}: expected a JSON matrix such as [[3,-3],[1,1]], but got {text!r}"
        ) from None
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise fail(f"--{name}: expected a list of rows such as [[3,-3],[1,1]], but got {text!r}")
    widths = {len(r) for r in value}
    if len(widths) != 1 or 0 in widths:
        raise fail(
            f"--{name}: expected every row to have the same, non-zero width, but got row widths {[len(r) for r in value]}"
        )
    for i, row in enumerate(value):
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise fail(f"--{name}: expected numbers, but got {x!r} at row {i}, column {j}")
    return value


def version_callback(show: bool) -> None:
    if show:
        from attnlab import __version__

        console.print(f"attnlab {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Attention you can compute by hand, check, see, and run fast."""
