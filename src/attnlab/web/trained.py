"""A trained model's heads, and heads knocked out: the learned view's two newer questions.

    GET /api/runs/{id}/learned     the heads of the model a finished train-induction run
        (web/runs.py) trained, on one sequence, in the shape of ``/api/learned`` (web/learned.py):
        config, tokens, repeat, predictions, heads (labelled on fresh sequences), checkpoints
        (one: the trained model) and weights
    GET /api/runs/{id}/learned/head   one of that model's heads for one query, in the shape of
        ``/api/learned/head``: q (1, d_k), k and v (query + 1, d_k) from the trained weights, and
        the model's own weights for that row; what the stepper opens (``stepper.run``)
    GET /api/learned/ablation      what knocking heads out costs a model:
        ablate     the heads, "layer.head" pairs separated by commas or spaces ("0.2,1.0");
                   empty: none (the intact model)
        ablation   "zero" (output rows zeroed) or "mean" (replaced by their mean output)
        run        optional: a finished train-induction run's model instead of the shipped one
        tokens, seed   the sequence shown, as /api/learned takes them
      answers, for the intact and the ablated model, the accuracy and the loss per offset of
      the repeat on ``FRESH`` fresh induction sequences (the ablate-heads lab's measures), and
      both models' predictions on the sequence shown

Bad input is 422 naming the field (``ablate`` names the pair that is out of the model; ``run``
names a run that is unknown, unfinished, not train-induction, or whose model was let go). Both
routes compute on the learned routes' own queue (web/learned.py), 429 with Retry-After when it
is full.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request

from attnlab.errors import AttnlabError
from attnlab.labs._common import rng_for
from attnlab.labs._repeats import position_losses
from attnlab.labs.induction import induction_sequences, measure, second_copy
from attnlab.web import learned
from attnlab.web.models import FieldError
from attnlab.web.runs import MAX_MODELS, RunId, runs_of

__all__ = ["FRESH", "router"]

router = APIRouter(prefix="/api", tags=["learned heads"])

FRESH = 150  # fresh sequences an ablation is measured on (about 0.3 s a model on one core)
_TAG = 202  # this module's random stream, apart from the labs' and learned.py's
_intact: dict[int, tuple[object, dict]] = {}  # id(model) -> (model, its intact measures)


def _run(request: Request, run_id: str):
    """The finished train-induction run ``run_id`` whose model the server still keeps, or a
    FieldError naming ``run`` and saying why not."""
    found = runs_of(request).get(run_id)
    if found is None:
        raise FieldError("run", f"expected a finished train-induction run this server keeps, "
                         f"but run {run_id!r} is unknown here (never made, or forgotten)")  # fmt: skip
    run = found[0]
    if run.lab != "train-induction":
        raise FieldError("run", f"expected a finished train-induction run, but run {run_id!r} "
                         f"is {run.state} ({run.lab})")  # fmt: skip
    if run.state != "done":
        raise FieldError("run", f"expected a finished train-induction run, but run {run_id!r} "
                         f"is {run.state}")  # fmt: skip
    if run.model is None:
        raise FieldError("run", f"expected a run whose trained model this server keeps, but run "
                         f"{run_id!r}'s model was let go (only the last {MAX_MODELS} trained "
                         f"models are kept)")  # fmt: skip
    return run


def _sequence(model, tokens: str | None, seed: int) -> tuple[list[int], int | None]:
    cfg = model.config
    if tokens is not None:
        return learned._parse(tokens, cfg["context"], cfg["vocab_size"]), None
    seq, lengths = induction_sequences(rng_for(seed, learned._TAG, 1), 1, cfg["context"],
                                       cfg["vocab_size"])  # fmt: skip
    return seq[0].tolist(), int(lengths[0])


@router.get("/runs/{run_id}/learned", summary="A trained run's heads on one sequence",
            responses=learned.BUSY)  # fmt: skip
async def run_learned(run_id: RunId, request: Request, tokens: learned.Tokens = None,
                      seed: learned.Seed = 0):  # fmt: skip
    # On the learned routes' queue (web/learned.py): one answer computed at a time.
    return await learned._queued(lambda: _run_learned(request, run_id, tokens, seed))


def _run_learned(request: Request, run_id: str, tokens: str | None, seed: int) -> dict:
    trained = _run(request, run_id)
    model = trained.model
    ids, repeat = _sequence(model, tokens, seed)
    cfg = model.config
    fresh, lengths = induction_sequences(rng_for(0, learned._TAG), learned.FRESH,
                                         cfg["context"], cfg["vocab_size"])  # fmt: skip
    _, rows = measure(model, fresh, lengths)
    batch = np.array([ids])
    weights = model.attention_weights(batch)[0]  # (layers, heads, N, N)
    heads = [r.__dict__ | {"previous_token": round(r.previous_token, 3),
                           "induction_score": round(r.induction_score, 3)} for r in rows]  # fmt: skip
    return {"config": model.config, "tokens": ids, "repeat": repeat, "run": run_id,
            "predictions": model.predict(batch)[0].tolist(), "predictions_note": None,
            "heads": heads,
            "checkpoints": [trained.step],
            "checkpoint": 0, "weights": np.round(weights.astype(float), 4).tolist()}  # fmt: skip


@router.get("/runs/{run_id}/learned/head", summary="One trained head's q, k and v for one query",
            responses=learned.BUSY)  # fmt: skip
async def run_learned_head(
    run_id: RunId,
    request: Request,
    layer: Annotated[int, Query(ge=0)],
    head: Annotated[int, Query(ge=0)],
    query: Annotated[int, Query(ge=0)],
    tokens: learned.Tokens = None,
    seed: learned.Seed = 0,
):
    # On the learned routes' queue (web/learned.py): one answer computed at a time.
    return await learned._queued(
        lambda: _run_learned_head(request, run_id, layer, head, query, tokens, seed)
    )


def _run_learned_head(request, run_id, layer, head, query, tokens, seed) -> dict:
    trained = _run(request, run_id)
    ids, _ = _sequence(trained.model, tokens, seed)
    row = learned.head_row(trained.model, ids, layer, head, query)
    return {**row, "run": run_id, "checkpoint": 0, "step": trained.step}


def _pairs(text: str, model) -> list[tuple[int, int]]:
    """ "0.2, 1.0" -> [(0, 2), (1, 0)], checked against the model."""
    cfg = model.config
    pairs = []
    for i, part in enumerate(text.replace(",", " ").split()):
        layer, dot, head = part.partition(".")
        if not (dot and part.isascii() and layer.isdigit() and head.isdigit()) or len(part) > 9:
            raise FieldError("ablate", f"expected heads as layer.head (0.2), but got "
                             f"{part[:12]!r} at entry {i}")  # fmt: skip
        pairs.append((int(layer), int(head)))
    if len(pairs) > cfg["layers"] * cfg["heads"]:
        raise FieldError("ablate", f"expected at most {cfg['layers'] * cfg['heads']} heads, "
                         f"but got {len(pairs)}")  # fmt: skip
    try:
        model.predict(np.zeros((1, 1), int), ablate=pairs)  # checks every pair, cheaply
    except AttnlabError as exc:
        raise FieldError("ablate", str(exc)) from None
    return pairs


def _measured(model, pairs, ablation: str, tokens, lengths) -> dict:
    counted = second_copy(lengths, tokens.shape[1])[:, :-1]  # (B, N - 1)
    predicted = model.predict(tokens, ablate=pairs, ablation=ablation)  # (B, N)
    accuracy = float((predicted[:, :-1] == tokens[:, 1:])[counted].mean())
    losses = position_losses(model, tokens, lengths, ablate=pairs, ablation=ablation)
    return {"accuracy": round(accuracy, 4), **losses}


@router.get("/learned/ablation", summary="What knocking heads out costs the model",
            responses=learned.BUSY)  # fmt: skip
async def ablation_route(
    request: Request,
    ablate: Annotated[str, Query(max_length=200)] = "",
    ablation: Annotated[str, Query(pattern="^(zero|mean)$")] = "zero",
    run: Annotated[str | None, Query(min_length=1, max_length=32, pattern="^[0-9a-f]+$")] = None,
    tokens: learned.Tokens = None,
    seed: learned.Seed = 0,
):
    # On the learned routes' queue (web/learned.py): one answer computed at a time.
    return await learned._queued(lambda: _ablation(request, ablate, ablation, run, tokens, seed))


def _ablation(request: Request, ablate: str, ablation: str, run: str | None,
              tokens: str | None, seed: int) -> dict:  # fmt: skip
    model = learned._model() if run is None else _run(request, run).model
    pairs = _pairs(ablate, model)
    ids, repeat = _sequence(model, tokens, seed)
    cfg = model.config
    fresh, lengths = induction_sequences(rng_for(0, _TAG), FRESH, cfg["context"],
                                         cfg["vocab_size"])  # fmt: skip
    kept = _intact.get(id(model))
    if kept is None or kept[0] is not model:
        if len(_intact) > 32:
            _intact.clear()
        kept = _intact[id(model)] = (model, _measured(model, [], "zero", fresh, lengths))
    batch = np.array([ids])  # (1, N)
    return {"ablate": [list(p) for p in pairs], "ablation": ablation, "fresh": FRESH,
            "tokens": ids, "repeat": repeat, "intact": kept[1],
            "ablated": _measured(model, pairs, ablation, fresh, lengths),
            "predictions": model.predict(batch)[0].tolist(),
            "ablated_predictions": model.predict(batch, ablate=pairs,
                                                 ablation=ablation)[0].tolist()}  # fmt: skip
