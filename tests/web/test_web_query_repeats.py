"""How query values must be written: a key given twice is refused where the route takes one
value (a list where it takes one), and an integer must be written as one.

FastAPI alone keeps the last repetition (`?query=9&query=1` answers for query 1); the long fuzz
sent such a request (a list where the multi-head view's `query` takes one integer) and the
server answered 200 for a value the client never meant; then `?query=0.0`, a one-item list
of floats, which pydantic alone reads as the integer 0.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("/api/multihead?query=9&query=1", "query"),
        ("/api/multihead?query=%5B%5D&query=0", "query"),
        ("/api/learned/head?layer=0&layer=1&head=0&query=3", "layer"),
        ("/api/histogram?d_k=16&d_k=64", "d_k"),
        ("/api/labs/variance?widths=16&draws=1000&draws=2000", "draws"),
    ],
)
def test_a_repeated_single_value_key_is_refused_naming_it(client, url, key):
    answer = client.get(url)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert {d["field"] for d in body["detail"]} == {key}
    assert "takes one value" in body["message"] and key in body["message"]


def test_the_last_of_the_repetitions_was_what_fastapi_alone_would_answer(client):
    # The refused request differs from the one-value request it would otherwise have been
    # answered as: the single value is served, the repetition is not.
    assert client.get("/api/multihead?query=1").status_code == 200
    assert client.get("/api/multihead?query=9&query=1").status_code == 422


def test_a_list_parameter_still_takes_its_repetitions(client):
    answer = client.get("/api/labs/variance?widths=16&widths=32&draws=1000&seed=3")
    assert answer.status_code == 200, answer.text
    assert answer.json()["params"]["widths"] == [16, 32]


def test_every_list_parameter_in_the_schema_is_one_the_rule_lets_repeat(client):
    from attnlab.web.queryform import _route_rules

    rules = _route_rules(client.app)
    schema = client.get("/openapi.json").json()
    declared = {
        (method.upper(), path, p["name"])
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        for p in operation.get("parameters", ())
        if p["in"] == "query" and "array" in str(p["schema"])
    }
    assert declared, "the labs declare list parameters (widths, lengths)"
    assert {("GET", "/api/labs/cost", "lengths"), ("GET", "/api/labs/sweep", "widths")} <= declared
    assert declared == {(m, p, name) for (m, p), r in rules.items() for name in r.lists}


def test_the_page_itself_ignores_repeated_keys(client):
    # The explorer keeps its own state in the URL; the rule is for the API's parameters.
    assert client.get("/?digits=4&digits=6").status_code == 200


@pytest.mark.parametrize(
    ("url", "key", "text"),
    [
        ("/api/multihead?query=0.0", "query", "'0.0'"),
        ("/api/histogram?d_k=64.0", "d_k", "'64.0'"),
        ("/api/learned/head?layer=0&head=0&query=1e1", "query", "'1e1'"),
        ("/api/learned?checkpoint=2.0", "checkpoint", "'2.0'"),
        ("/api/labs/variance?widths=16&widths=32.0&draws=1000", "widths", "'32.0'"),
    ],
)
def test_an_integer_not_written_as_one_is_refused_naming_it(client, url, key, text):
    answer = client.get(url)
    assert answer.status_code == 422, answer.text
    assert [d["field"] for d in answer.json()["detail"]] == [key]
    assert text in answer.json()["message"]


@pytest.mark.parametrize("url", ["/api/multihead?query=0", "/api/multihead?query=%2B2"])
def test_integers_written_with_digits_and_a_sign_are_served(client, url):
    assert client.get(url).status_code == 200
