"""The Typer app object and the helpers every command module shares.

Command modules (``core``, ``labs``, ``bench``, ``serve``) register their commands on ``app``;
``attnlab.cli`` imports them all. A mistake a user can make is one red line on stderr and exit
code 2: attnlab's own ``AttnlabError`` (through ``friendly_errors``), text the CLI parses itself
(``parse_matrix``, ``fail``), and Click's usage errors (``OneLineErrors``: an unknown command or
option, a bad or missing value). Any other exception is a bug and surfaces as a traceback.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from attnlab.errors import AttnlabError

try:  # Typer >= 0.2x vendors click; its usage errors are that copy's, not click's
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import NoArgsIsHelpError, UsageError

__all__ = [
    "ECHO",
    "MAX_TEXT",
    "USAGE_ERROR",
    "OneLineErrors",
    "app",
    "clip",
    "console",
    "err_console",
    "fail",
    "friendly_errors",
    "load_matrix",
    "parse_matrix",
    "to_floats",
]

USAGE_ERROR = 2
ECHO = 60  # characters of the user's text repeated in an error, so the error stays one line
MAX_TEXT = 4 * 2**20  # characters of one matrix option; a shell argument is at most 128 KiB


def clip(text: str, limit: int = ECHO) -> str:
    """``repr(text)``, cut to ``limit`` characters with the full length said."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text):,} characters)"


def fail(message: str, code: int = USAGE_ERROR) -> typer.Exit:
    """Print one red line on stderr and return the Exit to raise."""
    # escape: the message may repeat the user's text, which Rich would read as markup ('[/x]').
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _usage_line(exc: UsageError) -> str:
    message = " ".join(exc.format_message().split())  # Click's messages may span lines
    if exc.ctx is not None:
        message += f" (see '{exc.ctx.command_path} --help')"
    return message


def refuse_non_ascii_numbers(args) -> None:
    """Fail on an argument that Python would read as a number written in another script's
    digits ("١٩٥٩", "２"): int() and float() accept them, so an option would take them
    silently; attnlab's numbers are ASCII 0-9, as the web API's are."""
    for arg in args:
        text = str(arg).partition("=")[2] if str(arg).startswith("--") else str(arg)
        if text.isascii():
            continue
        try:
            float(text)
        except ValueError:
            continue
        raise fail(f"expected numbers written with the ASCII digits 0-9, but got {clip(text)}")


class OneLineErrors(typer.core.TyperGroup):
    """Usage errors in this group and every command under it: one red line and exit code 2.

    Used for the root ``app``, whose ``invoke`` sees the errors of every sub-app and command
    below it; sub-apps may use it too. ``attnlab`` or a sub-app with no arguments still prints
    its help.
    """

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            names = ", ".join(self.list_commands(ctx))
            raise fail(
                f"expected one of the commands {names}, but got {clip(name)} instead "
                f"(see '{ctx.command_path} --help')"
            )
        return super().resolve_command(ctx, args)

    def make_context(self, info_name, args, parent=None, **extra):
        refuse_non_ascii_numbers(args)
        # The root's own options (attnlab --bogus) are parsed here, before ``invoke``.
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            raise fail(_usage_line(exc)) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:  # `attnlab lab` alone: the help, as Click prints it
            raise
        except UsageError as exc:  # a bad option value, a missing argument, an unknown option
            raise fail(_usage_line(exc)) from None


app = typer.Typer(
    name="attnlab",
    cls=OneLineErrors,
    help="Attention you can compute by hand, check, see, and run fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def _reflowed(text: str | None) -> str | None:
    """``text`` with each paragraph's line breaks made spaces: a docstring wrapped at 100
    characters in the source otherwise broke ``--help``'s lines mid-sentence."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def unwrap_help(typer_app: typer.Typer) -> None:
    """Reflow the help of every command and group of ``typer_app``, its sub-apps' too."""
    for info in typer_app.registered_commands:
        info.help = _reflowed(info.help or inspect.getdoc(info.callback))
    for group in typer_app.registered_groups:
        group.help = _reflowed(group.help)
        if group.typer_instance is not None:
            group.typer_instance.info.help = _reflowed(group.typer_instance.info.help)
            unwrap_help(group.typer_instance)


def friendly_errors(fn):
    """Turn attnlab's own errors (``AttnlabError``) into one line and exit code 2.

    Nothing else is caught: a plain ``ValueError`` or ``TypeError`` from the library is a bug,
    and hiding it behind a usage message would hide the bug (docs/style.md, "catch only what you raise").
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AttnlabError as exc:
            raise fail(str(exc)) from None

    return wrapper


def load_matrix(name: str, text: str) -> list[list]:
    """Parse '[[3,-3],[1,1]]' into a rectangular, non-empty list of rows, entries unchecked.

    Cheap enough to run on anything a shell can pass, so a caller can check the matrix's size
    before converting any entry (``to_floats``) or building an array.
    """
    option, example = f"--{name}", "[[3,-3],[1,1]]"
    if len(text) > MAX_TEXT:
        raise fail(
            f"{option}: expected at most {MAX_TEXT:,} characters, but got {len(text):,} instead"
        )
    try:
        value = json.loads(text)
    except RecursionError:  # '[[[[...' nested past Python's stack; a matrix nests twice
        raise fail(
            f"{option}: expected a JSON matrix such as {example} (two levels of brackets), "
            f"but got text nested deeper than Python can parse: {clip(text)}"
        ) from None
    except ValueError:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise fail(
            f"{option}: expected a JSON matrix such as {example}, but got {clip(text)} instead"
        ) from None
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise fail(
            f"{option}: expected a list of rows such as {example}, but got {clip(text)} instead"
        )
    widths = [len(r) for r in value]
    if len(set(widths)) != 1 or widths[0] == 0:
        shown = widths if len(widths) <= 8 else [*widths[:8], "..."]
        raise fail(
            f"{option}: expected every row to have the same, non-zero width, "
            f"but got row widths {shown} instead"
        )
    return value


def to_floats(name: str, rows: list[list]) -> list[list[float]]:
    """The entries of ``load_matrix``'s rows as floats, or fail naming the first that is not."""
    out = []
    for i, row in enumerate(rows):
        floats = []
        for j, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise fail(
                    f"--{name}: expected numbers, but got {clip(json.dumps(x))} "
                    f"at row {i}, column {j} instead"
                )
            try:
                floats.append(float(x))
            except OverflowError:  # an integer past float's range
                raise fail(
                    f"--{name}: expected numbers within ±{sys.float_info.max:.3g}, but got an "
                    f"integer of {len(str(abs(x)))} digits at row {i}, column {j} instead"
                ) from None
        out.append(floats)
    return out


def parse_matrix(name: str, text: str) -> list[list[float]]:
    """Parse '[[3,-3],[1,1]]' into a rectangular list of rows of floats, or fail clearly."""
    return to_floats(name, load_matrix(name, text))


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
