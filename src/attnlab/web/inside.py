"""The inside of a real model in the explorer: the logit lens, logit attribution, heads knocked
out and generation, for a model given to ``attnlab serve --model PATH`` (docs/inside.md).

    GET /api/models/lens         every layer's residual read as the last (``run.logit_lens``):
                                 at each (layer, position) the top token and its probability
    GET /api/models/attribution  one logit at one position split into what each head, the
                                 embeddings, each MLP and bias wrote (``run.logit_attribution``)
    GET /api/models/ablate       the next-token prediction at one position with some heads'
                                 outputs set to 0 (``attnlab.models.ablate``): the top tokens
                                 and their probabilities before and after
    GET /api/models/generate     greedy tokens after the text, as server-sent events: the prompt
                                 as text, then one event per token (``Model.stream``); at most
                                 MAX_NEW tokens, and the stream ends when the client goes away
                                 (the page's Stop)

Shape legend: L layers, h heads, N tokens, V vocabulary, K top tokens shown.

Each answer is computed on the model routes' worker thread, behind their bounded queue
(web/realmodels.py); a generated stream queues each token's step on its own, so a long stream
never holds the worker between tokens. The text or ids are checked as /api/models/run checks
them, and at most MAX_TOKENS (64) whatever that route allows.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import OrderedDict
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from attnlab.models import ablate as ablate_heads
from attnlab.web import realmodels as rm
from attnlab.web.models import FieldError

__all__ = [
    "MAX_ABLATED",
    "MAX_NEW",
    "MAX_TOKENS",
    "MAX_TOP",
    "NEW_DEFAULT",
    "STREAM_SECONDS",
    "router",
]

router = APIRouter(prefix="/api/models", tags=["real models"])

# Tokens the inside views take, whatever /api/models/run allows: GPT-2 small's lens at 64
# tokens is 12 unembeds of (64, 768) by (768, 50257), ~2 s on one thread, and its cache ~35 MB.
MAX_TOKENS = 64
MAX_NEW = 64  # tokens one Generate may ask for
NEW_DEFAULT = 16  # what the page's Generate asks for until the reader changes it
MAX_TOP = 10  # top tokens an ablation answer lists
MAX_ABLATED = 64  # heads knocked out at once (GPT-2 small has 144; the page toggles a few)
STREAM_SECONDS = 60.0  # a stream ends after this long even if tokens remain
KEPT = 2  # runs kept with their whole cache: GPT-2 small at 64 tokens holds ~35 MB of it
KEPT_LENSES = 16  # lens answers kept (~30 KB each for GPT-2 small at 64 tokens)


class _Kept:
    """The last ``size`` values computed for (a loaded model, token ids), newest last. Keyed by
    the model object, not its name: two apps (tests) may each have a model of the same name;
    the value holds the model, so its id is not reused while it is kept."""

    def __init__(self, size: int):
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, model, tokens):
        with self.lock:
            found = self.items.get((id(model), tokens))
            if found is None or found[0] is not model:
                return None
            self.items.move_to_end((id(model), tokens))
            return found[1]

    def put(self, model, tokens, value) -> None:
        with self.lock:
            self.items[(id(model), tokens)] = (model, value)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_RUNS = _Kept(KEPT)  # ModelRuns with their cache
_LENSES = _Kept(KEPT_LENSES)  # /lens answers
# "layer.head" pairs separated by commas: "1.0,0.3".
_HEADS = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:,[0-9]{1,4}\.[0-9]{1,4})*", re.ASCII)

Position = Annotated[int, Query(ge=0, description="A position, counted from 0.")]


def _cached_run(entry, tokens: tuple[int, ...]):
    """The model's run on ``tokens`` with its cache (what lens and attribution read)."""
    run = _RUNS.get(entry.model, tokens)
    if run is None:
        run = entry.model.run(np.array(tokens), cache=True, weights=False)
        _RUNS.put(entry.model, tokens, run)
    return run


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)  # (..., V)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _tokens(model, text, ids) -> tuple[int, ...]:
    """The request's token ids, checked as /api/models/run checks them, and at most MAX_TOKENS."""
    tokens = rm._ids(model, text, ids)
    if len(tokens) > MAX_TOKENS:
        raise FieldError("ids" if ids is not None else "text", f"expected at most {MAX_TOKENS} "
                         f"tokens for the inside views, but got {len(tokens)}")  # fmt: skip
    return tokens


def _check_position(position: int, n: int) -> int:
    if position >= n:
        raise FieldError("position", f"expected a position from 0 to {n - 1}, but got {position}")
    return position


def _top(model, p: np.ndarray, k: int) -> list[dict]:
    """The ``k`` likeliest tokens of one distribution p (V,), likeliest first."""
    order = np.argsort(-p, kind="stable")[:k]  # (K,)
    pieces = rm._pieces(model, order.tolist())
    return [
        {"id": int(i), "token": t, "p": float(p[i])} for i, t in zip(order, pieces, strict=True)
    ]


@router.get("/lens", summary="The logit lens: each layer's top token at each position",
            responses=rm.REFUSED)  # fmt: skip
async def lens(request: Request, model: rm.Name, text: rm.Text = None, ids: rm.Ids = None):
    return await rm._queued(request, model, lambda shelf, entry: _lens(entry, text, ids))


def _lens(entry, text, ids) -> dict:
    tokens = _tokens(entry.model, text, ids)
    kept = _LENSES.get(entry.model, tokens)
    if kept is not None:  # GPT-2 small: 12 unembeds of (64, 768) by (768, 50257), ~30 GFLOP
        return kept
    run = _cached_run(entry, tokens)
    top, prob = [], []
    for layer in range(entry.model.shape.layers):
        z = run.logit_lens(layer)[0]  # (N, V), one layer at a time to bound memory
        best = z.argmax(-1)  # (N,)
        # The top token's probability is 1 / sum(exp(z - z_top)): no softmax of all V needed.
        shifted = z - z[np.arange(len(tokens)), best][:, None]  # (N, V), <= 0
        top.append(best.tolist())
        prob.append((1.0 / np.exp(shifted).sum(-1, dtype=np.float64)).tolist())
    pieces = {i: rm._pieces(entry.model, [i])[0] for i in {i for row in top for i in row}}
    answer = {"model": entry.name, "ids": list(tokens), "tokens": rm._pieces(entry.model, tokens),
              "top": top, "top_tokens": [[pieces[i] for i in row] for row in top],
              "p": prob}  # fmt: skip
    _LENSES.put(entry.model, tokens, answer)
    return answer


@router.get("/attribution", summary="One logit split into each head's and part's share",
            responses=rm.REFUSED)  # fmt: skip
async def attribution(
    request: Request,
    model: rm.Name,
    position: Position,
    token: Annotated[
        int | None, Query(ge=0, description="A token id; the top one if absent.")
    ] = None,
    text: rm.Text = None,
    ids: rm.Ids = None,
):
    def answer(shelf, entry):
        return _attribution(entry, text, ids, position, token)

    return await rm._queued(request, model, answer)


def _attribution(entry, text, ids, position: int, token: int | None) -> dict:
    m = entry.model
    tokens = _tokens(m, text, ids)
    _check_position(position, len(tokens))
    if token is not None and token >= m.shape.vocab:
        raise FieldError(
            "token", f"expected a token id from 0 to {m.shape.vocab - 1}, but got {token}"
        )
    run = _cached_run(entry, tokens)
    logits = run.logits[0, position]  # (V,)
    if token is None:
        token = int(logits.argmax())
    parts = run.logit_attribution(position, token)
    layers, h = m.shape.layers, m.shape.heads
    heads = [[parts.pop(f"L{l}H{i}") for i in range(h)] for l in range(layers)]  # (L, h)
    return {"model": entry.name, "ids": list(tokens), "position": position, "token": token,
            "token_text": rm._pieces(m, [token])[0], "logit": float(logits[token]),
            "p": float(_softmax(logits)[token]), "heads": heads, "parts": parts}  # fmt: skip


def _heads(text: str, layers: int, per_layer: int) -> list[tuple[int, int]]:
    if not _HEADS.fullmatch(text):
        raise FieldError("heads", "expected heads as layer.head pairs separated by commas "
                         f"(e.g. 1.0,0.3), but got {text[:40]!r}")  # fmt: skip
    pairs = sorted({tuple(int(x) for x in pair.split(".")) for pair in text.split(",")})
    if len(pairs) > MAX_ABLATED:
        raise FieldError("heads", f"expected at most {MAX_ABLATED} heads, but got {len(pairs)}")
    for layer, head in pairs:
        if layer >= layers or head >= per_layer:
            raise FieldError("heads", f"expected layers 0 to {layers - 1} and heads 0 to "
                             f"{per_layer - 1}, but got {layer}.{head}")  # fmt: skip
    return pairs


@router.get("/ablate", summary="The prediction at one position with heads knocked out",
            responses=rm.REFUSED)  # fmt: skip
async def ablate(
    request: Request,
    model: rm.Name,
    position: Position,
    heads: Annotated[str, Query(max_length=10 * MAX_ABLATED, description="e.g. 1.0,0.3")],
    top: Annotated[int, Query(ge=1, le=MAX_TOP, description="Top tokens listed.")] = 5,
    text: rm.Text = None,
    ids: rm.Ids = None,
):
    def answer(shelf, entry):
        return _ablate(shelf, entry, text, ids, position, heads, top)

    return await rm._queued(request, model, answer)


def _ablate(shelf, entry, text, ids, position: int, heads: str, top: int) -> dict:
    m = entry.model
    tokens = _tokens(m, text, ids)
    _check_position(position, len(tokens))
    pairs = _heads(heads, m.shape.layers, m.shape.heads)
    before = _softmax(shelf.run(entry.name, tokens).logits[0, position])  # (V,)
    after = _softmax(ablate_heads(m, np.array(tokens), heads=pairs).logits[0, position])
    return {"model": entry.name, "ids": list(tokens), "position": position,
            "heads": [list(p) for p in pairs], "before": _top(m, before, top),
            "after": _top(m, after, top),
            "after_of_before": [float(after[t["id"]]) for t in _top(m, before, top)]}  # fmt: skip


@router.get("/generate", summary="Greedy tokens after a text, streamed as server-sent events",
            responses=rm.REFUSED)  # fmt: skip
async def generate(
    request: Request,
    model: rm.Name,
    new: Annotated[int, Query(ge=1, le=MAX_NEW, description="Tokens to generate.")] = NEW_DEFAULT,
    text: rm.Text = None,
    ids: rm.Ids = None,
):
    shelf = request.app.state.models
    entry = shelf.ready(model)
    refused = rm._unavailable(entry)
    if refused is not None:
        return refused
    tokens = _tokens(entry.model, text, ids)
    limit = entry.model.shape.max_positions
    if limit is not None and len(tokens) + new > limit:
        raise FieldError("new", f"expected at most {limit - len(tokens)} new tokens (the model's "
                         f"{limit} positions less the {len(tokens)} given), but got {new}")  # fmt: skip
    steps = entry.model.stream(np.array(tokens), new)
    return StreamingResponse(_events(request, entry.model, list(tokens), steps),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})  # fmt: skip


def _text(model, ids: list[int]) -> str:
    """``ids`` as text: the tokenizer's decoding, or the ids written out without one."""
    return model.detokenize(ids) if model.tokenizer_path is not None else " ".join(map(str, ids))


async def _events(request: Request, model, prompt: list[int], steps):
    """``event: prompt`` ({"text"}), one ``data:`` event per token ({"id", "token", "text"}:
    the token alone, and the text it adds, which is where a word-level tokenizer puts its
    spaces), then ``event: done`` with why it ended."""
    deadline = time.monotonic() + STREAM_SECONDS
    why, ids = "done", list(prompt)
    shown = _text(model, ids)
    yield f"event: prompt\ndata: {json.dumps({'text': shown})}\n\n"
    while True:
        if await request.is_disconnected():
            return  # the page's Stop closed the stream
        if time.monotonic() > deadline:
            why = "time"
            break
        future = rm.QUEUE.submit(lambda: next(steps, None), rm.ANSWER_S)
        if future is None:
            why = "busy"
            break
        token = await asyncio.wrap_future(future)  # (1,) ids, or None when the stream ended
        if token is None:
            break
        ids.append(int(token[0]))
        text = _text(model, ids)
        added = text[len(shown) :] if text.startswith(shown) else rm._pieces(model, ids[-1:])[0]
        shown = text
        event = {"id": ids[-1], "token": rm._pieces(model, ids[-1:])[0], "text": added}
        yield f"data: {json.dumps(event)}\n\n"
    yield f"event: done\ndata: {json.dumps({'why': why})}\n\n"
