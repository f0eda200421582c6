"""Data for the explorer's figures: plain dataclasses that serialise to JSON.

Each builder calls attnlab's core (or its labs) and returns what a figure shows; nothing here
draws, imports plotly, or knows about HTTP. ``attnlab.web`` turns the data into the page.

    build_equation()      the symbols of Attention(Q, K, V) = softmax(QKᵀ/√d_k + M) V
    build_stepper()       figure attention-stepper: every table of one attention call
    build_histogram()     figure sqrt-dk-histogram: score spread and softmax saturation
    build_permutation()   figure permutation-demo: outputs follow their tokens when shuffled
    build_multihead()     figure multi-head: four hand-set heads on one sentence
"""

from __future__ import annotations

from attnlab.figures.equation import build_equation
from attnlab.figures.histogram import build_histogram
from attnlab.figures.multihead import build_multihead
from attnlab.figures.permutation import build_permutation
from attnlab.figures.stepper import build_stepper

__all__ = [
    "build_equation",
    "build_histogram",
    "build_multihead",
    "build_permutation",
    "build_stepper",
]
