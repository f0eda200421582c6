"""The explorer's server on a real socket (uvicorn on 127.0.0.1, the protocol `attnlab serve`
runs): oversized headers get 431, Content-Length with Transfer-Encoding never smuggles a second
request, and a head that trickles in (slowloris) loses its connection. Every loop is bounded."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn

from attnlab.web import create_app, protocol

LOOP_S = 8.0  # the longest any loop here may run


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(protocol, "HEAD_TIMEOUT_S", 1.0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    live = uvicorn.Server(
        protocol.server_config(create_app(), "127.0.0.1", port, log_level="error")
    )
    thread = threading.Thread(target=live.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not live.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield port
    live.should_exit = True
    thread.join(10)


def _exchange(port: int, data: bytes, wait: float = 3.0) -> bytes:
    """Send ``data``, read until the server closes or ``wait`` seconds pass."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
    return out


def _statuses(raw: bytes) -> list[bytes]:
    return [line for line in raw.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def test_a_normal_request_is_served(server):
    raw = _exchange(server, b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", wait=2)
    assert _statuses(raw)[0].startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("size", [20_000, 100_000])
def test_oversized_headers_get_431(server, size):
    head = b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
    assert _statuses(_exchange(server, head)) == [b"HTTP/1.1 431 Request Header Fields Too Large"]


def test_content_length_with_transfer_encoding_never_serves_a_second_request(server):
    smuggled = b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for first in (
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ):
        raw = _exchange(
            server,
            b"POST /api/exercises/2/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + first + b"\r\n0\r\n\r\n" + smuggled,
        )
        assert _statuses(raw) == [b"HTTP/1.1 400 Bad Request"], raw[:300]
        assert b'"stepper"' not in raw  # /api/config's answer never came


def test_a_trickled_head_loses_its_connection(server):
    # A byte every 0.1 s: the head never completes, and the server closes after 1 s.
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server), timeout=1) as s:
        s.sendall(b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = False
        while time.monotonic() - started < LOOP_S:
            try:
                s.sendall(b"X")
                s.settimeout(0.1)
                closed = s.recv(1024) == b""
            except TimeoutError:
                continue
            except OSError:  # reset or broken pipe: closed as well
                closed = True
            if closed:
                break
    assert closed, f"the connection was still open after {LOOP_S:g} s of trickling"
    assert time.monotonic() - started < LOOP_S


def test_an_idle_connection_after_an_answer_is_closed_too(server):
    with socket.create_connection(("127.0.0.1", server), timeout=LOOP_S) as s:
        s.sendall(b"GET /api/config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        started, data = time.monotonic(), b""
        while time.monotonic() - started < LOOP_S:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        assert _statuses(data)[0].startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started < LOOP_S
