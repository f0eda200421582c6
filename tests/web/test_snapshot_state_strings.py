"""Snapshot state strings a careless or hostile link can carry.

The page skips a part of its URL state that does not parse; ``/snapshot`` and ``attnlab
snapshot --state`` read the same state, so they skip it too (they crashed with HTTP 500 and a
traceback on a superscript digit, a pair of letters, or a learned head with too few parts). A
snapshot computes every figure's requests and is megabytes, so another site's page may not make
a visitor's browser fetch one: it sits behind the cross-site guard as the API does.
"""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from attnlab.cli import app as cli
from attnlab.web import create_app
from attnlab.web.snapshot import state_requests

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

HOSTILE = [
    "mh.word=²",
    "perm.order=²",
    "perm.order=1,²,x,3",
    "stepper.blocked=a-b",
    "stepper.blocked=1-2;x-;-3;²-1",
    "stepper.learned=1&stepper.tokens=x",
    "stepper.learned=&stepper.tokens=",
    "hist.dk=1%262",
    "mh.word=99999999999999999999",
]


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), base_url="http://127.0.0.1:8000") as c:
        yield c


@pytest.fixture(scope="module")
def cfg(client):
    return client.get("/api/config").json()


@pytest.mark.parametrize("state", HOSTILE)
def test_a_state_part_that_does_not_parse_is_skipped_by_the_snapshot_route(client, state):
    response = client.get("/snapshot", params={"state": state})
    assert response.status_code == 200
    assert response.text.lstrip().lower().startswith("<!doctype html")


def test_the_parts_that_parse_are_kept_and_the_rest_skipped(cfg):
    requests = state_requests("perm.order=2,²,x,1&stepper.blocked=1-2;a-b;²-1&mh.word=3", cfg)
    bodies = {path: body for _method, path, body in requests}
    assert bodies["/api/permutation"]["order"] == [1, 0]  # 1-based in the URL
    assert bodies["/api/trace"]["blocked"] == [[0, 1]]
    assert "/api/multihead?query=2" in bodies
    paths = [path for _method, path, _body in state_requests("mh.word=²", cfg)]
    assert not any(p.startswith("/api/multihead") for p in paths)
    learned = state_requests("stepper.learned=1&stepper.tokens=x", cfg)
    assert learned[0][:2] == ("POST", "/api/trace")  # the stepper's default, not a learned head


@pytest.mark.parametrize("state", ["mh.word=²", "stepper.blocked=a-b"])
def test_the_cli_snapshot_skips_them_too(tmp_path, state):
    out = tmp_path / "page.html"
    result = CliRunner().invoke(cli, ["snapshot", "--state", state, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")


@pytest.mark.parametrize("path", ["/snapshot", "/docs"])
@pytest.mark.parametrize(
    "headers",
    [{"sec-fetch-site": "cross-site"}, {"origin": "https://attacker.example"}],
)
def test_pages_that_compute_refuse_another_sites_request(client, path, headers):
    response = client.get(path, headers=headers)
    assert response.status_code == 403
    assert "cross-site" in response.json()["message"]


@pytest.mark.parametrize("path", ["/snapshot", "/docs"])
def test_the_explorers_own_page_and_a_typed_address_still_get_them(client, path):
    for site in ("same-origin", "none"):
        assert client.get(path, headers={"sec-fetch-site": site}).status_code == 200
