"""Edges of the web API: what becomes 422, what is a 500, and odd bodies.

Only AttnlabError (FieldError included) and request validation become 422; any other exception
is a bug and answers 500 with its traceback in the log. Bodies Python's JSON parser cannot read
get the documented 422 shape, and no error answer grows with its request.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings

import pytest

from attnlab.errors import AttnlabError, ShapeError
from attnlab.web import create_app
from attnlab.web.app import MAX_BODY_BYTES
from attnlab.web.errors import MAX_ECHO, MAX_ERRORS
from attnlab.web.models import FieldError

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

LOCAL = "http://127.0.0.1:8000"
JSON = {"content-type": "application/json"}
MAX_ANSWER = 4096  # bytes: the largest error answer, however large or odd the request


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def documented_422(response, field: str = "body") -> dict:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"message", "detail"}, body
    assert all(set(e) == {"field", "loc", "msg", "type"} for e in body["detail"])
    assert field in body["message"], body["message"]
    return body


# -- 422 for what a request causes, 500 for a bug -------------------------------------------------


def test_field_error_is_an_attnlab_error():
    error = FieldError("order", "expected a reordering, but got [0, 0] instead")
    assert isinstance(error, AttnlabError) and error.field == "order"


def _app_with_test_routes():
    app = create_app()

    @app.get("/test-only/bug")
    def bug():
        raise ValueError("a bug, not the user's fault")

    @app.get("/test-only/refused")
    def refused():
        raise ShapeError("expected q of shape (N, d_k), but got (3,) instead")

    @app.get("/test-only/field")
    def field():
        raise FieldError("seed", "expected a seed from 0, but got -1 instead")

    return app


def test_a_plain_value_error_is_a_500_and_an_attnlab_error_a_422():
    app = _app_with_test_routes()
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as client:
        bug_answer = client.get("/test-only/bug")
        assert bug_answer.status_code == 500
        assert "a bug" not in bug_answer.text  # the traceback goes to the log, not the client
        assert (
            "q of shape" in documented_422(client.get("/test-only/refused"), "request")["message"]
        )
        assert (
            documented_422(client.get("/test-only/field"), "seed")["detail"][0]["field"] == "seed"
        )
    with TestClient(app, base_url=LOCAL) as raising, pytest.raises(ValueError, match="a bug"):
        raising.get("/test-only/bug")  # and a test client sees the bug itself


def test_a_bugs_traceback_is_in_the_server_log():
    import uvicorn

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("uvicorn.error")
    log.addHandler(handler)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(_app_with_test_routes(), log_config=None, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/test-only/bug", timeout=10)
        answer.value.close()  # the error holds the connection open
        assert answer.value.code == 500
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
        log.removeHandler(handler)
    logged = [r for r in records if r.exc_info and isinstance(r.exc_info[1], ValueError)]
    assert logged and "a bug" in str(logged[0].exc_info[1])


# -- bodies the JSON parser cannot read -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"q": [[1, 2]], "k": "\xff\xfe"}', "UTF-8"),
        (b'{"q": [[1, 2]], "k": "\xc3"}', "UTF-8"),
        (b"[" * 100_00 + b"]" * 100_00, "nested too deep"),
        (b'{"q": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deep"),
        (b'{"q": [[' + b"9" * 5000 + b"]]}", "4300 digits"),
        (b'{"blocked": [[' + b"1" * 4301 + b", 0]]}", "4300 digits"),
    ],
    ids=["invalid-utf8", "truncated-utf8", "deep-array", "deep-field", "huge-int", "huge-index"],
)
def test_unreadable_bodies_are_documented_422s(client, body, words):
    for path in ("/api/trace", "/api/permutation", "/api/exercises/2/check"):
        answer = documented_422(client.post(path, content=body, headers=JSON))
        assert words in answer["message"], answer["message"]
        assert answer["detail"][0]["type"] == "json_invalid"


def test_other_http_errors_keep_their_status_in_the_same_shape(client):
    assert client.get("/api/nowhere").status_code == 404
    assert set(client.get("/api/nowhere").json()) == {"message", "detail"}
    assert client.put("/api/trace").status_code == 405
    big = json.dumps({"pad": "x" * (MAX_BODY_BYTES + 10)})
    assert client.post("/api/trace", content=big, headers=JSON).status_code == 413
    half = len(big) // 2
    chunks = iter([big[:half].encode(), big[half:].encode()])  # no Content-Length
    too_big = client.post("/api/trace", content=chunks, headers=JSON)
    assert too_big.status_code == 413 and set(too_big.json()) == {"message", "detail"}


# -- an error answer does not grow with its request -----------------------------------------------

AMPLIFIERS = [
    ("POST", "/api/trace", {"q": [[True] * 8] * 8, "k": [[True] * 8] * 8, "v": [[""] * 8] * 8}),
    ("POST", "/api/trace", {"blocked": [["", ""]] * 64}),
    ("POST", "/api/trace", {f"extra{i}": 0 for i in range(500)}),
    ("POST", "/api/trace", {"x" * 20_000: 0}),
    ("POST", "/api/permutation", {"order": ["x" * 20_000]}),
    ("POST", "/api/exercises/2/check", {"answer": "x" * 20_000}),
    ("GET", "/api/labs/variance?" + "&".join(["widths=x" * 50] * 8), None),
    ("GET", "/api/labs/permutation?word=" + "w" * 30 + "&sentence=" + "a%20" * 49 + "b", None),
    ("GET", "/api/labs/" + "n" * 99, None),
    (
        "GET",
        "/api/histogram?d_k=" + "9" * 5000 + "&" + "&".join(f"f{i}=1" for i in range(50)),
        None,
    ),
]


@pytest.mark.parametrize(("method", "url", "body"), AMPLIFIERS)
def test_error_answers_are_bounded(client, method, url, body):
    response = client.request(method, url, json=body)
    assert response.status_code == 422, response.text
    assert len(response.content) <= MAX_ANSWER, len(response.content)
    detail = response.json()["detail"]
    assert len(detail) <= MAX_ERRORS
    assert all(len(e["field"]) <= MAX_ECHO and len(e["msg"]) <= MAX_ECHO for e in detail)


def test_the_count_of_errors_left_out_is_said(client):
    body = {"q": [[True] * 8] * 8}
    message = client.post("/api/trace", json=body).json()["message"]
    assert message.endswith(f"and {64 - MAX_ERRORS} more errors"), message


# -- strict indices, HEAD on the page ------------------------------------------------------------


@pytest.mark.parametrize("pair", [[True, 0], [0, False], [1.0, 0], ["1", 0]])
def test_blocked_pairs_take_json_integers_only(client, pair):
    response = client.post("/api/trace", json={"causal": False, "blocked": [pair]})
    field = "blocked[0][1]" if pair[1] is False else "blocked[0][0]"
    documented_422(response, field)


@pytest.mark.parametrize("flag", ["causal", "scaled"])
@pytest.mark.parametrize("value", [0, 1, "true", None])
def test_switches_take_json_booleans_only(client, flag, value):
    # Found by the schema-driven test: "scaled": 0 was read as false.
    documented_422(client.post("/api/trace", json={flag: value}), flag)


def test_permutation_order_takes_json_integers_only(client):
    documented_422(client.post("/api/permutation", json={"order": [True, 0, 2, 3, 4]}), "order[0]")
    assert client.post("/api/permutation", json={"order": [1, 0, 2, 3, 4]}).status_code == 200


def test_head_on_the_page_is_answered(client):
    head, get = client.head("/"), client.get("/")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers["content-length"] == get.headers["content-length"]
