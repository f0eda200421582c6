"""The cross-site guard compares a whole origin: scheme, host and port.

Another program on this machine (a dev server on port 3000, say) is another origin; a page it
serves must not run the labs through the visitor's browser.
"""

from __future__ import annotations

import pytest

LAB = "/api/labs/saturation?trials=1&keys=2&d_k=1"
HOST = "127.0.0.1:8000"


@pytest.fixture(scope="module")
def client():
    import warnings

    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    with TestClient(create_app(), base_url=f"http://{HOST}") as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://localhost:3000"},
        {"origin": "http://127.0.0.1:3000"},
        {"origin": "http://127.0.0.1"},  # port 80, not the server's 8000
        {"origin": "https://127.0.0.1:8000"},  # another scheme
        {"origin": "http://localhost:8000"},  # another host name for the same socket
        {"referer": "http://localhost:3000/x"},
        {"referer": "http://127.0.0.1:3000/"},
        {"referer": "https://127.0.0.1:8000/"},
    ],
)
def test_another_port_scheme_or_host_is_refused(client, headers):
    for path in (LAB, "/api/equation", "/api/learned"):
        answer = client.get(path, headers=headers)
        assert answer.status_code == 403, (headers, path, answer.text[:200])
        assert "cross-site" in answer.json()["message"]


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        (HOST, "http://127.0.0.1:8000"),
        (HOST, "HTTP://127.0.0.1:8000"),
        ("localhost:8000", "http://localhost:8000"),
        ("[::1]:8000", "http://[::1]:8000"),
        ("127.0.0.1", "http://127.0.0.1"),
        ("127.0.0.1:80", "http://127.0.0.1"),  # the default port, written or not
    ],
)
def test_the_servers_own_origin_is_served(client, host, origin):
    assert client.get(LAB, headers={"host": host, "origin": origin}).status_code == 200
    referer = origin + "/#labs"
    assert client.get(LAB, headers={"host": host, "referer": referer}).status_code == 200
