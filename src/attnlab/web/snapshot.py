"""One self-contained HTML file of the explorer at one state: to hand out, or open from disk.

    snapshot_html(app, query)   the page as one file: its CSS inlined, every module of static/js
                                as a data: URL in an import map (imports rewritten to the bare
                                names the map gives them), plotly.js inlined from the installed
                                plotly package, and the API's answers to the requests the page
                                makes at that state (``state_requests``), asked of the app
                                itself. The state is written into the URL before the modules
                                run, so the file opens at it from any folder.

Opened from disk, the page asks no server and no network: each figure is drawn from the inlined
answers, and a control whose request has no answer in the file (a lab run, a checked exercise, a
new input) says beside itself that it needs ``attnlab serve``. ``attnlab snapshot`` writes one;
the page's "Save as one file" button builds the same shell (GET /snapshot) and puts in the
answers the page itself has received so far.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from attnlab.web import pagefiles

__all__ = ["router", "shell_html", "snapshot_html", "state_requests"]

router = APIRouter(tags=["snapshot"])
STATIC = Path(__file__).parent / "static"

_FROM = re.compile(r"""(\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)(["'])\./([\w.-]+\.js)\2""", re.M)
_STYLE = re.compile(r'<link rel="stylesheet" href="/static/([\w.-]+\.css)">')
_MAIN = '<script type="module" src="/static/js/main.js"></script>'


def _module_url(text: str) -> str:
    # Bare names ("attnlab/x.js"): a data: URL cannot be the base of a relative import.
    text = _FROM.sub(lambda m: f"{m[1]}{m[2]}attnlab/{m[3]}{m[2]}", text)
    return "data:text/javascript;base64," + base64.b64encode(text.encode()).decode()


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs  # here: only a snapshot pays for importing plotly

    return get_plotlyjs()


def shell_html(root: Path, query: str, answers: list[dict]) -> str:
    """The page with everything inlined; ``answers`` as its inlined API answers."""
    html = (root / "index.html").read_text(encoding="utf-8")
    html = _STYLE.sub(lambda m: f"<style>{(root / m[1]).read_text(encoding='utf-8')}</style>", html)
    modules = {
        f"attnlab/{p.name}": _module_url(p.read_text(encoding="utf-8"))
        for p in sorted((root / "js").glob("*.js"))
    }
    data = json.dumps(answers, separators=(",", ":")).replace("</", "<\\/")
    state = json.dumps(query.lstrip("?")).replace("</", "<\\/")
    head = [
        # Opened from disk the file has no query string: give it the saved state before the
        # modules read it (a link to the file with its own query wins).
        f"<script>window.attnlabSnapshot = true; if (!location.search && {state}) "
        f'history.replaceState(null, "", "?" + {state} + location.hash);</script>',
        f'<script type="importmap">{json.dumps({"imports": modules})}</script>',
        f'<script type="application/json" id="attnlab-first">{data}</script>',
        "<script>" + _plotly_js().replace("</script", "<\\/script") + "</script>",
    ]
    html = html.replace("<head>", "<head>\n" + "\n".join(head), 1)
    return html.replace(_MAIN, '<script type="module">import "attnlab/main.js";</script>', 1)


def _matrix(text: str | None):
    if not text:
        return None
    try:
        return [[float(x) if "." in x or "e" in x else int(x) for x in row.split(",")]
                for row in text.split(";")]  # fmt: skip
    except ValueError:
        return None


def _index(text: str) -> int | None:
    """A 1-based index of the page's URL as a 0-based one, or None: ASCII digits only, as the
    API routes read them ('²' is a digit to str.isdigit, but not to int)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return None
    return int(text) - 1


def _blocked(text: str) -> list[list[int]]:
    """stepper.blocked's "i-j;..." pairs (1-based) as 0-based pairs; a pair that does not parse
    is skipped, as the page skips it."""
    pairs = []
    for pair in text.split(";"):
        i, _, j = pair.partition("-")
        a, b = _index(i), _index(j)
        if a is not None and b is not None:
            pairs.append([a, b])
    return pairs


def _learned_head(q: dict) -> tuple[str, Any] | None:
    """The stepper's request for a learned head at ``q``'s state, or None when
    stepper.learned is not "layer,head,query"."""
    parts = q["stepper.learned"].split(",")
    if len(parts) < 3:
        return None
    layer, head, at = parts[:3]
    params = {"layer": layer, "head": head, "query": at,
              "tokens": q["stepper.tokens"].replace(",", " ")}  # fmt: skip
    run = q.get("stepper.run", "")
    if q.get("stepper.checkpoint") and not run:
        params["checkpoint"] = q["stepper.checkpoint"]
    base = f"/api/runs/{quote(run)}/learned/head" if run else "/api/learned/head"
    return ("GET", f"{base}?{urlencode(params)}", None)


def state_requests(query: str, cfg: dict) -> list[tuple[str, str, Any]]:
    """(method, path, body) of the requests the figures make at ``query``'s state beyond those
    of a page with no state, built as static/js/*.js builds them. A part of the state that does
    not parse is skipped, as the page skips it: the snapshot then shows that figure's default."""
    q = {k: v[-1] for k, v in parse_qs(query.lstrip("?"), keep_blank_values=True).items()}
    out: list[tuple[str, str, Any]] = []
    example = cfg["stepper"]["example"]
    learned = _learned_head(q) if "stepper.learned" in q and "stepper.tokens" in q else None
    if learned is not None:
        out.append(learned)
    else:
        out.append(("POST", "/api/trace", {
            **{n: _matrix(q.get(f"stepper.{n}")) or example[n] for n in ("q", "k", "v")},
            "causal": q.get("stepper.causal") != "0", "scaled": q.get("stepper.scaled") != "0",
            "blocked": _blocked(q.get("stepper.blocked", "")),
            "grad_output": _matrix(q.get("stepper.do"))}))  # fmt: skip
    dk = q.get("hist.dk", str(cfg["histogram"]["d_k_default"]))
    out.append(("GET", f"/api/histogram?{urlencode({'d_k': dk, 'scaled': 'true' if q.get('hist.scaled') == '1' else 'false'})}", None))  # fmt: skip
    if any(k in q for k in ("perm.order", "perm.pos", "perm.words")):
        order = [i for i in map(_index, q.get("perm.order", "").split(",")) if i is not None]
        words = q.get("perm.words", "").split()
        out.append(("POST", "/api/permutation", {"order": order or None, "words": words or None,
                                                 "positions": q.get("perm.pos") == "1"}))  # fmt: skip
    word = _index(q["mh.word"]) if "mh.word" in q else None
    if word is not None:
        out.append(("GET", f"/api/multihead?query={word}", None))
    if q.get("mh.mode") == "learned":
        params = {"tokens": q["mh.tokens"].replace(",", " ")} if q.get("mh.tokens") else {
            "seed": q.get("mh.seed", "0")}  # fmt: skip
        if q.get("mh.checkpoint"):
            params["checkpoint"] = q["mh.checkpoint"]
        out.append(("GET", f"/api/learned?{urlencode(params)}", None))
    out += [("GET", "/api/predict", None), ("GET", "/api/equations", None)]
    return out


async def snapshot_html(app, root: Path, query: str) -> str:
    """The explorer at ``query``'s state as one file (see the module's docstring)."""
    answers = list(await pagefiles.first_answers(app))
    _, cfg = await pagefiles._ask(app, "GET", "/api/config", None)
    for method, path, body in state_requests(query, cfg):
        status, answer = await pagefiles._ask(app, method, path, body)
        if status != 200:
            continue  # the page asks, and the saved file says that this needs the server
        answers.append({"method": method, "path": path, "body": body, "answer": answer})
        if "/learned/head?" in path:  # the stepper then traces that head's q, k, v (any model)
            trace = {"q": answer["q"], "k": answer["k"], "v": answer["v"], "causal": False,
                     "scaled": answer["scaled"], "blocked": [], "grad_output": None}  # fmt: skip
            status, traced = await pagefiles._ask(app, "POST", "/api/trace", trace)
            if status == 200:
                answers.append({"method": "POST", "path": "/api/trace", "body": trace,
                                "answer": traced})  # fmt: skip
    return shell_html(root, query, answers)


@router.get("/snapshot", include_in_schema=False)
async def snapshot(request: Request, state: str = Query("", max_length=4000)) -> Response:
    """The page at ``state`` (its query string) as one downloadable HTML file."""
    page = await snapshot_html(request.app, STATIC, state)
    headers = {"Content-Disposition": 'attachment; filename="attnlab-explorer.html"'}
    return Response(page, media_type="text/html; charset=utf-8", headers=headers)
