"""Routes of the four figures and the equation explainer: parse, call ``attnlab.figures``, return.

The figure builders validate what the models cannot (shapes that fit together, an order that is a
permutation); their AttnlabError becomes HTTP 422 in ``app.py``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from attnlab.figures import (
    build_equation,
    build_histogram,
    build_multihead,
    build_permutation,
    build_stepper,
)
from attnlab.figures.equation import EquationFigure
from attnlab.figures.histogram import HistogramFigure
from attnlab.figures.multihead import MultiHeadFigure
from attnlab.figures.permutation import PermutationFigure
from attnlab.figures.stepper import StepperFigure
from attnlab.web.models import HistogramQuery, MultiHeadQuery, PermutationRequest, TraceRequest

router = APIRouter(prefix="/api", tags=["figures"])


@router.get("/equation", response_model=EquationFigure)
def equation() -> EquationFigure:
    """Each symbol of Attention(Q, K, V) = softmax(QKᵀ/√d_k + M) V: what it is and its shape."""
    return build_equation()


@router.post("/trace", response_model=StepperFigure)
def trace(request: TraceRequest | None = None) -> StepperFigure:
    """Figure attention-stepper: every table of attention on up to 8 tokens.

    A blocked pair is written "-inf" and an entry with no value null."""
    request = request or TraceRequest()
    # The request's fields are build_stepper's parameters, by name (a test pins them).
    return build_stepper(**dict(request))


@router.get("/histogram", response_model=HistogramFigure)
def histogram(query: Annotated[HistogramQuery, Query()]) -> HistogramFigure:
    """Figure sqrt-dk-histogram: random scores at width d_k, and softmax saturation over 64 keys."""
    return build_histogram(query.d_k, scaled=query.scaled, seed=query.seed)


@router.post("/permutation", response_model=PermutationFigure)
def permutation(request: PermutationRequest | None = None) -> PermutationFigure:
    """Figure permutation-demo: self-attention outputs of a sentence with its tokens reordered."""
    request = request or PermutationRequest()
    return build_permutation(request.order, positions=request.positions, words=request.words)


@router.get("/multihead", response_model=MultiHeadFigure)
def multihead(query: Annotated[MultiHeadQuery, Query()]) -> MultiHeadFigure:
    """Figure multi-head: four hand-set heads, their (4, N, N) weights, and one word's mixing."""
    return build_multihead(query.query)
