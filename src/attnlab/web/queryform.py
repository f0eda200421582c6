"""How a query value must be written: one per key unless the route takes a list, integers as
integers.

Starlette keeps every repetition of a query key, and FastAPI hands a parameter that takes one
value the *last* of them: ``/api/multihead?query=9&query=1`` would answer for query 1 and say
nothing about the 9. And pydantic reads the text ``0.0`` as the integer 0, so a list ``[0.0]``
written as ``?query=0.0`` passed for an integer. A client that sends either has made a mistake
the server should name, so every ``/api`` route refuses, with 422 naming the key:

    a key given more than once    unless its OpenAPI schema declares an array (the labs'
                                  ``widths``, the cost lab's ``lengths``): ``?widths=16&widths=32``
                                  is how a list is written
    an integer not written as     ``?d_k=64.0``, ``?query=1e1``: the schema says integer, so the
      one (digits, a sign)        text must be one (an empty value is left to the field's own check)

    single_values   the app-wide dependency (``FastAPI(dependencies=[Depends(single_values)])``)
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import NamedTuple

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from attnlab.web.guard import GUARDED_PREFIX

__all__ = ["single_values"]

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


class _Rules(NamedTuple):
    lists: frozenset[str]  # query parameters that take a list (a repeated key)
    integers: frozenset[str]  # query parameters whose values are integers (or lists of them)


def _kinds(schema: dict) -> set[str]:
    """The JSON types a parameter's schema allows, looking inside anyOf (null left out)."""
    kinds = {schema["type"]} if "type" in schema else set()
    for member in schema.get("anyOf", ()):
        kinds |= _kinds(member)
    return kinds - {"null"}


def _rules(schema: dict) -> tuple[bool, bool]:
    """(takes a list, every value an integer) for one query parameter's schema."""
    kinds = _kinds(schema)
    if kinds == {"array"}:
        return True, _kinds(schema.get("items", {})) == {"integer"}
    return "array" in kinds, kinds == {"integer"}


@lru_cache(maxsize=8)
def _route_rules(app) -> dict[tuple[str, str], _Rules]:
    """(METHOD, path template) -> its rules; from the app's own OpenAPI document, so they follow
    the routes as they are declared."""
    found = {}
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            query = [p for p in operation.get("parameters", ()) if p.get("in") == "query"]
            kinds = {p["name"]: _rules(p.get("schema", {})) for p in query}
            found[(method.upper(), path)] = _Rules(
                frozenset(name for name, (many, _) in kinds.items() if many),
                frozenset(name for name, (_, whole) in kinds.items() if whole),
            )
    return found


def _refusal(key: str, msg: str) -> dict:
    return {"type": "query_form", "loc": ("query", key), "msg": msg}


async def single_values(request: Request) -> None:
    """Refuse (422, naming each key) a query key repeated where the route takes one value, or
    an integer parameter's value not written as an integer."""
    if not request.url.path.startswith(GUARDED_PREFIX):  # the page's own URL state is the page's
        return
    items = request.query_params.multi_items()
    if not items:
        return
    route = request.scope.get("route")
    template = getattr(route, "path_format", request.url.path)
    rules = _route_rules(request.app).get(
        (request.method, template), _Rules(frozenset(), frozenset())
    )
    counts = Counter(key for key, _ in items)
    refused = [
        _refusal(key, f"given {n} times, but this parameter takes one value")
        for key, n in sorted(counts.items())
        if n > 1 and key not in rules.lists
    ]
    refused += [
        _refusal(key, f"expected an integer written with digits only, but got {value!r}")
        for key, value in items
        if key in rules.integers and value and not _INTEGER_TEXT.fullmatch(value)
    ]
    if refused:
        raise RequestValidationError(refused)
