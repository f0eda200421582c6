"""The OpenAPI document says how each route can refuse, not only how it answers.

FastAPI documents 200 and its own 422 shape; the explorer answers every refusal as
``{"message": ..., "detail": [...]}`` (web/errors.py) and can also answer

    413  a body over the size limit (routes that take a body)
    403  a cross-site request (every /api route, web/guard.py)
    429 / 503  the lab runner is busy (the lab routes, with Retry-After on 429)

and the lab routes return a CSV file with ``download=csv``. Each lab route also carries its work
budget (``x-work-budget``: seconds, bytes and the field a refusal names, and the same in words).
``document_refusals`` adds these to
the generated document, so /docs and a schema-driven test (tests/web/test_schema_api.py) see what
each route can really answer. It only adds what a route does not already declare.
"""

from __future__ import annotations

from fastapi import FastAPI

from attnlab.web.guard import GUARDED_PREFIX

__all__ = ["REFUSAL", "document_refusals"]

LAB_PREFIX = "/api/labs"  # the routes on the lab runner's queue (web/labs.py)

_ERROR_ITEM = {
    "type": "object",
    "properties": {
        "field": {"type": "string", "description": "The field the error is about."},
        "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        "msg": {"type": "string"},
        "type": {"type": "string"},
    },
    "required": ["field", "loc", "msg", "type"],
}
REFUSAL = {
    "title": "Refusal",
    "type": "object",
    "description": "Why a request was refused: one line naming the field, then each error.",
    "properties": {
        "message": {"type": "string"},
        "detail": {"type": "array", "items": {"$ref": "#/components/schemas/RefusalItem"}},
    },
    "required": ["message", "detail"],
}
_REF = {"$ref": "#/components/schemas/Refusal"}
_BUSY = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
_WHY = {
    "403": "A cross-site request: the API answers only the explorer's own page and scripts.",
    "413": "The body is over the size limit.",
    "422": "A field outside its type or bounds, or a body that is not JSON; the message names it.",
    "429": "The lab runner's queue is full; retry after Retry-After seconds.",
    "503": "The lab runner stayed busy; try again.",
}


def _refusal(code: str) -> dict:
    # A busy lab runner's answer carries a message; "detail" is optional there.
    schema = _BUSY if code in ("429", "503") else _REF
    answer = {"description": _WHY[code], "content": {"application/json": {"schema": schema}}}
    if code == "413":  # Starlette answers a declared Content-Length over the limit itself
        answer["content"]["text/plain"] = {"schema": {"type": "string"}}
    if code == "429":
        answer["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return answer


def _add(operation: dict, path: str) -> None:
    responses = operation.setdefault("responses", {})
    codes = ["422"]
    if "requestBody" in operation:
        codes.append("413")
    if path.startswith(GUARDED_PREFIX):
        codes.append("403")
    if path.startswith(LAB_PREFIX):
        codes += ["429", "503"]
        ok = responses.setdefault("200", {"description": "Successful Response"})
        content = ok.setdefault("content", {})
        content.setdefault("text/csv", {"schema": {"type": "string"}})
    for code in codes:
        # FastAPI's own 422 names its HTTPValidationError shape, which this app never sends.
        if code == "422" or code not in responses:
            responses[code] = _refusal(code)


def _add_budget(operation: dict, path: str) -> None:
    """A lab's work budget, in the document: each field's bounds cannot say it, since the
    estimate multiplies several fields (trials x keys x d_k, say)."""
    from attnlab.labs import LABS
    from attnlab.web.labs import budget

    name = path.removeprefix(LAB_PREFIX + "/")
    if not path.startswith(LAB_PREFIX + "/") or name not in LABS:
        return
    field = LABS[name].budget_field
    seconds, size = budget(LABS[name])
    operation["x-work-budget"] = {"seconds": seconds, "bytes": size, "field": field}
    words = (
        f"Work budget: the run's estimated time at most {seconds:g} s and memory at most "
        f"{size >> 20} MiB, from all the fields together; a request over it is refused "
        f"with 422 naming '{field}'."
    )
    operation["description"] = f"{operation.get('description', '')}\n\n{words}".strip()
    for parameter in operation.get("parameters", []):
        if parameter.get("name") == field:
            parameter["description"] = f"{parameter.get('description', '')} {words}".strip()


def document_refusals(app: FastAPI) -> None:
    """Make ``app.openapi()`` document every refusal the app can answer."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas["Refusal"] = REFUSAL
        schemas["RefusalItem"] = _ERROR_ITEM
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for path, methods in document.get("paths", {}).items():
            for operation in methods.values():
                _add(operation, path)
                _add_budget(operation, path)
        app.openapi_schema = document
        return document

    app.openapi = openapi
