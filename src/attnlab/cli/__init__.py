"""The ``attnlab`` command. Thin: it parses, calls the library, and presents."""

from __future__ import annotations

from attnlab.cli import bench as _bench  # noqa: F401  (registers commands)
from attnlab.cli import core as _core  # noqa: F401
from attnlab.cli import distributed as _distributed  # noqa: F401
from attnlab.cli import labs as _labs  # noqa: F401
from attnlab.cli import model as _model  # noqa: F401
from attnlab.cli import serve as _serve  # noqa: F401
from attnlab.cli import snapshot as _snapshot  # noqa: F401
from attnlab.cli import verify as _verify  # noqa: F401
from attnlab.cli import worksheet as _worksheet  # noqa: F401
from attnlab.cli._app import app, unwrap_help

__all__ = ["app", "main"]

unwrap_help(app)  # every command registered above: its help reflowed by the terminal's width


def main() -> None:
    app()
