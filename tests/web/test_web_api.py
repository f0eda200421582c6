"""The explorer's JSON API through FastAPI's TestClient: every route, its numbers against
attnlab's core, and every way a request can be refused (422 naming the field, never 500)."""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab as al
from attnlab import labs
from attnlab.figures.multihead import SENTENCE as MH_SENTENCE
from attnlab.figures.permutation import EMBEDDINGS
from attnlab.figures.stepper import MAX_TOKENS, MAX_WIDTH
from attnlab.labs._plotly import lab_figure
from attnlab.web import create_app
from attnlab.web.app import MAX_BODY_BYTES, STATIC
from conftest import SMALL_LABS
from tolerances import CHAPTER, F64

with warnings.catch_warnings():
    # starlette prefers httpx2 and warns once, at import, when only httpx is installed.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

EXAMPLE = {"q": [[3, -3], [1, 1]], "k": [[-3, 3], [1, 1]], "v": [[0, -1], [1, 2]]}
LOCAL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def client():
    # A loopback base URL: the app answers only loopback Host names (DNS rebinding, web/guard.py).
    with TestClient(create_app(), raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def ok(response):
    assert response.status_code == 200, response.text
    return response.json()


def refused(response, field: str, status: int = 422) -> str:
    """Assert an error answer whose message names ``field``; return the message."""
    assert response.status_code == status, response.text
    message = response.json()["message"]
    assert field in message, message
    return message


# -- the stepper ---------------------------------------------------------------------------------


def test_trace_default_is_the_chapters_two_token_example(client):
    fig = ok(client.post("/api/trace"))
    t = fig["tables"]
    np.testing.assert_allclose(t["weights"]["values"], [[1, 0], [0.196, 0.804]], **CHAPTER)
    np.testing.assert_allclose(t["output"]["values"], [[0, -1], [0.804, 1.413]], **CHAPTER)
    np.testing.assert_allclose(t["scaled"]["values"], [[-12.728, 0], [0, 1.414]], **CHAPTER)
    assert t["masked"]["values"][0][1] == "-inf"  # blocked; null would mean no value
    assert t["mask"]["values"] == [[0, "-inf"], [0, 0]]
    assert fig["row_errors"] == [None, None]
    assert [s["id"] for s in fig["steps"]] == [
        "inputs",
        "scores",
        "scaled",
        "masked",
        "weights",
        "output",
        "grad_v",
        "grad_weights",
        "grad_scores",
        "grad_q",
        "grad_k",
    ]
    # The backward steps start from dO = all ones; a row of dS adds up to 0.
    assert t["grad_output"]["values"] == [[1, 1], [1, 1]]
    assert sum(t["grad_scores"]["values"][1]) == pytest.approx(0, abs=1e-12)


def test_trace_takes_an_upstream_gradient_and_names_a_bad_one(client):
    g = [[1, 2], [3, 4]]
    fig = ok(client.post("/api/trace", json={**EXAMPLE, "grad_output": g}))
    trace = al.trace_attention(
        np.array(EXAMPLE["q"], float), np.array(EXAMPLE["k"], float),
        np.array(EXAMPLE["v"], float), al.masks.Causal(), grad_output=np.array(g, float),
    )  # fmt: skip
    for name in ("grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k"):
        np.testing.assert_allclose(fig["tables"][name]["values"], getattr(trace, name), **F64)
    bad = client.post("/api/trace", json={**EXAMPLE, "grad_output": [[1, 2, 3], [4, 5, 6]]})
    assert bad.status_code == 422
    assert "(N, d_v) = (2, 2), but got shape (2, 3)" in bad.json()["message"]
    far = client.post("/api/trace", json={**EXAMPLE, "grad_output": [[1, 2], [3, 1e9]]})
    assert far.status_code == 422
    assert far.json()["detail"][0]["field"] == "dO row 2, column 2"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scaled", [True, False])
def test_trace_matches_trace_attention(client, causal, scaled):
    fig = ok(client.post("/api/trace", json={**EXAMPLE, "causal": causal, "scaled": scaled}))
    trace = al.trace_attention(
        EXAMPLE["q"],
        EXAMPLE["k"],
        EXAMPLE["v"],
        al.masks.Causal() if causal else None,
        scale=None if scaled else 1.0,
    )
    for stage in ("scores", "scaled", "weights", "output"):
        np.testing.assert_allclose(fig["tables"][stage]["values"], getattr(trace, stage), **F64)
    assert fig["scale"] == pytest.approx(trace.scale)


def test_trace_without_the_mask_puts_token_1_on_token_2(client):
    weights = ok(client.post("/api/trace", json={"causal": False}))["tables"]["weights"]
    np.testing.assert_allclose(weights["values"][0], [0.000003, 0.999997], atol=5e-7, rtol=0)


def test_trace_fully_masked_row_is_an_error_on_that_row_not_nan(client):
    body = {
        "q": [[1, 0], [0, 1], [1, 1]],
        "k": [[1, 0], [0, 1], [1, 1]],
        "v": [[1], [2], [3]],
        "blocked": [[0, 0]],
    }
    fig = ok(client.post("/api/trace", json=body))
    assert "query 1 may attend to no key" in fig["row_errors"][0]
    assert fig["row_errors"][1:] == [None, None]
    assert fig["tables"]["weights"]["values"][0] == [None, None, None]
    # The other rows are exactly what attention gives them.
    allowed = np.tril(np.ones((3, 3), bool))
    allowed[0, 0] = False
    _, weights = al.attention(
        np.array(body["q"])[1:], body["k"], body["v"], mask=allowed[1:], return_weights=True
    )
    np.testing.assert_allclose(fig["tables"]["weights"]["values"][1:], weights, **F64)


def test_trace_takes_eight_tokens_of_width_eight(client):
    x = np.arange(64, dtype=float).reshape(8, 8) / 64
    fig = ok(client.post("/api/trace", json={"q": x.tolist(), "k": x.tolist(), "v": x.tolist()}))
    np.testing.assert_allclose(
        fig["tables"]["output"]["values"], al.attention(x, x, x, mask=al.masks.Causal()), **F64
    )


# -- the histogram -------------------------------------------------------------------------------


def test_histogram_spread_grows_like_sqrt_dk_unscaled_and_stays_at_1_scaled(client):
    wide = ok(client.get("/api/histogram", params={"d_k": 256}))
    narrow = ok(client.get("/api/histogram", params={"d_k": 16}))
    assert wide["std"] / narrow["std"] == pytest.approx(4.0, rel=0.05)
    scaled = ok(client.get("/api/histogram", params={"d_k": 256, "scaled": True}))
    assert scaled["std"] == pytest.approx(1.0, abs=0.05)
    assert sum(wide["counts"]) + wide["outside"] == wide["draws"]
    assert len(wide["edges"]) == len(wide["counts"]) + 1


def test_histogram_numbers_are_the_labs(client):
    fig = ok(client.get("/api/histogram", params={"d_k": 128}))
    sat = labs.saturation(d_k=128, keys=64, trials=500, threshold=0.99, seed=0)
    hist = labs.score_histogram(
        128, scaled=False, draws=fig["draws"], bins=len(fig["counts"]), seed=0, limit=80.0
    )
    assert fig["counts"] == list(hist.counts) and fig["std"] == hist.std
    assert fig["unscaled_share"] == sat.unscaled_share == fig["saturated_share"]
    assert fig["gradient_term"] == sat.gradient_term
    # §6.3's measurement: about 35% of unscaled trials saturate at d_k = 128, 0% scaled,
    # with p(1 - p) about 0.0020 in those trials.
    assert 0.3 < fig["unscaled_share"] < 0.4 and fig["scaled_share"] == 0.0
    assert fig["gradient_term"] == pytest.approx(0.0020, abs=0.0005)


# -- the permutation demo ------------------------------------------------------------------------


def test_permutation_moves_outputs_with_their_tokens(client):
    plain = ok(client.post("/api/permutation"))
    shuffled = ok(client.post("/api/permutation", json={"order": [4, 2, 0, 3, 1]}))
    before = {t["id"]: t["output"] for t in plain["tokens"]}
    for token in shuffled["tokens"]:
        np.testing.assert_allclose(token["output"], before[token["id"]], atol=1e-12, rtol=0)
    assert [t["id"] for t in shuffled["tokens"]] == [4, 2, 0, 3, 1]
    np.testing.assert_allclose(
        [t["output"] for t in plain["tokens"]],
        al.attention(EMBEDDINGS, EMBEDDINGS, EMBEDDINGS),
        **F64,
    )


def test_permutation_with_positions_changes_the_values(client):
    fig = ok(client.post("/api/permutation", json={"order": [4, 2, 0, 3, 1], "positions": True}))
    assert max(t["max_change"] for t in fig["tokens"]) > 0.1
    x = EMBEDDINGS[[4, 2, 0, 3, 1]] + al.positions.sinusoidal(5, EMBEDDINGS.shape[1])
    np.testing.assert_allclose([t["output"] for t in fig["tokens"]], al.attention(x, x, x), **F64)


# -- the multi-head view and the equation -------------------------------------------------------


def test_multihead_it_looks_at_animal(client):
    fig = ok(client.get("/api/multihead", params={"query": MH_SENTENCE.index("it")}))
    assert fig["shape"] == [4, 10, 10]
    pronoun = fig["heads"][1]
    assert "it" in pronoun["describes"] and "animal" in pronoun["describes"]
    assert fig["tokens"][fig["picked"]["top"][1]] == "animal"
    scores = np.array([h["scores"] for h in fig["heads"]])
    np.testing.assert_allclose([h["weights"] for h in fig["heads"]], al.softmax(scores), **F64)
    np.testing.assert_allclose(np.sum(fig["picked"]["weights"], axis=-1), 1.0, **F64)
    assert len(fig["picked"]["joined"]) == len(fig["w_o"])
    np.testing.assert_allclose(
        fig["picked"]["mixed"], np.array(fig["picked"]["joined"]) @ np.array(fig["w_o"]), **F64
    )


def test_equation_symbols(client):
    fig = ok(client.get("/api/equation"))
    texts = [s["text"] for s in fig["symbols"]]
    assert texts == ["Attention(Q, K, V)", "softmax", "Q", "Kᵀ", "√d_k", "M", "V"]
    assert all(s["shape"] and s["what"] and s["target"] for s in fig["symbols"])


# -- labs and exercises --------------------------------------------------------------------------

# The five labs the page runs on its own, at the lab tests' small sizes.
SMALL = {
    name: SMALL_LABS[name] for name in ("variance", "saturation", "sweep", "permutation", "cost")
}


def test_labs_catalogue_lists_every_lab_with_bounds(client):
    catalogue = ok(client.get("/api/labs"))
    assert [lab["name"] for lab in catalogue] == list(labs.LABS)
    for lab in catalogue:
        seed = next(p for p in lab["params"] if p["name"] == "seed")
        assert seed["min"] == 0 and seed["max"] is not None


@pytest.mark.parametrize("name", list(SMALL))
def test_lab_runs_with_its_parameters_and_seed(client, name):
    result = ok(client.get(f"/api/labs/{name}", params={**SMALL[name], "seed": 3}))
    direct = labs.LABS[name](**SMALL[name], seed=3)
    columns, rows = direct.table()
    assert result["table"]["columns"] == columns and len(result["table"]["rows"]) == len(rows)
    assert len(result["table"]["titles"]) == len(columns)
    if name != "cost":  # timings differ run to run; everything else is fixed by the seed
        assert result["table"]["rows"] == json.loads(json.dumps(rows).replace("NaN", "null"))
        assert result["summary"] == direct.summary()
        # The route returns the whole Plotly figure the CLI's --plot and Jupyter draw.
        assert result["plot"] == json.loads(json.dumps(lab_figure(direct)))
    figure = result["plot"]
    assert figure["layout"]["height"] and all(t["x"] and t["y"] for t in figure["data"])


def test_lab_downloads_csv_and_json(client):
    params = {**SMALL["saturation"], "seed": 1}
    csv = client.get("/api/labs/saturation", params={**params, "download": "csv"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    assert csv.text.splitlines()[0].startswith("case,trials,saturated,share")
    data = client.get("/api/labs/saturation", params={**params, "download": "json"})
    assert data.json() == labs.saturation(**params).as_dict()


def test_exercises_list_hides_answers_and_check_grades(client):
    listed = ok(client.get("/api/exercises"))
    assert [e["number"] for e in listed] == list(range(1, 8))
    assert all("answer" not in e and "solution" not in e for e in listed)
    right = ok(client.post("/api/exercises/2/check", json={"answer": 1.959}))
    assert right["correct"] is True and right["solution"]
    wrong = ok(client.post("/api/exercises/5/check", json={"answer": 8000}))
    assert wrong["correct"] is False and wrong["expected"] == 8192
    written = ok(client.post("/api/exercises/4/check", json={"answer": "row 1 is [1, 0, 0]"}))
    assert written["correct"] is None and "1, 0, 0" in written["solution"]


# -- refusals: 422 naming the field, never 500 ---------------------------------------------------

TOO_WIDE = [[1.0] * (MAX_WIDTH + 1)]
REFUSALS = [
    ("POST", "/api/trace", {"q": [[1.0]] * 33}, "q"),
    ("POST", "/api/trace", {"q": TOO_WIDE, "k": TOO_WIDE, "v": TOO_WIDE}, "q[0]"),
    ("POST", "/api/trace", {"q": []}, "q"),
    ("POST", "/api/trace", {"q": [[1, 2], [3]]}, "q"),
    # Entries are named as the page counts them, from 1: "Q row 1, column 2".
    ("POST", "/api/trace", {"q": [[1, "x"]]}, "q[0][1]"),
    ("POST", "/api/trace", {"q": [[1e6, 0]]}, "Q row 1, column 1"),
    ("POST", "/api/trace", {"q": [[1, 0], [0, 2000]]}, "Q row 2, column 2"),
    ("POST", "/api/trace", {"v": [[1, 0], [0, -2000]]}, "V row 2, column 2"),
    ("POST", "/api/permutation", {"words": ["one"]}, "words"),
    ("POST", "/api/permutation", {"words": ["a", "b2"]}, "word 2"),
    ("POST", "/api/permutation", {"words": ["a", "x" * 21]}, "words"),
    ("POST", "/api/trace", {"k": [[1, 2, 3], [4, 5, 6]]}, "k.shape"),
    ("POST", "/api/trace", {"v": [[1, 2]]}, "v.shape"),
    ("POST", "/api/trace", {"blocked": [[9, 0]]}, "blocked[0]"),
    ("POST", "/api/trace", {"blocked": [[1, 5]]}, "blocked[0]"),
    ("POST", "/api/trace", {"causal": "maybe"}, "causal"),
    ("POST", "/api/trace", {"surprise": 1}, "surprise"),
    ("GET", "/api/histogram?d_k=8", None, "d_k"),
    ("GET", "/api/histogram?d_k=257", None, "d_k"),
    ("GET", "/api/histogram?d_k=sixty", None, "d_k"),
    ("GET", "/api/histogram?seed=-1", None, "seed"),
    ("POST", "/api/permutation", {"order": [0, 0, 1, 2, 3]}, "order"),
    ("POST", "/api/permutation", {"order": [0, 1, 2]}, "order"),
    ("POST", "/api/permutation", {"order": list(range(6))}, "order"),
    ("GET", "/api/multihead?query=10", None, "query"),
    ("GET", "/api/multihead?query=-1", None, "query"),
    ("GET", "/api/labs/nope", None, "name"),
    ("GET", "/api/labs/variance?draws=1000000&widths=1024", None, "draws"),
    ("GET", "/api/labs/variance?widths=0", None, "widths[0]"),
    (
        "GET",
        "/api/labs/variance?widths=1&widths=2&widths=3&widths=4&widths=5&widths=6&widths=7&widths=8&widths=9",
        None,
        "widths",
    ),
    ("GET", "/api/labs/saturation?threshold=1", None, "threshold"),
    ("GET", "/api/labs/saturation?trials=5000&keys=256&d_k=1024", None, "trials"),
    ("GET", "/api/labs/sweep?widths=1024&trials=2000&keys=256", None, "widths"),
    ("GET", "/api/labs/permutation?shuffled=The+cat", None, "shuffled"),
    ("GET", "/api/labs/permutation?word=cat", None, "word"),
    ("GET", "/api/labs/cost?d_model=30&heads=4", None, "heads"),
    ("GET", "/api/labs/cost?lengths=2048&heads=16&d_model=64", None, "lengths"),
    ("GET", "/api/labs/cost?dtype=float16", None, "dtype"),
    ("GET", "/api/labs/saturation?keys=1000", None, "keys"),
    ("GET", "/api/labs/cost?download=pdf", None, "download"),
    ("POST", "/api/exercises/0/check", {"answer": 1}, "n"),
    ("POST", "/api/exercises/8/check", {"answer": 1}, "n"),
    ("POST", "/api/exercises/2/check", {"answer": "two"}, "answer"),
    ("POST", "/api/exercises/2/check", {}, "answer"),
]


@pytest.mark.parametrize(("method", "url", "body", "field"), REFUSALS)
def test_refusals_name_the_field(client, method, url, body, field):
    refused(client.request(method, url, json=body), field)


@pytest.mark.parametrize("entry", ["true", '"1"', "null"])
def test_matrix_entries_must_be_json_numbers(client, entry):
    body = '{"q": [[ENTRY, 1], [1, 1]]}'.replace("ENTRY", entry)
    headers = {"content-type": "application/json"}
    refused(client.post("/api/trace", content=body, headers=headers), "q[0][0]")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(client, number):
    body = '{"q": [[NUMBER, 1], [1, 1]]}'.replace("NUMBER", number)
    headers = {"content-type": "application/json"}
    refused(client.post("/api/trace", content=body, headers=headers), "q[0][0]")
    body = '{"answer": NUMBER}'.replace("NUMBER", number)
    refused(client.post("/api/exercises/2/check", content=body, headers=headers), "answer")


def test_the_largest_valid_trace_request_fits_the_body_limit(client):
    """Three matrices of the stepper's largest shape, each number written with all 17 digits
    and a sign (a real model's head row as the page sends it), are read, not refused as 413."""
    rng = np.random.default_rng(0)
    rows = -rng.uniform(1e-5, 1e-4, size=(MAX_TOKENS, MAX_WIDTH))  # "-1.2345678901234567e-05"
    body = json.dumps({"q": rows.tolist(), "k": rows.tolist(), "v": rows.tolist()})
    assert len(body) > 500_000
    headers = {"content-type": "application/json"}
    assert client.post("/api/trace", content=body, headers=headers).status_code == 200


def test_malformed_json_is_422_and_a_huge_body_is_413(client):
    headers = {"content-type": "application/json"}
    refused(client.post("/api/trace", content=b'{"q": [[1,', headers=headers), "body")
    big = json.dumps({"q": [[0.0] * 8] * 8, "pad": "x" * MAX_BODY_BYTES})
    assert client.post("/api/trace", content=big, headers=headers).status_code == 413


matrices = st.lists(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True, width=64),
            st.integers(-(10**20), 10**20),
            st.text(max_size=3),
            st.none(),
        ),
        max_size=10,
    ),
    max_size=10,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    q=matrices,
    k=matrices,
    v=matrices,
    causal=st.booleans(),
    blocked=st.lists(st.lists(st.integers(-2, 9), max_size=3), max_size=4),
)
def test_no_trace_request_is_a_server_error(client, q, k, v, causal, blocked):
    body = json.dumps({"q": q, "k": k, "v": v, "causal": causal, "blocked": blocked})
    response = client.post("/api/trace", content=body, headers={"content-type": "application/json"})
    assert response.status_code in (200, 422), response.text
    if response.status_code == 200:
        json.loads(response.text)  # strict JSON: no NaN or Infinity escaped into the answer


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.lists(st.integers(-3, 8), max_size=7), positions=st.booleans())
def test_no_permutation_request_is_a_server_error(client, order, positions):
    response = client.post("/api/permutation", json={"order": order, "positions": positions})
    assert response.status_code in (200, 422), response.text


# -- the page, the docs and the timing header ----------------------------------------------------


def test_page_and_assets_come_from_the_app_itself(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="figure-attention-stepper"' in page.text
    for figure in ("attention-stepper", "sqrt-dk-histogram", "permutation-demo", "multi-head"):
        assert f'data-figure="{figure}"' in page.text
    assert client.get("/vendor/plotly.min.js").content.startswith(b"/**")
    external = re.compile(
        r"""(?:src|href)=["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import"""
    )
    for path in STATIC.rglob("*"):
        if path.suffix in (".html", ".css", ".js"):
            text = path.read_text()
            assert not external.search(text), f"{path} loads something from elsewhere"
            url = "/static/" + path.relative_to(STATIC).as_posix()
            assert client.get(url).status_code == 200, url
    assert Path(STATIC, "index.html").exists()


def test_docs_are_served_offline_and_list_every_route(client):
    docs = client.get("/docs")
    assert docs.status_code == 200
    assert "cdn" not in docs.text.lower() and "https://" not in docs.text
    for path in client.get("/openapi.json").json()["paths"]:
        assert path in docs.text, path


def test_every_answer_reports_its_server_time(client):
    timing = client.post("/api/trace").headers["server-timing"]
    assert re.fullmatch(r"app;dur=\d+\.\d\d", timing)


def test_timing_report_covers_every_interaction():
    from attnlab.web.timing import INTERACTIONS, measure

    rows = measure(repeats=1)
    assert [r[0] for r in rows] == [i[0] for i in INTERACTIONS]
    assert all(status == 200 and math.isfinite(first) for _, first, _, status in rows)


# -- attnlab serve -------------------------------------------------------------------------------


def test_serve_options_and_a_busy_port():
    from typer.testing import CliRunner

    from attnlab.cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["serve", "--help"])
    assert shown.exit_code == 0
    for option in ("--host", "--port", "--open", "127.0.0.1", "8000"):
        assert option in shown.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = runner.invoke(app, ["serve", "--port", str(busy.getsockname()[1])])
    assert result.exit_code == 2 and "in use" in result.output
    assert runner.invoke(app, ["serve", "--port", "0"]).exit_code == 2


def test_serve_answers_on_localhost():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", "from attnlab.cli import main; main()", "serve"]
    with subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as server:
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/equation") as r:
                        assert json.load(r)["figure"] == "equation"
                        break
                except OSError:
                    assert server.poll() is None, server.stdout.read().decode()
                    assert time.monotonic() < deadline, "attnlab serve did not answer"
                    time.sleep(0.2)
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:  # a server that ignores SIGTERM is killed
                server.kill()
                server.wait()


def test_own_words_get_deterministic_vectors(client):
    body = {"words": ["Cats", "chase", "the", "mice"], "order": [3, 1, 2, 0]}
    first = client.post("/api/permutation", json=body).json()
    again = client.post("/api/permutation", json=body).json()
    assert first == again
    assert [t["text"] for t in first["tokens"]] == ["mice", "chase", "the", "Cats"]
    assert max(t["max_change"] for t in first["tokens"]) < 1e-12  # order still invisible
    the = next(t for t in first["tokens"] if t["text"] == "the")
    assert the["vector"] == [1.0, 0.0, 0.5, 0.0]  # §6.5's hand-set word keeps its vector


def test_static_files_are_compressed_and_cached(client):
    answer = client.get("/vendor/plotly.min.js", headers={"accept-encoding": "gzip"})
    assert answer.headers["content-encoding"] == "gzip"
    assert "max-age" in answer.headers["cache-control"]
    for path in ("/static/explorer.css", "/static/js/stepper.js"):
        answer = client.get(path, headers={"accept-encoding": "gzip"})
        assert answer.headers["cache-control"], path
        assert answer.headers["content-encoding"] == "gzip", path


def test_stepper_writes_out_the_softmax_working(client):
    fig = client.post("/api/trace", json={}).json()
    row = fig["softmax"][1]  # the worked example's second row
    assert row["exps"] == pytest.approx([1, 4.1133], abs=1e-4)
    assert row["total"] == pytest.approx(5.1133, abs=1e-4)
    assert row["gap_ratio"] == pytest.approx(4.1133, abs=1e-4)
    open_ = client.post("/api/trace", json={"causal": False}).json()["softmax"][0]
    assert open_["gap"] == pytest.approx(12.728, abs=1e-3)
    assert open_["gap_ratio"] == pytest.approx(337_028, rel=1e-4)


def test_empty_row_blames_the_hand_blocked_cells(client):
    body = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1]], "v": [[1], [2]]}
    fig = client.post("/api/trace", json={**body, "blocked": [[1, 0], [1, 1]]}).json()
    assert "blocked by hand" in fig["row_errors"][1]
    assert "causal" not in fig["row_errors"][1]


def test_the_trace_request_is_build_stepper_by_name():
    # POST /api/trace passes its fields straight to build_stepper: the names must agree.
    import inspect

    from attnlab.figures import build_stepper
    from attnlab.web.models import TraceRequest

    assert set(TraceRequest.model_fields) == set(inspect.signature(build_stepper).parameters)
