"""/docs: the API reference as one plain HTML page rendered from the OpenAPI document.

FastAPI's default /docs page fetches Swagger UI from a CDN; the explorer must work with no
network, so the same document (/openapi.json) is rendered here instead: every route, its
parameters with their bounds, its request body and its response schema.
"""

from __future__ import annotations

from html import escape

__all__ = ["render"]

_BOUNDS = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("minItems", "items ≥"),
    ("maxItems", "items ≤"),
)


def _type(schema: dict) -> str:
    """A short type for a JSON schema: 'array of array of number', 'Table', 'integer | null'."""
    if not isinstance(schema, dict):  # `true` means any value
        return "any"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"<a href='#schema-{escape(name)}'>{escape(name)}</a>"
    if "anyOf" in schema:
        return " | ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(_type(s) for s in schema["prefixItems"]) + "]"
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"object of {_type(schema['additionalProperties'])}"
    return escape(str(kind))


def _bounds(schema: dict) -> str:
    parts = [f"{sign} {schema[key]}" for key, sign in _BOUNDS if key in schema]
    for sub in schema.get("anyOf", []):
        parts += [f"{sign} {sub[key]}" for key, sign in _BOUNDS if key in sub]
    items = schema.get("items", {})
    parts += [f"each {sign} {items[key]}" for key, sign in _BOUNDS if key in items]
    return ", ".join(parts)


def _row(name: str, schema: dict, required: bool, where: str = "") -> str:
    default = schema.get("default")
    cells = [
        f"<code>{escape(name)}</code>" + (" <em>(required)</em>" if required else ""),
        escape(where),
        _type(schema),
        escape(_bounds(schema)),
        "" if default is None else f"<code>{escape(str(default))}</code>",
        escape(schema.get("description", "")),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


_HEAD = (
    "<tr><th>name</th><th>in</th><th>type</th><th>bounds</th><th>default</th><th>meaning</th></tr>"
)


def _operation(path: str, method: str, op: dict) -> str:
    out = [
        f"<section class='route' id='{escape(op.get('operationId', path))}'>",
        f"<h3><code>{method.upper()} {escape(path)}</code></h3>",
        f"<p>{escape(op.get('description') or op.get('summary', ''))}</p>",
    ]
    rows = [
        _row(p["name"], p.get("schema", {}), p.get("required", False), p["in"])
        for p in op.get("parameters", [])
    ]
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    if body:
        rows.append(
            _row("body", body.get("schema", {}), op["requestBody"].get("required", False), "body")
        )
    if rows:
        out.append(f"<table>{_HEAD}{''.join(rows)}</table>")
    ok = op.get("responses", {}).get("200", {}).get("content", {})
    for media, content in ok.items():
        out.append(f"<p>200 ({escape(media)}): {_type(content.get('schema', {}))}</p>")
    out.append("<p>422: <code>{message, detail}</code>, the message naming the field.</p>")
    out.append("</section>")
    return "".join(out)


def _schema(name: str, schema: dict) -> str:
    required = set(schema.get("required", []))
    rows = [_row(prop, sub, prop in required) for prop, sub in schema.get("properties", {}).items()]
    doc = escape(schema.get("description", ""))
    return (
        f"<section id='schema-{escape(name)}'><h3>{escape(name)}</h3><p>{doc}</p>"
        f"<table>{_HEAD}{''.join(rows)}</table></section>"
    )


def render(openapi: dict) -> str:
    """The whole reference page for an OpenAPI document."""
    info = openapi.get("info", {})
    routes = [
        _operation(path, method, op)
        for path, methods in openapi.get("paths", {}).items()
        for method, op in methods.items()
    ]
    schemas = [_schema(n, s) for n, s in openapi.get("components", {}).get("schemas", {}).items()]
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}: API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/explorer.css"></head>
<body class="docs"><main>
<h1>{title}: API reference</h1>
<p>{escape(info.get("description", ""))} The machine-readable document is
<a href="/openapi.json">/openapi.json</a>; the explorer itself is at <a href="/">/</a>.</p>
<h2>Routes</h2>{"".join(routes)}
<h2>Schemas</h2>{"".join(schemas)}
</main></body></html>"""
