"""Browser-borne attacks on the local server: DNS rebinding and cross-site labs.

A Host that is not a loopback name (or the server's own --host) gets 400; a cross-site request
to a lab route gets 403 before the lab runs; ``attnlab serve --host ''`` is refused.
"""

from __future__ import annotations

import warnings

import pytest

from attnlab.web import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

LAB = "/api/labs/saturation?trials=1&keys=2&d_k=1"


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1:8000") as c:
        yield c


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "LOCALHOST"])
@pytest.mark.parametrize("port", ["", ":8000", ":1"])
def test_loopback_host_names_are_served(client, host, port):
    assert client.get("/api/equation", headers={"host": host + port}).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",  # DNS rebinding: the attacker's name, resolved to 127.0.0.1
        "attacker.example:8000",
        "127.0.0.1.attacker.example",
        "localhost.attacker.example",
        "127.0.0.2",
        "0.0.0.0",
        "[::2]",
        "",
        "testserver",
    ],
)
def test_other_host_names_get_400(client, host):
    for path in ("/", "/api/equation", LAB, "/openapi.json"):
        assert client.get(path, headers={"host": host}).status_code == 400, (host, path)


def test_the_servers_own_host_is_served_too():
    with TestClient(create_app(hosts=["192.0.2.7", "::"]), base_url="http://192.0.2.7") as c:
        assert c.get("/api/equation").status_code == 200
        assert c.get("/api/equation", headers={"host": "[::]:8000"}).status_code == 200
        assert c.get("/api/equation", headers={"host": "localhost"}).status_code == 200
        assert c.get("/api/equation", headers={"host": "192.0.2.8"}).status_code == 400


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},  # another port of a sibling name is still another site
        {"sec-fetch-site": "Cross-Site"},
        {"origin": "http://attacker.example"},
        {"origin": "https://127.0.0.1.attacker.example:8000"},
        {"origin": "null"},  # a sandboxed frame or a file:// page
        {"origin": "http://127.0.0.1:notaport"},
        {"origin": "ftp://127.0.0.1"},
        {"origin": "http://localhost:3000", "sec-fetch-site": "cross-site"},
        {"origin": "http://localhost:5173"},  # another port of this machine: another origin
    ],
)
def test_cross_site_requests_to_the_labs_get_403(client, headers):
    for path in (LAB, "/api/labs", "/api/labs/cost", "/api/labs/nope"):
        response = client.get(path, headers=headers)
        assert response.status_code == 403, (headers, path, response.text)
        body = response.json()
        assert "cross-site" in body["message"] and body["detail"][0]["field"] == "origin"


@pytest.mark.parametrize(
    "headers",
    [
        {},  # curl, a script: no browser headers at all
        {"sec-fetch-site": "same-origin"},  # the page's own fetch
        {"sec-fetch-site": "none"},  # typed in the address bar
        {"origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"},
        {"origin": "http://[::1]:8000", "host": "[::1]:8000"},
    ],
)
def test_the_pages_own_and_non_browser_requests_reach_the_labs(client, headers):
    assert client.get(LAB, headers=headers).status_code == 200


COMPUTE = [
    ("GET", "/api/equation", None),
    ("GET", "/api/histogram?d_k=4&seed=1", None),
    ("GET", "/api/multihead", None),
    ("POST", "/api/trace", {"q": [[1, 0]], "k": [[1, 0]], "v": [[1, 2]]}),
    ("POST", "/api/permutation", {}),
    ("POST", "/api/exercises/2/check", {"answer": "1.96"}),
    ("GET", LAB, None),
]
CROSS_SITE = [
    {"sec-fetch-site": "cross-site"},
    {"origin": "http://evil.example"},
    {"referer": "http://evil.example/"},  # an older browser sends only this
]


@pytest.mark.parametrize(("method", "path", "body"), COMPUTE)
@pytest.mark.parametrize("headers", CROSS_SITE)
def test_every_compute_route_refuses_a_cross_site_request(client, method, path, body, headers):
    response = client.request(method, path, json=body, headers=headers)
    assert response.status_code == 403, (method, path, headers, response.text)
    assert "cross-site" in response.json()["message"]


@pytest.mark.parametrize("referer", ["http://127.0.0.1:8000/", "http://127.0.0.1:8000/#labs"])
def test_the_pages_own_referer_is_served(client, referer):
    assert client.get("/api/equation", headers={"referer": referer}).status_code == 200
    assert client.get(LAB, headers={"referer": referer}).status_code == 200
    assert "access-control-allow-origin" not in client.get("/api/equation").headers


# -- attnlab serve --host -------------------------------------------------------------------------


def _serve(*args: str):
    from typer.testing import CliRunner

    from attnlab.cli import app

    return CliRunner().invoke(app, ["serve", *args])


@pytest.mark.parametrize("host", ["", " "])
def test_serve_refuses_an_empty_host(host):
    result = _serve("--host", host, "--port", "1")
    assert result.exit_code == 2
    assert "--host: expected an address to bind" in result.output
    assert len(result.output.strip().splitlines()) <= 2  # one line (rich may wrap it)


def test_serve_warns_loudly_when_it_binds_beyond_loopback(monkeypatch):
    import uvicorn

    started = {}

    def fake_run(self, sockets=None):
        started["app"] = self.config.app
        started["host"] = self.config.host

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    monkeypatch.setattr("attnlab.cli.serve._check_port", lambda host, port: None)
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    result = _serve("--host", "0.0.0.0", "--port", "8123")
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())
    assert "warning: binding every network interface" in words and "8123" in words
    with TestClient(started["app"], base_url="http://0.0.0.0:8123") as c:
        assert c.get("/api/equation").status_code == 200  # its own --host is served

    result = _serve("--port", "8123")  # the default, 127.0.0.1: no warning
    assert result.exit_code == 0 and "warning" not in result.output
