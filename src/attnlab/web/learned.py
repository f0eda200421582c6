"""The learned heads: the shipped induction model's attention on a sequence, head by head.

    GET /learned               the page (static/learned.html): type or generate a sequence
    GET /api/learned           {"config", "tokens", "repeat", "predictions", "heads", "weights"}
        tokens   optional, token ids separated by spaces or commas (at most the model's
                 context, each below its vocabulary); without it, one induction sequence is
                 generated from ``seed`` (a random prefix, T tokens, the same T tokens)
        heads    per head its layer, index, pattern and the scores that name it, measured once
                 on fresh sequences by the induction lab's own ``measure``
        weights  (layers, heads, N, N) of this sequence, rounded to 4 decimals
        checkpoint   optional index into ``checkpoints`` (the training steps of the snapshots
                 kept while the model trained, the trained model last): the weights then

Everything comes from ``attnlab.transformer.pretrained("induction")`` and the lab module; the
model is loaded once and only read.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from attnlab.labs._common import rng_for
from attnlab.labs.induction import induction_sequences, measure
from attnlab.transformer import checkpoints
from attnlab.web.models import SEED_MAX, FieldError

router = APIRouter(tags=["learned heads"])

FRESH = 300  # sequences the head labels are measured on
_TAG = 201  # the page's own random stream, apart from every lab's


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


def _parse(text: str, context: int, vocab: int) -> list[int]:
    parts = text.replace(",", " ").split()
    if not parts:
        raise FieldError("tokens", "expected token ids separated by spaces, but got nothing")
    if len(parts) > context:
        raise FieldError("tokens", f"expected at most {context} tokens, but got {len(parts)}")
    ids = []
    for i, part in enumerate(parts):
        if not part.isdigit() or int(part) >= vocab:
            raise FieldError("tokens", f"expected token ids from 0 to {vocab - 1}, but got "
                             f"{part[:12]!r} at position {i}")  # fmt: skip
        ids.append(int(part))
    return ids


@router.get("/api/learned", summary="The shipped induction model's heads on one sequence")
def learned(
    tokens: Annotated[str | None, Query(max_length=400)] = None,
    seed: Annotated[int, Query(ge=0, le=SEED_MAX)] = 0,
    checkpoint: Annotated[int | None, Query(ge=0)] = None,
) -> dict:
    count = len(_models())
    if checkpoint is not None and checkpoint >= count:
        raise FieldError("checkpoint", f"expected a checkpoint from 0 to {count - 1}, but got "
                         f"{checkpoint} instead")  # fmt: skip
    index = count - 1 if checkpoint is None else checkpoint
    model = _model(index)
    cfg = model.config
    repeat = None
    if tokens is None:
        seq, lengths = induction_sequences(rng_for(seed, _TAG, 1), 1, cfg["context"],
                                           cfg["vocab_size"])  # fmt: skip
        ids, repeat = seq[0].tolist(), int(lengths[0])
    else:
        ids = _parse(tokens, cfg["context"], cfg["vocab_size"])
    batch = np.array([ids])
    weights = model.attention_weights(batch)[0]  # (layers, heads, N, N)
    return {
        "config": cfg,
        "tokens": ids,
        "repeat": repeat,
        "predictions": model.predict(batch)[0].tolist(),
        "heads": _heads(index),
        "checkpoints": [step for step, _ in _models()],
        "checkpoint": index,
        "weights": np.round(weights.astype(float), 4).tolist(),
    }


@router.get("/learned", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(Path(__file__).parent / "static" / "learned.html", media_type="text/html")
