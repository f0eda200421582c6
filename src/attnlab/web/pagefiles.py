"""The page's own files, served so that a cold page loads at once and a warm one from cache.

    page_html()        index.html with every /static URL versioned (?v=<hash of the files>),
                       an import map that versions the modules' relative imports the same way,
                       and a <link rel="modulepreload"> per module of main.js's static graph, so
                       the browser fetches the whole graph in one round instead of level by level
    gzipped(path)      a large file (plotly.js) compressed once per process, not per request
    VersionedStatic    /static: a URL with ?v= is immutable (cached for a year, never asked
                       again); one without is "no-cache" (kept, revalidated by its ETag)

The version is a hash of the files' contents, computed per page request (about 200 KB read), so
an edit while the server runs gives new URLs at the next load and no stale module survives it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs

from fastapi.staticfiles import StaticFiles

__all__ = [
    "CACHE_IMMUTABLE",
    "CACHE_REVALIDATE",
    "VersionedStatic",
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


def page_html(root: Path) -> bytes:
    """index.html as served: versioned URLs, the import map and the module preloads."""
    version = static_version(root)
    html = (root / "index.html").read_text(encoding="utf-8")
    html = _URL.sub(lambda m: f"{m[1]}{m[2]}?v={version}{m[3]}", html)
    modules = [f"/static/{path}" for path in module_graph(root)]
    imports = {url: f"{url}?v={version}" for url in modules}
    head = [f'<script type="importmap">{json.dumps({"imports": imports})}</script>']
    head += [f'<link rel="modulepreload" href="{imports[url]}">' for url in modules]
    # The import map must come before the first module script, so it opens <head>.
    return html.replace("<head>", "<head>\n  " + "\n  ".join(head), 1).encode()


class VersionedStatic(StaticFiles):
    """StaticFiles (ETag, Last-Modified, 304s) whose Cache-Control follows the version query."""

    async def get_response(self, path: str, scope):
        response = await super().get_response(path, scope)
        versioned = "v" in parse_qs(scope.get("query_string", b"").decode("latin-1"))
        response.headers["Cache-Control"] = CACHE_IMMUTABLE if versioned else CACHE_REVALIDATE
        return response


@lru_cache(maxsize=2)
def gzipped(path: Path) -> bytes:
    """``path``'s bytes gzip-compressed (level 6), kept for the process: the file is a package's,
    fixed while the server runs."""
    return gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
