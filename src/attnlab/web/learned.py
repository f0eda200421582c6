"""The learned heads: the shipped induction model's attention on a sequence, head by head.

    GET /learned               opens the explorer's multi-head view in its learned mode
    GET /api/learned           {"config", "tokens", "repeat", "predictions", "heads", "weights"}
        tokens   optional, token ids separated by spaces or commas (at most the model's
                 context, each below its vocabulary); without it, one induction sequence is
                 generated from ``seed`` (a random prefix, T tokens, the same T tokens)
        heads    per head its layer, index, pattern and the scores that name it, measured once
                 on fresh sequences by the induction lab's own ``measure``
        weights  (layers, heads, N, N) of this sequence, rounded to 4 decimals
        checkpoint   optional index into ``checkpoints`` (the training steps of the snapshots
                 kept while the model trained, the trained model last): the weights then
        predictions  each position's most likely next token by that checkpoint's own weights;
                 null (with ``predictions_note``) for a snapshot that kept no output layer of
                 its own, rather than a mix of its attention and the trained model's output
    GET /api/learned/head      one head's attention for one query, as the stepper takes it:
        the same sequence and checkpoint arguments, and ``layer``, ``head``, ``query`` (a
        position of the sequence); answers q (1, d_k), k and v (query + 1, d_k) (the keys the
        causal mask allows), the scale and the model's own weights for that query

Everything comes from ``attnlab.transformer.pretrained("induction")`` and the lab module; the
model is loaded once and only read.
"""

from __future__ import annotations

import asyncio
import re
from functools import cache, lru_cache
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, RedirectResponse

from attnlab.labs._common import rng_for
from attnlab.labs.induction import induction_sequences, measure
from attnlab.transformer import checkpoints
from attnlab.web.labs import LabQueue
from attnlab.web.models import SEED_MAX, FieldError

router = APIRouter(tags=["learned heads"])

FRESH = 300  # sequences the head labels are measured on
_TAG = 201  # the page's own random stream, apart from every lab's
# Where /learned sends a reader: the explorer's multi-head view, in its learned mode.
EXPLORER_LEARNED = "/?mh.mode=learned#figure-multi-head"

Tokens = Annotated[str | None, Query(max_length=400)]
Seed = Annotated[int, Query(ge=0, le=SEED_MAX)]
Checkpoint = Annotated[int | None, Query(ge=0)]

# Admission, as the labs': the answers are computed on one thread of their own, at most
# MAX_WAITING wait, and the next request gets 429 with Retry-After at once, so a burst of them
# never holds the pool that serves the page and every other route. An answer is computed once
# per (sequence, checkpoint): a class asking for the same sequence is served from the cache.
MAX_WAITING = 16
ANSWER_S = 0.1  # an answer's seconds, for Retry-After (tens of ms measured; the first loads)
QUEUE = LabQueue(waiting=MAX_WAITING)
BUSY = {429: {"description": "The learned routes' queue is full; see Retry-After."}}


def _busy() -> JSONResponse:
    wait = QUEUE.retry_after()
    return JSONResponse(
        {"message": f"expected at most {MAX_WAITING} learned-head requests waiting, but the "
                    f"queue is full; try again in {wait} s"},
        status_code=429,
        headers={"Retry-After": str(wait)},
    )  # fmt: skip


async def _queued(fn):
    future = QUEUE.submit(fn, ANSWER_S)
    if future is None:
        return _busy()
    return await asyncio.wrap_future(future)


@cache
def _models() -> list:
    """(step, model) per training snapshot, the trained model last."""
    return checkpoints("induction")


def _model(index: int = -1):
    return _models()[index][1]


@cache
def _heads(index: int = -1) -> list[dict]:
    model = _model(index)
    cfg = model.config
    tokens, lengths = induction_sequences(rng_for(0, _TAG), FRESH, cfg["context"],
                                          cfg["vocab_size"])  # fmt: skip
    _, rows = measure(model, tokens, lengths)
    return [r.__dict__ | {"previous_token": round(r.previous_token, 3),
                          "induction_score": round(r.induction_score, 3)} for r in rows]  # fmt: skip


@cache
def _own_output(index: int) -> bool:
    """Whether checkpoint ``index`` has an output layer of its own. A snapshot that kept only
    the attention weights borrows the trained model's unembedding, bit for bit; its predictions
    would mix two steps of training, so the page is not given any."""
    if index == len(_models()) - 1:
        return True
    return not np.array_equal(_model(index).params["unembed"], _model(-1).params["unembed"])


# Ids in ASCII digits only (``str.isdigit`` passes "²" and "①", which ``int`` refuses, and
# ``int`` reads full-width and Arabic-Indic digits), one comma or a run of spaces between two.
_TOKENS = re.compile(r"\s*[0-9]+(?:(?:\s*,\s*|\s+)[0-9]+)*\s*", re.ASCII)


def _parse(text: str, context: int, vocab: int) -> list[int]:
    if not text.strip():
        raise FieldError("tokens", "expected token ids separated by spaces, but got nothing")
    if not _TOKENS.fullmatch(text):
        raise FieldError("tokens", "expected token ids written in the digits 0-9, separated by "
                         f"spaces or one comma, but got {text[:40]!r}")  # fmt: skip
    parts = re.split(r"[\s,]+", text.strip())
    if len(parts) > context:
        raise FieldError("tokens", f"expected at most {context} tokens, but got {len(parts)}")
    ids = [int(part) for part in parts]
    for i, value in enumerate(ids):
        if value >= vocab:
            raise FieldError("tokens", f"expected token ids from 0 to {vocab - 1}, but got "
                             f"{parts[i][:12]!r} at position {i}")  # fmt: skip
    return ids


def _sequence(tokens: str | None, seed: int, checkpoint: int | None):
    """(checkpoint index, its model, token ids, repeat length or None) of one request."""
    count = len(_models())
    if checkpoint is not None and checkpoint >= count:
        raise FieldError("checkpoint", f"expected a checkpoint from 0 to {count - 1}, but got "
                         f"{checkpoint} instead")  # fmt: skip
    index = count - 1 if checkpoint is None else checkpoint
    model = _model(index)
    cfg = model.config
    if tokens is not None:
        return index, model, _parse(tokens, cfg["context"], cfg["vocab_size"]), None
    seq, lengths = induction_sequences(rng_for(seed, _TAG, 1), 1, cfg["context"],
                                       cfg["vocab_size"])  # fmt: skip
    return index, model, seq[0].tolist(), int(lengths[0])


@router.get("/api/learned", summary="The shipped induction model's heads on one sequence",
            responses=BUSY)  # fmt: skip
async def learned(tokens: Tokens = None, seed: Seed = 0, checkpoint: Checkpoint = None) -> dict:
    return await _queued(lambda: _learned(tokens, seed, checkpoint))


def _learned(tokens: str | None, seed: int, checkpoint: int | None) -> dict:
    index, _, ids, repeat = _sequence(tokens, seed, checkpoint)
    return {**_answer(tuple(ids), index), "repeat": repeat}


@lru_cache(maxsize=256)
def _answer(ids: tuple[int, ...], index: int) -> dict:
    """The model's part of an answer, once per (sequence, checkpoint); callers copy the dict
    before adding to it (its lists are only read)."""
    model = _model(index)
    batch = np.array([ids])
    weights = model.attention_weights(batch)[0]  # (layers, heads, N, N)
    return {
        "config": model.config,
        "tokens": list(ids),
        "predictions": model.predict(batch)[0].tolist() if _own_output(index) else None,
        "predictions_note": None
        if _own_output(index)
        else (
            "this snapshot kept only the attention weights, not an output layer of its own, "
            "so it makes no predictions here"
        ),
        "heads": _heads(index),
        "checkpoints": [step for step, _ in _models()],
        "checkpoint": index,
        "weights": np.round(weights.astype(float), 4).tolist(),
    }


def _exact(a: np.ndarray) -> list:
    return a.astype(float).tolist()  # float32 to float64 loses nothing: the model's own numbers


def _below(name: str, value: int, limit: int, what: str) -> None:
    if value >= limit:
        raise FieldError(name, f"expected {name} from 0 to {limit - 1} ({what}), but got "
                         f"{value} instead")  # fmt: skip


@router.get("/api/learned/head", summary="One learned head's q, k and v for one query",
            responses=BUSY)  # fmt: skip
async def learned_head(
    layer: Annotated[int, Query(ge=0)],
    head: Annotated[int, Query(ge=0)],
    query: Annotated[int, Query(ge=0)],
    tokens: Tokens = None,
    seed: Seed = 0,
    checkpoint: Checkpoint = None,
) -> dict:
    return await _queued(lambda: _learned_head(layer, head, query, tokens, seed, checkpoint))


def _learned_head(layer, head, query, tokens, seed, checkpoint) -> dict:
    index, model, ids, _ = _sequence(tokens, seed, checkpoint)
    return {**head_row(model, ids, layer, head, query), "checkpoint": index,
            "step": _models()[index][0]}  # fmt: skip


def head_row(model, ids: list[int], layer: int, head: int, query: int) -> dict:
    """One head's q, k and v for one query of ``ids``, checked against ``model`` (a FieldError
    naming ``layer``, ``head`` or ``query``): what the stepper takes, for any trained model."""
    cfg = model.config
    _below("layer", layer, cfg["layers"], "the model's layers")
    _below("head", head, cfg["heads"], "the heads of a layer")
    _below("query", query, len(ids), "a position of the sequence")
    batch = np.array([ids])  # (1, N)
    # The targets only steer the gradients, which this route does not read: q, k and v are the
    # forward pass's, exactly what the layer gave attnlab.attention.
    _, _, calls = model.attention_calls(batch, np.zeros_like(batch))
    call = calls[layer]
    q = call.q[0, head, query : query + 1]  # (1, d_k): the one query row
    k = call.k[0, head, : query + 1]  # (query + 1, d_k): the keys the causal mask allows
    v = call.v[0, head, : query + 1]  # (query + 1, d_k)
    weights = model.attention_weights(batch)[0, layer, head, query, : query + 1]  # (query + 1,)
    return {
        "layer": layer,
        "head": head,
        "query": query,
        "tokens": ids,
        "scaled": call.scale is None,  # None: attnlab's 1/√d_k, as the stepper's "scaled"
        "scale": float(1 / np.sqrt(q.shape[-1])) if call.scale is None else call.scale,
        "q": _exact(q),
        "k": _exact(k),
        "v": _exact(v),
        "weights": _exact(weights),
        # The stepper's row names: each 0-based position with its token (an id: the trained
        # models' vocabularies have no text), as the learned view counts them.
        "query_labels": [f"{query} #{ids[query]}"],
        "key_labels": [f"{p} #{ids[p]}" for p in range(query + 1)],
    }


@router.get("/learned", include_in_schema=False)
def page() -> RedirectResponse:
    return RedirectResponse(EXPLORER_LEARNED)
