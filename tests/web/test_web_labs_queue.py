"""The lab routes on their own queue, and the lab and exercise fixes seen over HTTP.

A queue of lab requests used to freeze the server: each waited up to 30 s for the one lab slot
on a thread of the pool that serves every route, so with 80 queued `GET /` hung. Now labs run on
their own worker, at most ``MAX_WAITING`` wait, and the next gets 429 with Retry-After at once.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import warnings

import pytest

import attnlab.web.labs as web_labs
from attnlab import labs
from attnlab.web import create_app
from attnlab.web.labs import MAX_WAITING, QUEUE, LabQueue

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

LOCAL = "http://127.0.0.1"  # the explorer serves loopback names only


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def _wait_for(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_queue_answers_429_at_once_and_other_routes_still_answer(client, monkeypatch):
    spec, release = labs.LABS["permutation"], threading.Event()

    @functools.wraps(spec.run)  # the same signature, so the spec still matches its function
    def held(*args, **kwargs):
        release.wait(30)
        return spec.run(*args, **kwargs)

    monkeypatch.setitem(labs.LABS, "permutation", dataclasses.replace(spec, run=held))
    answers: list = []

    def ask():
        answers.append(client.get("/api/labs/permutation", params={"d_model": 4}))

    accepted = [threading.Thread(target=ask) for _ in range(1 + MAX_WAITING)]
    # More than the 40 threads of the pool that serves the sync routes: these must not hold them.
    extra = [threading.Thread(target=ask) for _ in range(45)]
    try:
        for t in accepted:
            t.start()
        _wait_for(lambda: QUEUE.count == 1 + MAX_WAITING)
        start = time.monotonic()
        busy = client.get("/api/labs/variance")
        assert busy.status_code == 429 and time.monotonic() - start < 2
        assert int(busy.headers["Retry-After"]) >= 1 and "queue" in busy.json()["message"]
        for t in extra:
            t.start()
        for t in extra:
            t.join(10)
        assert [a.status_code for a in answers] == [429] * len(extra)
        start = time.monotonic()
        assert client.get("/api/equation").status_code == 200
        assert client.get("/api/histogram", params={"d_k": 64}).status_code == 200
        assert client.get("/").status_code == 200
        assert time.monotonic() - start < 10
    finally:
        release.set()
        for t in accepted:
            t.join(30)
    assert [a.status_code for a in answers[len(extra) :]] == [200] * (1 + MAX_WAITING)
    _wait_for(lambda: QUEUE.count == 0)
    assert client.get("/api/labs/permutation", params={"d_model": 4}).status_code == 200


def test_the_queue_counts_what_runs_and_waits_and_says_how_long():
    queue, gate = LabQueue(waiting=1), threading.Event()
    first = queue.submit(lambda: gate.wait(10), seconds=3.2)
    second = queue.submit(lambda: "done", seconds=0.5)
    assert first is not None and second is not None
    assert queue.submit(lambda: None, seconds=1.0) is None  # full: one running, one waiting
    assert queue.count == 2 and queue.retry_after() == 4  # ceil(3.2 + 0.5)
    gate.set()
    assert second.result(10) == "done"
    _wait_for(lambda: queue.count == 0)
    assert queue.retry_after() == 1


def test_a_lab_error_inside_the_queue_is_still_a_422(client):
    answer = client.get("/api/labs/cost", params={"d_model": 30, "heads": 4})
    assert answer.status_code == 422 and "heads" in answer.json()["message"]
    _wait_for(lambda: QUEUE.count == 0)


def test_an_estimate_past_the_web_budget_is_refused_naming_the_budget_field(client, monkeypatch):
    # The web bounds keep every request within the budget (test_web_budget.py), so the check
    # is a second guard: seen here with the budget lowered under the default run's estimate.
    monkeypatch.setattr(web_labs, "WEB_SECONDS", 0.01)
    answer = client.get("/api/labs/variance")
    assert answer.status_code == 422
    assert answer.json()["message"].startswith("draws:") and "estimated" in answer.json()["message"]


def test_a_fully_saturated_trial_is_answered_not_a_500(client):
    # The Jacobian norm was exactly 0 here and summary() divided by it.
    answer = client.get(
        "/api/labs/saturation", params={"d_k": 128, "keys": 2, "trials": 1, "seed": 2}
    )
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["summary"]) == 2


@pytest.mark.parametrize(("answer", "correct"), [(1.969, True), ("1.969", True), (1.97, False)])
def test_exercise_2_over_http_agrees_with_its_message(client, answer, correct):
    verdict = client.post("/api/exercises/2/check", json={"answer": answer}).json()
    assert verdict["correct"] is correct, verdict["message"]


@pytest.mark.parametrize("answer", ["true", "false", '"1_959"', '"nan"', "[1.959]"])
def test_exercise_answers_must_be_a_json_number_or_a_plain_number_in_text(client, answer):
    body = '{"answer": ANSWER}'.replace("ANSWER", answer)
    refused = client.post(
        "/api/exercises/2/check", content=body, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 422 and "answer" in refused.json()["message"], refused.text
