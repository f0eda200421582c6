"""The page's files served for a fast cold load: versioned URLs, an import map, module preloads
for main.js's whole static graph, immutable caching for versioned files and ETag revalidation
for the rest, plotly.js compressed once and kept off the page's head, and the first screen's
API answers inlined in the page.

Oracles: the module graph walked here independently (a plain scan of every import line), the
files' own bytes, HTTP's rules (304 on a matching If-None-Match), and the API itself (each
inlined answer asked for again over HTTP).
"""

from __future__ import annotations

import gzip
import json
import re
import warnings

import pytest

from attnlab.web import create_app
from attnlab.web.app import STATIC

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _reachable(name: str, seen: set[str]) -> set[str]:
    """Brute force: every './x.js' named on an import/export line, followed recursively."""
    seen.add(name)
    for line in (STATIC / "js" / name).read_text().splitlines():
        if re.match(r"\s*(import|export)\b", line) and "import(" not in line:
            for found in re.findall(r"""from\s+["']\./([\w.-]+\.js)""", line):
                if found not in seen:
                    _reachable(found, seen)
    return seen


def test_the_page_preloads_every_module_of_its_graph_versioned(client):
    page = client.get("/").text
    version = re.search(r'/static/js/main\.js\?v=([0-9a-f]{12})"', page)[1]
    preloads = re.findall(
        r'<link rel="modulepreload" href="/static/js/([\w.-]+\.js)\?v=(\w+)"', page
    )
    assert {name for name, _ in preloads} == _reachable("main.js", set())
    assert {v for _, v in preloads} == {version}
    # The first screen's graph only: the later sections come by import() after ready.
    assert {"stepper.js", "equation.js"} <= {name for name, _ in preloads}
    assert not {"why.js", "proof.js", "histogram.js"} & {name for name, _ in preloads}
    imports = json.loads(re.search(r'<script type="importmap">(.*?)</script>', page)[1])
    assert imports["imports"]["/static/js/common.js"] == f"/static/js/common.js?v={version}"
    every = {p.name for p in (STATIC / "js").glob("*.js")}
    assert imports["imports"] == {f"/static/js/{n}": f"/static/js/{n}?v={version}" for n in every}
    assert page.index('type="importmap"') < page.index('type="module"')
    # Every /static URL in the page carries the version; plotly.js is not in the page at all:
    # common.js adds it when a chart is wanted.
    assert not re.search(r'(?:href|src)="/static/[^"?]+"', page)
    assert "/vendor/plotly" not in page
    assert '"/vendor/plotly.min.js"' in (STATIC / "js" / "common.js").read_text()


def _inlined(page: str) -> list[dict]:
    block = re.search(r'<script type="application/json" id="attnlab-first">(.*?)</script>', page)
    return json.loads(block[1])


def test_the_page_inlines_the_apis_own_answers_to_its_first_requests(client):
    answers = _inlined(client.get("/").text)
    asked = {(a["method"], a["path"].partition("?")[0]) for a in answers}
    # The stepper's trace, the figures' data and the page's constants: no round trip at load.
    for needed in ["/api/config", "/api/equation", "/api/multihead", "/api/histogram"]:
        assert ("GET", needed) in asked
    assert {("POST", "/api/trace"), ("POST", "/api/permutation")} <= asked
    for a in answers:
        again = client.request(a["method"], a["path"], json=a["body"])
        assert again.status_code == 200, a["path"]
        assert again.json() == a["answer"], a["path"]
    cfg = client.get("/api/config").json()
    trace = next(a for a in answers if a["path"] == "/api/trace")["body"]
    assert [trace[m] for m in "qkv"] == [cfg["stepper"]["example"][m] for m in "qkv"]


def test_the_inlined_block_cannot_be_closed_by_its_data(client):
    from attnlab.web.pagefiles import page_html

    html = page_html(STATIC, [{"method": "GET", "path": "/x", "body": None, "answer": "</script>"}])
    assert html.decode().count("</script>") == html.decode().count("<script")
    assert _inlined(html.decode())[0]["answer"] == "</script>"
    # HEAD: the same length as the GET with the data in it.
    assert client.head("/").headers["content-length"] == str(len(client.get("/").content))


def test_versioned_files_are_immutable_and_the_rest_revalidate(client):
    page = client.get("/").text
    url = re.search(r'href="(/static/js/common\.js\?v=\w+)"', page)[1]
    versioned = client.get(url)
    assert versioned.status_code == 200
    assert "immutable" in versioned.headers["cache-control"]
    plain = client.get("/static/js/common.js")
    assert plain.headers["cache-control"] == "no-cache"
    again = client.get("/static/js/common.js", headers={"if-none-match": plain.headers["etag"]})
    assert again.status_code == 304
    assert client.get("/").headers["cache-control"] == "no-cache"  # the page names the version


def test_an_edit_changes_the_version(tmp_path):
    from attnlab.web.pagefiles import page_html

    (tmp_path / "js").mkdir()
    (tmp_path / "index.html").write_text(
        '<head>\n<script type="module" src="/static/js/main.js"></script></head>'
    )
    (tmp_path / "js" / "main.js").write_text('import { a } from "./a.js";\n')
    (tmp_path / "js" / "a.js").write_text("export const a = 1;\n")
    before = page_html(tmp_path).decode()
    assert '<link rel="modulepreload" href="/static/js/a.js?v=' in before
    (tmp_path / "js" / "a.js").write_text("export const a = 2;\n")
    after = page_html(tmp_path).decode()
    old, new = (re.search(r"main\.js\?v=(\w+)", t)[1] for t in (before, after))
    assert old != new


def test_plotly_is_compressed_once_and_still_whole(client):
    first = client.get("/vendor/plotly.min.js", headers={"accept-encoding": "gzip"})
    assert first.headers["content-encoding"] == "gzip"
    from attnlab.web.app import _plotly_js

    assert first.content == _plotly_js().read_bytes()  # httpx undoes the gzip
    raw = client.get("/vendor/plotly.min.js", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in raw.headers and raw.content == first.content
    from attnlab.web.pagefiles import gzipped

    assert gzip.decompress(gzipped(_plotly_js())) == first.content


def test_head_on_the_page_matches_its_get(client):
    head, get = client.head("/"), client.get("/")
    assert head.content == b"" and head.headers["content-length"] == get.headers["content-length"]
