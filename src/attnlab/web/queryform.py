"""One value per query parameter, unless the route takes a list.

Starlette keeps every repetition of a query key, and FastAPI hands a parameter that takes one
value the *last* of them: ``/api/multihead?query=9&query=1`` would answer for query 1 and say
nothing about the 9. A client that sends a list where one number belongs has made a mistake
the server should name, so every ``/api`` route refuses, with 422, a key given more than once unless
its OpenAPI schema declares that parameter an array (the labs' ``widths``, the cost lab's
``lengths``), where repeating the key is how a list is written (``?widths=16&widths=32``).

    single_values   the app-wide dependency (``FastAPI(dependencies=[Depends(single_values)])``)
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from attnlab.web.guard import GUARDED_PREFIX

__all__ = ["single_values"]


def _is_array(schema: dict) -> bool:
    """Whether a parameter's schema allows a list (``type: array``, also inside anyOf)."""
    return schema.get("type") == "array" or any(_is_array(s) for s in schema.get("anyOf", ()))


@lru_cache(maxsize=8)
def _list_parameters(app) -> dict[tuple[str, str], frozenset[str]]:
    """(METHOD, path template) -> the names of its query parameters that take a list; from the
    app's own OpenAPI document, so the rule follows the routes as they are declared."""
    found = {}
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            names = {
                p["name"]
                for p in operation.get("parameters", ())
                if p.get("in") == "query" and _is_array(p.get("schema", {}))
            }
            found[(method.upper(), path)] = frozenset(names)
    return found


def single_values(request: Request) -> None:
    """Refuse (422, naming each key) a query key repeated where the route takes one value."""
    if not request.url.path.startswith(GUARDED_PREFIX):  # the page's own URL state is the page's
        return
    counts = Counter(key for key, _ in request.query_params.multi_items())
    repeated = sorted(key for key, n in counts.items() if n > 1)
    if not repeated:
        return
    route = request.scope.get("route")
    template = getattr(route, "path_format", request.url.path)
    lists = _list_parameters(request.app).get((request.method, template), frozenset())
    wrong = [key for key in repeated if key not in lists]
    if wrong:
        raise RequestValidationError(
            [
                {
                    "type": "repeated_value",
                    "loc": ("query", key),
                    "msg": f"given {counts[key]} times, but this parameter takes one value",
                }
                for key in wrong
            ]
        )
