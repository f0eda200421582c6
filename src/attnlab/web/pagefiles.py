"""The page's own files, served so that a cold page loads at once and a warm one from cache.

    page_html()        index.html with every /static URL versioned (?v=<hash of the files>),
                       an import map that versions every module's URL the same way (those that
                       main.js loads later by import() too), and a <link rel="modulepreload">
                       per module of main.js's static graph (the first screen's), so the
                       browser fetches that graph in one round instead of level by level
    first_answers(app) the API's answers to the requests the page makes at load with no state in
                       its URL, asked of the app itself once per process; page_html() inlines
                       them in a <script type="application/json" id="attnlab-first"> block, so
                       the first screen needs no round trip (the page's api() looks there first)
    gzipped(path)      a large file (plotly.js) compressed once per process, not per request
    VersionedStatic    /static: a URL with ?v= is immutable (cached for a year, never asked
                       again, served from memory); one without is "no-cache" (kept,
                       revalidated by its ETag)

The version is a hash of the files' contents, computed per page request (about 200 KB read), so
an edit while the server runs gives new URLs at the next load and no stale module survives it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import mimetypes
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import Response
from fastapi.staticfiles import StaticFiles

__all__ = [
    "CACHE_IMMUTABLE",
    "CACHE_REVALIDATE",
    "VersionedStatic",
    "first_answers",
    "gzipped",
    "module_graph",
    "page_html",
]

CACHE_IMMUTABLE = "public, max-age=31536000, immutable"
CACHE_REVALIDATE = "no-cache"
ENTRY = "js/main.js"
# A static import or re-export of a sibling module: import x from "./a.js", export * from "./b.js".
_IMPORT = re.compile(r"""^\s*(?:import|export)\b[^'"]*?\bfrom\s*["']\./([\w.-]+\.js)["']""", re.M)
_URL = re.compile(r"""(\b(?:href|src)=")(/static/[^"?#]+)(")""")


def static_version(root: Path) -> str:
    """12 hex digits of SHA-256 over every file's path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def module_graph(root: Path, entry: str = ENTRY) -> list[str]:
    """Every module main.js reaches by static imports, entry first (paths under ``root``).

    Dynamic ``import()`` is left out on purpose: what loads on demand stays on demand.
    """
    folder = Path(entry).parent
    seen, todo = [entry], [entry]
    while todo:
        text = (root / todo.pop()).read_text(encoding="utf-8")
        for name in _IMPORT.findall(text):
            path = (folder / name).as_posix()
            if path not in seen:
                seen.append(path)
                todo.append(path)
    return seen


def page_html(root: Path, answers: list[dict] | None = None) -> bytes:
    """index.html as served: versioned URLs, the import map, the module preloads and ``answers``
    (``first_answers``), if given, as the page's inlined data."""
    version = static_version(root)
    html = (root / "index.html").read_text(encoding="utf-8")
    html = _URL.sub(lambda m: f"{m[1]}{m[2]}?v={version}{m[3]}", html)
    # Every module is in the map (one loaded later by import() is versioned too); only the
    # static graph, what the first screen runs, is preloaded.
    every = sorted(p.relative_to(root).as_posix() for p in (root / "js").glob("*.js"))
    imports = {f"/static/{path}": f"/static/{path}?v={version}" for path in every}
    head = [f'<script type="importmap">{json.dumps({"imports": imports})}</script>']
    head += [
        f'<link rel="modulepreload" href="{imports[f"/static/{path}"]}">'
        for path in module_graph(root)
    ]
    if answers is not None:
        # "</" could close the <script> early inside a JSON string; "<\/" reads the same in JSON.
        data = json.dumps(answers, separators=(",", ":")).replace("</", "<\\/")
        head.append(f'<script type="application/json" id="attnlab-first">{data}</script>')
    # The import map must come before the first module script, so it opens <head>.
    return html.replace("<head>", "<head>\n  " + "\n  ".join(head), 1).encode()


def first_requests(cfg: dict) -> list[tuple[str, str, Any]]:
    """(method, path, body) of the requests the page's figures make at load when the URL holds no
    state, as static/js/*.js builds them from the config (GET /api/config). The folded "why"
    section's equations and predictions are left to the page (asked after ready): the first
    page a server renders would wait a second longer for them, and the page is 35 KB lighter."""
    example = cfg["stepper"]["example"]
    trace = {
        **{name: example[name] for name in ("q", "k", "v")},
        **{"causal": True, "scaled": True, "blocked": [], "grad_output": None},
        **{"softcap": None, "sink": None, "query_labels": None, "key_labels": None},
    }
    gets = ["/api/config", "/api/equation", "/api/multihead", "/api/labs", "/api/exercises"]
    gets.append(f"/api/histogram?d_k={cfg['histogram']['d_k_default']}&scaled=false")
    posts = [
        ("/api/trace", trace),
        ("/api/permutation", {"order": None, "positions": False, "words": None}),
    ]
    return [("GET", path, None) for path in gets] + [("POST", path, body) for path, body in posts]


async def _ask(app, method: str, target: str, body: Any) -> tuple[int, Any]:
    """One request to ``app`` in-process (its whole middleware stack): (status, JSON answer)."""
    path, _, query = target.partition("?")
    payload = b"" if body is None else json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
    }
    messages = [{"type": "http.request", "body": payload, "more_body": False}]
    status, chunks = 0, []

    async def receive():
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, json.loads(b"".join(chunks) or b"null")


async def first_answers(app) -> list[dict]:
    """The answers to ``first_requests``, asked once per app and kept (they depend only on the
    library, fixed while the server runs). An answer that is not a 200 is left out: the page
    then asks for it as usual."""
    kept = getattr(app.state, "first_answers", None)
    if kept is None:
        _, cfg = await _ask(app, "GET", "/api/config", None)
        kept = []
        for method, path, body in first_requests(cfg):
            status, answer = await _ask(app, method, path, body)
            if status == 200:
                kept.append({"method": method, "path": path, "body": body, "answer": answer})
        app.state.first_answers = kept
    return kept


class VersionedStatic(StaticFiles):
    """StaticFiles (ETag, Last-Modified, 304s) whose Cache-Control follows the version query.

    A versioned file is answered from memory after its first request: a cold page asks for all
    twenty of them at once, and StaticFiles' thread hops per file (stat, open, read) queue for a
    core on a loaded machine. One copy per file, replaced when a new version is asked for.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kept: dict[str, tuple[str, bytes, str]] = {}  # path -> (version, bytes, type)

    async def get_response(self, path: str, scope):
        version = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("v", [None])[0]
        if version is not None and scope["method"] in ("GET", "HEAD"):
            kept = self._kept.get(path)
            if kept is None or kept[0] != version:
                full, found = self.lookup_path(path)  # the safe join: nothing outside the folder
                if found is not None and stat.S_ISREG(found.st_mode):
                    media = mimetypes.guess_type(full)[0] or "application/octet-stream"
                    kept = self._kept[path] = (version, Path(full).read_bytes(), media)
            if kept is not None and kept[0] == version:
                headers = {"Cache-Control": CACHE_IMMUTABLE}
                return Response(kept[1], media_type=kept[2], headers=headers)
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = CACHE_IMMUTABLE if version else CACHE_REVALIDATE
        return response


@lru_cache(maxsize=2)
def gzipped(path: Path) -> bytes:
    """``path``'s bytes gzip-compressed (level 6), kept for the process: the file is a package's,
    fixed while the server runs."""
    return gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
