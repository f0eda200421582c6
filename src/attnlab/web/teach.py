"""Routes for the chapter's reasoning: every equation explained, and predict-first prompts.

    GET /api/equations         {"equations": [explainer, ...]}: every equation of the chapter,
                               each {id, title, section, parts, symbols, words, notes, figure};
                               figure is the anchor it is shown beside; a symbol
                               is {id, text, shape, meaning, link: {href, label, step, lab}}
    GET /api/equations/{id}    one explainer; an unknown id is a 422 naming "id"
    GET /api/predict           {"prompts": [prompt, ...]}: per figure, a question, how to check a
                               guess (kind, choices, answer, tolerance), the answer in words and
                               the actions that set the figure up to show it

The data is built once: it depends on nothing a request sends (the prompts' numbers come from a
seeded lab run, so every build gives the same ones).
"""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter

from attnlab.figures.equation import build_equations
from attnlab.figures.predict import build_prompts
from attnlab.web.models import FieldError

router = APIRouter(prefix="/api", tags=["the why"])


@cache
def _equations() -> list[dict]:
    return [e.as_dict() for e in build_equations()]


@cache
def _prompts() -> list[dict]:
    return [p.as_dict() for p in build_prompts()]


@router.get("/equations", summary="Every equation of the chapter, symbol by symbol")
def equations() -> dict:
    return {"equations": _equations()}


@router.get("/equations/{id}", summary="One equation's explainer")
def equation(id: str) -> dict:
    found = {e["id"]: e for e in _equations()}
    if id not in found:
        known = ", ".join(found)
        raise FieldError("id", f"expected one of {known}, but got {id[:40]!r} instead")
    return found[id]


@router.get("/predict", summary="Predict-first prompts for each figure")
def predict() -> dict:
    return {"prompts": _prompts()}
