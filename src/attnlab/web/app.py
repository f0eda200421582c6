"""The explorer: a FastAPI app serving one offline page and a bounded JSON API.

    create_app()  assembles the routers:
        /                 the page (static HTML, CSS and JS; no build step)
        /vendor/plotly.min.js   plotly.js from the installed plotly package (no CDN)
        /api/...          figures (web/figures.py), labs and exercises (web/labs.py)
        /docs             the API reference, rendered here from /openapi.json (no CDN either)

Every error a request can cause is answered, never a 500: a request that fails validation, and
any AttnlabError (a ValueError) raised by the library, becomes HTTP 422 whose "message" names
the field; a body over 64 KiB gets 413 before it is read.
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

import attnlab
from attnlab.web import docs, figures, labs

__all__ = ["MAX_BODY_BYTES", "create_app"]

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 64 * 1024  # the largest valid request (three 8 x 8 matrices) is ~2 KiB


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _where(error: dict) -> str:
    """The field an error is about: ("body", "q", 0, 1) -> "q[0][1]", ("query", "d_k") -> "d_k"."""
    loc = list(error["loc"])
    if error["type"] == "json_invalid":
        return f"body (at character {loc[-1]})" if len(loc) > 1 else "body"
    if loc and loc[0] in ("body", "query", "path", "header", "cookie"):
        section, loc = loc[0], loc[1:]
    else:
        section = "request"
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or section


def _unprocessable(errors: list[dict]) -> JSONResponse:
    message = "; ".join(f"{e['field']}: {e['msg']}" for e in errors)
    return JSONResponse(status_code=422, content={"message": message, "detail": errors})


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Pydantic's own detail echoes the input and may hold exception objects: keep what helps.
    errors = []
    for e in exc.errors():
        cause = e.get("ctx", {}).get("error")
        field = getattr(cause, "field", None) or _where(e)
        msg = str(cause) if cause is not None else e["msg"]
        if e["type"] == "json_invalid":
            msg = f"expected a JSON body, but it does not parse ({msg})"
        errors.append({"field": field, "loc": list(e["loc"]), "msg": msg, "type": e["type"]})
    return _unprocessable(errors)


async def _library_error(request: Request, exc: ValueError) -> JSONResponse:
    # attnlab's errors (AttnlabError is a ValueError) name the argument in their message;
    # the web layer's own FieldError also says which field.
    field = getattr(exc, "field", "request")
    return _unprocessable([{"field": field, "loc": [], "msg": str(exc), "type": "value_error"}])


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


def create_app() -> FastAPI:
    """The explorer app: routers for the figures, labs and exercises, the page and the docs."""
    app = FastAPI(
        title="attnlab explorer",
        version=attnlab.__version__,
        description="Attention computed by attnlab's core, as data for the explorer's figures.",
        docs_url=None,  # FastAPI's Swagger page loads from a CDN; /docs is served below instead
        redoc_url=None,
        max_body_size=MAX_BODY_BYTES,  # 413 before a large body is read
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ValueError, _library_error)
    app.add_middleware(_ServerTiming)
    app.include_router(figures.router)
    app.include_router(labs.router)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(
            _plotly_js(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @app.get("/docs", include_in_schema=False)
    def api_docs() -> HTMLResponse:
        return HTMLResponse(docs.render(app.openapi()))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
