"""``attnlab snapshot``: the explorer at one state as one self-contained HTML file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from attnlab.cli._app import app, console
from attnlab.cli._files import check_target, write_target


@app.command()
def snapshot(
    output: Annotated[Path, typer.Option("-o", "--output", help="the HTML file to write")],
    state: Annotated[
        str,
        typer.Option(help="the page's query string, e.g. 'stepper.step=weights&mh.mode=learned'"),
    ] = "",
    force: Annotated[bool, typer.Option(help="replace an existing file")] = False,
) -> None:
    """Write the explorer at STATE as one HTML file (figures, data and plotly.js inlined) that
    opens from disk with no server and no network; controls that need the server say so."""
    check_target("--output", output, force)
    from attnlab.web import create_app
    from attnlab.web.snapshot import STATIC, snapshot_html

    page = asyncio.run(snapshot_html(create_app(), STATIC, state.lstrip("?")))
    write_target("--output", output, page, force)
    console.print(f"wrote {output} ({len(page.encode()) / 1e6:.1f} MB)")
