"""Browser-borne attacks on a server that listens on this machine only.

A web page on another site can still reach ``http://127.0.0.1:8000`` through the visitor's
browser. Two defences, both before any route runs:

    DNS rebinding   a page's own name made to resolve to 127.0.0.1: the request arrives with
                    that name in ``Host``. Only loopback names (and the ``--host`` the server was
                    started with) are accepted; others get 400 (Starlette's TrustedHostMiddleware).
    cross-site      a page elsewhere loading ``/api/labs/cost`` in an <img> or a no-cors fetch,
                    or posting to ``/api/trace`` from a form, to keep the CPU busy. Every
                    ``/api`` route refuses, with 403, a request whose ``Sec-Fetch-Site`` is
                    ``cross-site`` or ``same-site``, whose ``Origin`` is not the server's own
                    (scheme, host and port: a page on another port of this machine is
                    another origin), or, from a browser that sends neither, whose
                    ``Referer`` names a page of another origin. The page's own requests are ``same-origin``; a
                    script or curl sends none of the three and is served.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

__all__ = [
    "GUARDED_PAGES",
    "GUARDED_PREFIX",
    "LOOPBACK_HOSTS",
    "CrossSiteGuard",
    "allowed_hosts",
    "host_name",
    "is_guarded",
]

# As a Host header names them: an IPv6 literal keeps its brackets (RFC 3986).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
GUARDED_PREFIX = "/api/"  # every route that computes: the figures, the labs, the exercises
# Pages outside /api that compute too: a snapshot runs every figure's requests and is megabytes
# (another site's page could make a visitor's browser fetch it over and over); /docs renders the
# schema.
GUARDED_PAGES = ("/snapshot", "/docs")
_REFUSED_SITES = ("cross-site", "same-site")


def is_guarded(path: str) -> bool:
    """Whether a request for ``path`` must come from the explorer's own page (or no page)."""
    return path.startswith(GUARDED_PREFIX) or path in GUARDED_PAGES


def host_name(address: str) -> str:
    """An address as it appears in a Host header: '::1' -> '[::1]', '127.0.0.1' unchanged."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def allowed_hosts(extra: Iterable[str] = ()) -> list[str]:
    """Loopback names, plus ``extra`` (the address the server was started on)."""
    names = list(LOOPBACK_HOSTS)
    for address in extra:
        name = host_name(address.strip().lower())
        if name and name not in names:
            names.append(name)
    return names


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host as a Host header names it, port) of a URL, or None when it has none."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port  # .port raises ValueError on a malformed port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or host is None:
        return None  # includes Origin: null (a sandboxed frame, a file:// page)
    return scheme, host_name(host.lower()), _DEFAULT_PORTS[scheme] if port is None else port


def _same_origin(url: str, scope, headers: Headers, hosts: list[str]) -> bool:
    """Whether ``url`` is the server's own origin: its scheme, the Host this request was sent
    to (a loopback name or the server's own, which TrustedHostMiddleware checked) and its port.
    A page on another port of this machine (a dev server on :3000) is another origin."""
    own = _origin_of(f"{scope.get('scheme', 'http')}://{headers.get('host', '')}")
    return own is not None and own[1] in hosts and _origin_of(url) == own


class CrossSiteGuard:
    """ASGI middleware: 403 for a cross-site request to any ``/api`` route or guarded page."""

    def __init__(self, app, hosts: list[str]):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_guarded(scope["path"]):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        site = headers.get("sec-fetch-site", "").lower()
        origin = headers.get("origin")
        referer = headers.get("referer")
        if site in _REFUSED_SITES:
            got = f"Sec-Fetch-Site: {site}"
        elif origin is not None and not _same_origin(origin, scope, headers, self.hosts):
            got = f"Origin: {origin[:100]}"
        elif (
            not site
            and origin is None
            and referer
            and not _same_origin(referer, scope, headers, self.hosts)
        ):
            got = f"Referer: {referer[:100]}"  # an older browser: the page that sent it
        else:
            return await self.app(scope, receive, send)
        message = (
            "expected a request from the explorer's own page on this machine, "
            f"but got a cross-site request ({got}) instead"
        )
        detail = [{"field": "origin", "loc": ["header"], "msg": message, "type": "cross_site"}]
        response = JSONResponse({"message": message, "detail": detail}, status_code=403)
        await response(scope, receive, send)
