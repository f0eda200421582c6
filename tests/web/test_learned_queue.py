"""The learned routes on a queue of their own: one answer computed at a time, at most
``MAX_WAITING`` waiting, the next refused at once with 429 and Retry-After; and an answer
computed once per sequence and checkpoint.

64 concurrent ``/api/learned`` requests were all run at once on the pool that serves every
sync route, and ``GET /`` waited up to 5 s behind them.
"""

from __future__ import annotations

import threading
import time
import warnings

import pytest

import attnlab.web.learned as web_learned
from attnlab.web import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), raise_server_exceptions=False, base_url="http://127.0.0.1") as c:
        yield c


def _wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_learned_queue_answers_429_at_once(client, monkeypatch):
    release, started = threading.Event(), []
    original = web_learned._sequence

    def held(*args, **kwargs):
        started.append(1)
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(web_learned, "_sequence", held)
    answers: list = []
    lock = threading.Lock()

    def ask(i: int):
        answer = client.get("/api/learned", params={"seed": i})  # distinct: no cached answer
        with lock:
            answers.append(answer)

    assert client.get("/").status_code == 200  # warm: the page's first answer reads files
    asked = [threading.Thread(target=ask, args=(i,)) for i in range(64)]
    try:
        for t in asked:
            t.start()
        waiting = getattr(web_learned, "MAX_WAITING", 16)  # the queue this test asks for
        _wait_for(lambda: len(answers) >= 64 - 1 - waiting)  # the refused ones, all at once
        refused = [a for a in answers if a.status_code == 429]
        assert len(refused) == 64 - 1 - waiting and len(started) == 1
        assert all(int(a.headers["Retry-After"]) >= 1 for a in refused)
        assert "queue" in refused[0].json()["message"]
        start = time.monotonic()
        assert client.get("/").status_code == 200
        seconds = time.monotonic() - start
        assert client.get("/api/equation").status_code == 200
        assert seconds < 2, seconds
    finally:
        release.set()
        for t in asked:
            t.join(60)
    assert sorted(a.status_code for a in answers).count(200) == 1 + waiting


def test_an_answer_is_computed_once_per_sequence(client, monkeypatch):
    from attnlab.transformer import TinyTransformer

    calls = []
    original = TinyTransformer.attention_weights

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    params = {"tokens": "5 9 12 40 7 5 9 12 41", "checkpoint": 0}
    client.get("/api/learned", params={**params, "tokens": "1 2"})  # the heads' labels, once
    monkeypatch.setattr(TinyTransformer, "attention_weights", counted)
    first = client.get("/api/learned", params=params)
    again = [client.get("/api/learned", params=params) for _ in range(3)]
    assert first.status_code == 200 and all(a.json() == first.json() for a in again)
    assert len(calls) == 1
