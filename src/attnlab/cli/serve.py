"""``attnlab serve``: start the explorer (the chapter's figures, labs and exercises) locally."""

from __future__ import annotations

import errno
import socket
import threading
import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from attnlab.cli._app import app, console, fail


def _check_port(host: str, port: int) -> None:
    # Fail with one line before uvicorn starts, rather than with its traceback-like log.
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise fail(
                    f"--port: expected a free port, but {host}:{port} is in use; "
                    "pick another with --port"
                ) from None
            raise fail(
                f"--host: expected an address this machine has, but got {host!r} ({exc.strerror})"
            ) from None


def _check_host(host: str) -> str:
    # uvicorn binds '' to every interface without a word: refuse it rather than guess.
    if not host.strip():
        raise fail(
            f"--host: expected an address to bind, such as 127.0.0.1 (this machine only) or "
            f"0.0.0.0 (every interface, said explicitly), but got {host!r} instead"
        )
    return host.strip()


def _check_models(paths: list[str]) -> list[Path]:
    # A folder that cannot load fails here, in one line, before the server starts; the weights
    # themselves are read after it has started, on a thread of their own (web/realmodels.py).
    # A hub id is resolved to its snapshot folder first (the cache, or a download).
    from attnlab.errors import AttnlabError
    from attnlab.models._load import resolve
    from attnlab.web.realmodels import check_folder

    folders = []
    for path in paths:
        try:
            folders.append(resolve(path))
            check_folder(folders[-1])
        except AttnlabError as exc:
            raise fail(f"--model {path}: {exc}") from None
    return folders


def _warn_exposed(host: str, shown: str, port: int) -> None:
    where = "every network interface" if host in ("0.0.0.0", "::") else f"the address {host}"
    console.print(
        f"[bold red]warning:[/] binding {where}: anyone who can reach this machine on port "
        f"{port} can use the explorer and run its labs (seconds of CPU each). Requests must "
        f"name {shown} or a loopback name in their Host header; others get 400."
    )


def _open_when_up(server, url: str) -> None:
    def wait_then_open():
        while not server.started and not server.should_exit:
            threading.Event().wait(0.1)
        if server.started:
            webbrowser.open(url)

    threading.Thread(target=wait_then_open, name="attnlab-open", daemon=True).start()


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind. The default is this machine only.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")
    ] = 8000,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the explorer in the default web browser.")
    ] = False,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            metavar="PATH|ID",
            help="A Hugging Face model folder (config.json, safetensors) or hub id 'org/name' "
            "to show in the multi-head view; repeat for more. Loaded in the background once the "
            "server is up. Without it, the small model attnlab ships (tiny-lm) is shown.",
        ),
    ] = None,
) -> None:
    """Serve the explorer: equation, four figures, labs and exercises, all offline."""
    import uvicorn

    from attnlab.figures.histogram import warm
    from attnlab.web import create_app
    from attnlab.web.guard import LOOPBACK_HOSTS, host_name
    from attnlab.web.protocol import server_config

    host = _check_host(host)
    models = _check_models(list(model or []))
    if not models:  # a real model with no download: the one attnlab trained and ships
        from attnlab.models import shipped

        models = [shipped()]
    _check_port(host, port)
    shown = host_name(host)
    url = f"http://{shown}:{port}/"
    if shown not in LOOPBACK_HOSTS:
        _warn_exposed(host, shown, port)
    app_ = create_app(hosts=[host], models=models)
    server = uvicorn.Server(server_config(app_, host, port, log_level="warning"))
    # Compute the √d_k figure at every slider step in the background, so dragging is instant.
    threading.Thread(target=warm, name="attnlab-warm", daemon=True).start()
    if open_browser:
        _open_when_up(server, url)
    console.print(
        f"attnlab explorer on [bold]{url}[/] (API reference: {url}docs). Ctrl+C stops it."
    )
    names = ", ".join(app_.state.models.entries)
    console.print(f"loading in the background: {escape(names)} (the page shows when ready)")
    if not model:
        console.print(
            "A downloaded model instead: huggingface-cli download gpt2 config.json "
            "model.safetensors tokenizer.json --local-dir ~/models/gpt2, then "
            "attnlab serve --model ~/models/gpt2"
        )
    server.run()
