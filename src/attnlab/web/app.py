"""The explorer: a FastAPI app serving one offline page and a bounded JSON API.

    create_app()  assembles the routers:
        /                 the page (static HTML, CSS and JS; no build step)
        /vendor/plotly.min.js   plotly.js from the installed plotly package (no CDN)
        /api/...          figures (web/figures.py), labs and exercises (web/labs.py),
                          training runs as jobs (web/runs.py), real models given to
                          ``attnlab serve --model`` (web/realmodels.py) and their inside
                          (web/inside.py)
        /docs             the API reference, rendered here from /openapi.json (no CDN either)

Every error a request can cause is answered in words: a request that fails validation, and any
AttnlabError raised by the library, becomes HTTP 422 whose "message" names the field
(web/errors.py); a body over 64 KiB gets 413 before it is read. Any other exception is a bug:
HTTP 500, with its traceback in the server's log. Only loopback Host names are served, and the
lab routes refuse cross-site requests (web/guard.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import FileResponse, HTMLResponse
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

import attnlab
from attnlab.web import (
    config,
    docs,
    errors,
    figures,
    guard,
    inside,
    labs,
    learned,
    pagefiles,
    queryform,
    realmodels,
    runs,
    schema,
    snapshot,
    teach,
    trained,
)

__all__ = ["MAX_BODY_BYTES", "create_app"]

STATIC = Path(__file__).parent / "static"
# The largest valid request: three 32 x 256 matrices (the stepper holding a real model's head
# row), 24,576 numbers of up to ~24 characters each, about 580 KiB.
MAX_BODY_BYTES = 640 * 1024
GZIP_MIN_BYTES = 1024  # smaller answers are not worth compressing
# plotly.js changes only with the installed package: a day. The page's own files may change
# while the server runs (an edit, a new version): the browser keeps them but asks first.
CACHE_VENDOR = "public, max-age=86400"
CACHE_STATIC = "no-cache"


class _Compressed(GZipMiddleware):
    """GZip for everything but the page itself (13 KB), whose HEAD must match its GET."""

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/":
            return await self.app(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class _ServerTiming:
    """Add ``Server-Timing: app;dur=<ms>``: time from request to response start, in-process."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()

        async def timed(message):
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - start) * 1000
                headers = [
                    *message.get("headers", []),
                    (b"server-timing", f"app;dur={ms:.2f}".encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)


def create_app(hosts: Iterable[str] = (), models: Iterable[str | Path] = ()) -> FastAPI:
    """The explorer app: routers for the figures, labs and exercises, the page and the docs.

    Args:
        hosts: Host names served besides the loopback ones (127.0.0.1, localhost, [::1]);
            ``attnlab serve`` passes its ``--host``.
        models: Hugging Face model folders (``attnlab serve --model``), loaded now on a thread
            of their own; the multi-head view offers each once it has loaded.
    """
    app = FastAPI(
        title="attnlab explorer",
        version=attnlab.__version__,
        description="Attention computed by attnlab's core, as data for the explorer's figures.",
        docs_url=None,  # FastAPI's Swagger page loads from a CDN; /docs is served below instead
        redoc_url=None,
        max_body_size=MAX_BODY_BYTES,  # 413 before a large body is read
        dependencies=[Depends(queryform.single_values)],  # ?query=9&query=1: 422, not "1"
    )
    errors.install(app)
    allowed = guard.allowed_hosts(hosts)
    # Added last is outermost: the Host check runs first, then the cross-site check.
    app.add_middleware(_Compressed, minimum_size=GZIP_MIN_BYTES)  # plotly.js: 4.7 -> 1.4 MB
    app.add_middleware(_ServerTiming)
    app.add_middleware(guard.CrossSiteGuard, hosts=allowed)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed, www_redirect=False)
    app.include_router(config.router)
    app.include_router(figures.router)
    app.include_router(labs.router)
    app.include_router(teach.router)
    app.include_router(learned.router)
    runs.install(app)  # training runs as jobs, with the app's own queue
    app.include_router(trained.router)  # a run's trained heads; heads knocked out
    app.include_router(snapshot.router)
    app.state.models = realmodels.Shelf(models)
    app.include_router(realmodels.router)
    app.include_router(inside.router)  # lens, attribution, ablation, generation

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def index(request: Request) -> Response:
        # Versioned URLs, module preloads and the first screen's data (pagefiles.py), so the
        # page needs no API round trip before it is usable; HEAD: the same headers, no body.
        page = pagefiles.page_html(STATIC, await pagefiles.first_answers(request.app))
        headers = {"Cache-Control": CACHE_STATIC, "Content-Length": str(len(page))}
        body = b"" if request.method == "HEAD" else page
        return Response(body, media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js(request: Request) -> Response:
        if "gzip" in request.headers.get("accept-encoding", ""):
            # Compressed once per process, not per request (4.8 MB, about half a second of CPU).
            headers = {
                "Cache-Control": CACHE_VENDOR,
                "Content-Encoding": "gzip",
                "Vary": "Accept-Encoding",
            }
            return Response(
                pagefiles.gzipped(_plotly_js()), media_type="text/javascript", headers=headers
            )
        return FileResponse(
            _plotly_js(),
            media_type="text/javascript",
            headers={"Cache-Control": CACHE_VENDOR},
        )

    @app.get("/docs", include_in_schema=False)
    def api_docs() -> HTMLResponse:
        return HTMLResponse(docs.render(app.openapi()))

    app.mount("/static", pagefiles.VersionedStatic(directory=STATIC), name="static")
    schema.document_refusals(app)
    return app
