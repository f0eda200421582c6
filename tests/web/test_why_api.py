"""The why's routes: every equation of the chapter explained, and the predict-first prompts.

Each number a prompt's answer or a symbol's meaning quotes is checked against attnlab itself.
"""

from __future__ import annotations

import math
import warnings

import pytest

import attnlab
from attnlab.figures.equation import build_equation
from attnlab.web import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

# The chapter's equations, by the explainer that covers each (§6.2 to §6.6).
CHAPTER = {
    "attention", "projections", "copy", "score", "mean", "product", "score-variance", "sigma",
    "scaled", "gap-ratio",
    "saturation-gradient", "causal", "permutation", "head", "multihead", "cost", "crossover",
}  # fmt: skip
ANCHORS = {
    "#figure-attention-stepper",
    "#figure-sqrt-dk-histogram",
    "#figure-permutation-demo",
    "#figure-multi-head",
    "#labs",
    "#why-proof",
}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), raise_server_exceptions=False, base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="module")
def equations(client):
    response = client.get("/api/equations")
    assert response.status_code == 200
    return {e["id"]: e for e in response.json()["equations"]}


def test_every_equation_of_the_chapter_has_an_explainer(equations):
    assert set(equations) == CHAPTER


def test_every_symbol_has_shape_meaning_and_a_live_link(client, equations):
    labs = {lab["name"] for lab in client.get("/api/labs").json()}
    for eq in equations.values():
        ids = [s["id"] for s in eq["symbols"]]
        assert len(ids) == len(set(ids)), eq["id"]
        assert {p["sym"] for p in eq["parts"] if "sym" in p} <= set(ids), eq["id"]
        for s in eq["symbols"]:
            assert s["text"] and s["shape"] and len(s["meaning"]) > 10, (eq["id"], s)
            assert s["link"]["href"] in ANCHORS, s
            if s["link"]["href"] == "#labs":
                assert s["link"]["lab"] in labs, s


def test_the_notes_on_m_and_d_k(equations):
    notes = " ".join(equations["attention"]["notes"])
    assert "two things" in notes and "mask" in notes and "64 or 128" in notes


def test_numbers_in_the_meanings_come_from_the_library(equations):
    trace = attnlab.trace_attention([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]])
    gap = float(trace.scaled[0, 1] - trace.scaled[0, 0])
    eg = next(s for s in equations["gap-ratio"]["symbols"] if s["id"] == "eg")
    assert f"{gap:.3f}" in eg["meaning"] and f"{math.exp(gap):,.0f}" in eg["meaning"]
    twice = next(s for s in equations["crossover"]["symbols"] if s["id"] == "twice")
    assert f"{attnlab.cost.crossover_length(4096):,}" in twice["meaning"]


def test_one_explainer_and_an_unknown_one(client, equations):
    assert client.get("/api/equations/cost").json() == equations["cost"]
    response = client.get("/api/equations/nope")
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "id"
    assert "expected one of" in response.json()["message"]


def test_the_old_equation_route_keeps_its_shape(client):
    data = client.get("/api/equation").json()
    assert [s["id"] for s in data["symbols"]] == [s.id for s in build_equation().symbols]


def test_predict_answers_come_from_the_library(client):
    prompts = {p["id"]: p for p in client.get("/api/predict").json()["prompts"]}
    figures = {p["figure"] for p in prompts.values()}
    assert figures == {a[1:] for a in ANCHORS} - {"labs", "why-proof"}
    ratio = prompts["stepper-ratio"]
    assert ratio["answer"] == pytest.approx(math.exp(18 / math.sqrt(2)))
    assert 336_000 < ratio["answer"] < 338_000
    share = prompts["histogram-share"]
    lab = attnlab.labs.saturation(d_k=128)
    assert share["answer"] == pytest.approx(100 * lab.unscaled_share)
    grad = prompts["stepper-gradient"]  # the backward steps: one allowed key, no gradient
    trace = attnlab.trace_attention(
        [[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], attnlab.masks.Causal(),
        grad_output=[[1, 1], [1, 1]],
    )  # fmt: skip
    assert trace.grad_scores[0].tolist() == [0.0, 0.0]
    assert grad["choices"][int(grad["answer"])].startswith("Zero")
    assert f"[{trace.grad_scores[1, 0]:.3f}, {trace.grad_scores[1, 1]:.3f}]" in grad["answer_text"]
    assert grad["step"] == "grad_scores"
    it = prompts["multihead-it"]
    assert "pronoun" in it["choices"][int(it["answer"])]
    for p in prompts.values():
        assert p["kind"] in ("number", "choice")
        if p["kind"] == "choice":
            assert 0 <= p["answer"] < len(p["choices"])
        else:
            assert p["tolerance"] > 0
