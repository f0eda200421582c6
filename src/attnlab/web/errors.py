"""How the explorer answers a refused request: HTTP 422 ``{"message": ..., "detail": [...]}``.

Only what a request can cause becomes a 422 (docs/style.md, "catch only what you raise"):

    RequestValidationError   a field outside its type or bounds, or a body that is not JSON
    AttnlabError             the library refusing an input (FieldError, the web layer's own, too)
    a body Python's JSON     invalid UTF-8, nesting past the recursion limit, an integer of more
      parser cannot read     than 4,300 digits (FastAPI would answer 400 in another shape)

Anything else is a bug and surfaces as one: HTTP 500, with the traceback in the server's log.

An answer never grows with its request: at most ``MAX_ERRORS`` errors are listed, and every
text that may echo the request (a field name, a message) is cut to ``MAX_ECHO`` characters.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from attnlab.errors import AttnlabError

__all__ = ["MAX_ECHO", "MAX_ERRORS", "clip", "install", "unprocessable"]

MAX_ERRORS = 5  # the first few say what to fix; a request with 192 bad entries gets 5 and a count
MAX_ECHO = 200  # characters of any text that may repeat the request


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def unprocessable(errors: list[dict], status: int = 422, headers=None) -> JSONResponse:
    """HTTP 422 (or ``status``) in the documented shape, bounded however many errors there are."""
    shown = [
        {
            "field": clip(str(e["field"])),
            "loc": [p if isinstance(p, int) else clip(str(p), 40) for p in e["loc"][:8]],
            "msg": clip(str(e["msg"])),
            "type": e["type"],
        }
        for e in errors[:MAX_ERRORS]
    ]
    message = "; ".join(f"{e['field']}: {e['msg']}" for e in shown)
    if len(errors) > MAX_ERRORS:
        message += f"; and {len(errors) - MAX_ERRORS} more errors"
    content = {"message": message, "detail": shown}
    return JSONResponse(status_code=status, content=content, headers=headers)


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
    return unprocessable(errors)


async def _library_error(request: Request, exc: AttnlabError) -> JSONResponse:
    # attnlab's errors name the argument in their message; FieldError also says which field.
    field = getattr(exc, "field", "request")
    return unprocessable([{"field": field, "loc": [], "msg": str(exc), "type": "value_error"}])


def _unreadable(cause: BaseException) -> str | None:
    """Why Python's JSON parser could not read a body, or None for any other cause."""
    if isinstance(cause, UnicodeDecodeError):
        return (
            f"expected a UTF-8 JSON body, but byte {cause.start} "
            f"(0x{cause.object[cause.start]:02x}) is not valid UTF-8"
        )
    if isinstance(cause, RecursionError):
        return "expected a JSON body of a few levels of arrays, but it is nested too deep to read"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return "expected numbers of at most 4300 digits, but the body holds a longer one"
    return None


async def _http_error(request: Request, exc: HTTPException) -> Response:
    # FastAPI answers a body that json.loads cannot read (other than a syntax error) with
    # 400 "There was an error parsing the body", chained to the parser's exception.
    reason = _unreadable(exc.__cause__) if exc.status_code == 400 else None
    if reason is not None:
        error = {"field": "body", "loc": ["body"], "msg": reason, "type": "json_invalid"}
        return unprocessable([error])
    if exc.status_code in (204, 304):  # no body allowed
        return await http_exception_handler(request, exc)
    # 404, 405, 413, a busy lab runner...: the same shape as every other refusal.
    msg = exc.detail if isinstance(exc.detail, str) else "the request was refused"
    error = {"field": "request", "loc": [], "msg": msg, "type": f"http_{exc.status_code}"}
    return unprocessable([error], status=exc.status_code, headers=exc.headers)


def install(app) -> None:
    """Register the handlers on ``app``: only the errors above become 422."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(AttnlabError, _library_error)
    app.add_exception_handler(HTTPException, _http_error)
