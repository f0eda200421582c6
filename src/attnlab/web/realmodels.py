"""Real models in the explorer: Hugging Face folders given to ``attnlab serve --model PATH``.

    GET /api/models            every model the server was started with and its state:
                               "loading" (with the seconds so far), "ready" or "failed" (with
                               the reason); an empty list without ``--model``
    GET /api/models/run        one model on a text or token ids (at most MAX_TOKENS): the tokens,
                               each layer's attention kind, every head's (N, N) weights rounded
                               to 4 places and its head scores (attnlab.models.heads); past
                               GRID_TOKENS, one layer's weights (``layer``) as bytes instead
    GET /api/models/head       one head's row for one query, as the stepper takes it: q (1, d),
                               k and v of the keys the model's mask lets that query see, the
                               scale, the softcap and sink of that head (null where the layer
                               has none), and the weights ``run.trace`` gives for that row

Shape legend: L layers, h heads, N tokens, M keys one query sees, d a head's width.

Each folder is checked before the server starts (``check_folder``: config.json, a family
attnlab runs, the safetensors headers) and loaded once, on a thread of its own, when the app is
created (``Shelf``); the routes answer 503 with Retry-After while it loads. Runs are computed on
one worker thread with a bounded queue, as the learned routes are, and the last few are kept.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from attnlab.errors import AttnlabError
from attnlab.figures import stepper
from attnlab.models import load
from attnlab.models._checkpoint import COMPUTE_DTYPES, Checkpoint
from attnlab.models._config import Config
from attnlab.models._load import check_layers, read_folder
from attnlab.web.labs import LabQueue
from attnlab.web.models import FieldError

__all__ = ["MAX_TOKENS", "Shelf", "check_folder", "router"]

router = APIRouter(prefix="/api/models", tags=["real models"])

MAX_TOKENS = 512  # a GPT-2 small run at this length is well inside a request's time (docs)
# Up to GRID_TOKENS every head of every layer is sent (GPT-2 small at 64 tokens: 3.2 MB of
# JSON). Past it the same would be 250 MB at 512 tokens, so one layer is sent at a time, each
# weight as one byte (round(255 w), 3.1 MB for GPT-2 small's 12 heads at 512 tokens, base64):
# enough for a heatmap, and the stepper still reads the exact row from /api/models/head.
GRID_TOKENS = 64
MAX_TEXT = 4000  # characters of text, before it is tokenized
DEFAULT_TEXT = "The cat sat on the mat. The cat sat on the mat."
ANSWER_S = 1.0  # an answer's seconds, for Retry-After (a small model answers in milliseconds)
KEPT_RUNS = 8  # runs kept per server: a GPT-2 small run at 64 tokens holds ~2 MB of q, k, v
# ... and at most this many bytes of them: a GPT-2 small run at 512 tokens keeps 151 MB of
# weights (144 heads of 512 x 512 float32), so eight such runs would hold 1.2 GB.
KEPT_BYTES = 512 * 2**20
QUEUE = LabQueue(waiting=8)
GZIP_LEVEL = 1  # GPT-2's 3.2 MB at 64 tokens: 0.65 MB in 0.02 s (level 9: 0.52 MB in 1.3 s)
REFUSED = {
    429: {"description": "The model routes' queue is full; see Retry-After."},
    503: {"description": "The model is still loading (see Retry-After) or failed to load."},
}

# Ids in ASCII digits only, one comma or a run of spaces between two (as the learned routes).
_IDS = re.compile(r"\s*[0-9]+(?:(?:\s*,\s*|\s+)[0-9]+)*\s*", re.ASCII)


def check_folder(path) -> tuple[str, Config]:
    """(family, config) of model folder ``path`` after the checks that need no weights read:
    config.json, a family attnlab runs, a shape the family can build, the safetensors files'
    headers. An AttnlabError naming the file otherwise (what ``attnlab serve`` refuses)."""
    folder, data, cfg, module = read_folder(path)
    # Every file's header, no tensor read: declared bytes past half the memory are refused here,
    # before the server answers, as are more layers than the checkpoint holds tensors for.
    check_layers(cfg, module, Checkpoint(folder, COMPUTE_DTYPES["float32"]))
    return data["model_type"], cfg


@dataclass
class Entry:
    """One model of the shelf: where it is and how its loading went."""

    name: str
    path: Path
    status: str = "loading"  # "loading", "ready" or "failed"
    message: str | None = None
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None  # how long loading took, once done
    model: object = field(default=None, repr=False)

    def as_dict(self) -> dict:
        out = {"name": self.name, "path": str(self.path), "status": self.status,
               "message": self.message, "max_tokens": MAX_TOKENS,
               "grid_tokens": GRID_TOKENS}  # fmt: skip
        out["seconds"] = round(
            self.seconds if self.seconds is not None else time.monotonic() - self.started, 1
        )
        if self.model is not None:
            m = self.model
            out |= {"architecture": m.architecture, "shape": m.shape.as_dict(),
                    "tokenizer": m.tokenizer_path is not None}  # fmt: skip
        return out


class Shelf:
    """The server's models, loaded one after another on a background thread.

    Names are the folders' names, made unique with "-2", "-3" ... in the order given."""

    def __init__(self, paths=()):
        self.entries: dict[str, Entry] = {}
        for path in paths:
            folder = Path(path).expanduser()
            base = _name(folder)
            name, n = base, 2
            while name in self.entries:
                name, n = f"{base}-{n}", n + 1
            self.entries[name] = Entry(name, folder)
        self.runs: OrderedDict = OrderedDict()  # (name, ids) -> ModelRun, newest last
        self._lock = threading.Lock()
        if self.entries:
            threading.Thread(target=self._load_all, name="attnlab-models", daemon=True).start()

    def _load_all(self) -> None:
        for entry in self.entries.values():
            entry.started = time.monotonic()
            try:
                entry.model = load(entry.path)
                entry.status = "ready"
            except (AttnlabError, OSError, MemoryError) as exc:  # what a folder can cause
                entry.status, entry.message = "failed", str(exc)
            entry.seconds = time.monotonic() - entry.started

    def wait(self, timeout: float = 60.0) -> None:
        """Block until no model is loading (tests, and a server that wants them all first)."""
        deadline = time.monotonic() + timeout
        while any(e.status == "loading" for e in self.entries.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("the models are still loading")
            time.sleep(0.01)

    def ready(self, name: str) -> Entry:
        """The entry of a loaded model, or the refusal that says why there is none."""
        entry = self.entries.get(name)
        if entry is None:
            known = ", ".join(self.entries) or "none: the server was started without --model"
            raise FieldError("model", f"expected one of the server's models ({known}), but got "
                             f"{name[:60]!r}")  # fmt: skip
        return entry

    def run(self, name: str, ids: tuple[int, ...]):
        """The model's run on ``ids``, computed once while among the last ``KEPT_RUNS``."""
        key = (name, ids)
        with self._lock:
            if key in self.runs:
                self.runs.move_to_end(key)
                return self.runs[key]
        run = self.entries[name].model.run(np.array(ids))  # weights (1, h, N, N) per layer
        with self._lock:
            self.runs[key] = run
            while len(self.runs) > 1 and (
                len(self.runs) > KEPT_RUNS or sum(map(_held, self.runs.values())) > KEPT_BYTES
            ):
                self.runs.popitem(last=False)  # the oldest; the newest always stays
        return run


def _scores(run) -> dict:
    """The run's head scores, kind -> (L, h) rounded to 4 places (None where undefined),
    computed once per kept run: at 512 tokens they cost as much as the layer's bytes, and
    picking another layer asks again."""
    if getattr(run, "explorer_scores", None) is None:
        scores = run.head_scores().as_dict()["attnlab"]
        run.explorer_scores = {k: [[x if x is None else round(x, 4) for x in row] for row in t]
                               for k, t in scores.items()}  # fmt: skip
    return run.explorer_scores


def _held(run) -> int:
    """Bytes a kept run holds: each layer's q, k, v and its (B, h, N, N) weights."""
    total = 0
    for layer in run.layers:
        total += layer.q.nbytes + layer.k.nbytes + layer.v.nbytes
        total += layer._weights.nbytes if layer._weights is not None else 0
    return total


def _name(folder: Path) -> str:
    """A model's name: its folder's, or for a Hugging Face cache snapshot
    (models--org--name/snapshots/<commit>) the hub name, not the commit."""
    folder = folder.resolve()
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    return folder.name or "model"


def _unavailable(entry: Entry) -> JSONResponse | None:
    if entry.status == "ready":
        return None
    if entry.status == "loading":
        return JSONResponse({"message": f"the model {entry.name} is still loading; try again "
                             "in a second"}, status_code=503, headers={"Retry-After": "1"})  # fmt: skip
    return JSONResponse({"message": f"the model {entry.name} failed to load: {entry.message}"},
                        status_code=503)  # fmt: skip


def _ids(model, text: str | None, ids: str | None) -> tuple[int, ...]:
    """The token ids of a request: ``ids`` as given, else ``text`` through the tokenizer."""
    if text is not None and ids is not None:
        raise FieldError("ids", "expected text or ids, but got both; send one")
    vocab, positions = model.shape.vocab, model.shape.max_positions
    limit = MAX_TOKENS if positions is None else min(MAX_TOKENS, positions)
    if ids is not None:
        if not _IDS.fullmatch(ids):
            raise FieldError("ids", "expected token ids written in the digits 0-9, separated "
                             f"by spaces or one comma, but got {ids[:40]!r}")  # fmt: skip
        values = [int(x) for x in re.split(r"[\s,]+", ids.strip())]
        name = "ids"
        for i, value in enumerate(values[:limit]):
            if value >= vocab:
                raise FieldError("ids", f"expected token ids from 0 to {vocab - 1}, but got "
                                 f"{value} at position {i}")  # fmt: skip
    else:
        if model.tokenizer_path is None:
            raise FieldError("text", f"expected token ids: {model.path} has no tokenizer.json "
                             "to turn text into ids")  # fmt: skip
        values, name = model.tokenize(DEFAULT_TEXT if not text else text).tolist(), "text"
    if not 1 <= len(values) <= limit:
        raise FieldError(name, f"expected 1 to {limit} tokens, but got {len(values)}")
    return tuple(values)


def _pieces(model, ids) -> list[str]:
    """Each token as text (its id when the folder has no tokenizer); a token that decodes to
    nothing alone (a BOS such as "<s>") is shown by its name, never as a blank."""
    return model.tokens(list(ids))


# What a token's text hides: a leading space (a word's start in GPT-2's pieces) and the control
# characters a label would swallow, each shown by a visible mark.
_VISIBLE = str.maketrans({" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"})


def visible(piece: str) -> str:
    """A token's text with its spaces and line breaks visible ("␣cat", "⏎"); "∅" if empty."""
    return piece.translate(_VISIBLE) or "∅"


def position_label(position: int, piece: str) -> str:
    """A stepper row's name for a token: its 0-based position and its visible text, cut to
    the stepper's label length."""
    return f"{position} {visible(piece)}"[: stepper.MAX_LABEL]


def _encoded(content: dict, packed: bool) -> Response:
    """``content`` as JSON, compressed (fast) when the client takes gzip. Done here, on the
    worker thread: for GPT-2's 144 heads at 64 tokens (3.2 MB of JSON) FastAPI's own encoder
    takes ~0.6 s and the app's gzip middleware, at its best compression, ~1.3 s; json.dumps
    takes ~0.1 s and gzip at level 1 ~0.02 s (docs/explorer.md)."""
    body = json.dumps(content, separators=(",", ":")).encode()
    if not packed or len(body) < 1024:
        return Response(body, media_type="application/json")
    headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
    return Response(gzip.compress(body, GZIP_LEVEL), media_type="application/json", headers=headers)


async def _queued(request: Request, name: str, answer):
    shelf: Shelf = request.app.state.models
    entry = shelf.ready(name)
    refused = _unavailable(entry)
    if refused is not None:
        return refused
    packed = "gzip" in request.headers.get("accept-encoding", "")
    future = QUEUE.submit(lambda: _encoded(answer(shelf, entry), packed), ANSWER_S)
    if future is None:
        wait = QUEUE.retry_after()
        return JSONResponse({"message": "expected at most 8 model requests waiting, but the "
                             f"queue is full; try again in {wait} s"}, status_code=429,
                            headers={"Retry-After": str(wait)})  # fmt: skip
    return await asyncio.wrap_future(future)


Name = Annotated[str, Query(max_length=200, description="A model's name, from /api/models.")]
Text = Annotated[str | None, Query(max_length=MAX_TEXT, description="Text to tokenize.")]
Ids = Annotated[str | None, Query(max_length=8 * MAX_TOKENS, description="Token ids.")]


@router.get("", summary="The server's models and whether each has loaded")
def models(request: Request) -> dict:
    return {"models": [e.as_dict() for e in request.app.state.models.entries.values()]}


@router.get("/run", summary="Every head of a model on a text or token ids", responses=REFUSED)
async def model_run(
    request: Request,
    model: Name,
    text: Text = None,
    ids: Ids = None,
    layer: Annotated[
        int, Query(ge=0, le=10_000, description="The layer sent past grid_tokens (one at a time).")
    ] = 0,
):
    return await _queued(request, model, lambda shelf, entry: _run(shelf, entry, text, ids, layer))


def _run(shelf: Shelf, entry: Entry, text, ids, layer: int = 0) -> dict:
    tokens = _ids(entry.model, text, ids)
    run = shelf.run(entry.name, tokens)
    scores = _scores(run)  # kind -> (L, h): a decoder's kinds, or an encoder's (BERT)
    out = {"model": entry.name, "ids": list(tokens), "tokens": _pieces(entry.model, tokens),
           "kinds": run.kinds, "heads": run.layers[0].q.shape[1], "score_kinds": list(scores),
           "scores": scores}  # fmt: skip
    if len(tokens) <= GRID_TOKENS:
        out["weights"] = [np.round(w[0].astype(float), 4).tolist() for w in run.attention]
        return out  # weights: L x (h, N, N)
    if layer >= len(run.layers):
        raise FieldError(
            "layer", f"expected layer from 0 to {len(run.layers) - 1}, but got {layer}"
        )
    quantised = np.rint(run.attention[layer][0] * 255).astype(np.uint8)  # (h, N, N) bytes
    out["layer"] = layer
    out["weights_u8"] = [base64.b64encode(w.tobytes()).decode("ascii") for w in quantised]
    return out


@router.get("/head", summary="One head's q, k and v for one query", responses=REFUSED)
async def model_head(
    request: Request,
    model: Name,
    layer: Annotated[int, Query(ge=0)],
    head: Annotated[int, Query(ge=0)],
    query: Annotated[int, Query(ge=0)],
    text: Text = None,
    ids: Ids = None,
):
    def answer(shelf, entry):
        return _head(shelf, entry, text, ids, layer, head, query)

    return await _queued(request, model, answer)


def _head(shelf: Shelf, entry: Entry, text, ids, layer: int, head: int, query: int) -> dict:
    tokens = _ids(entry.model, text, ids)
    run = shelf.run(entry.name, tokens)
    for name, value, size in (("layer", layer, len(run.layers)),
                              ("head", head, run.layers[0].q.shape[1]),
                              ("query", query, len(tokens))):  # fmt: skip
        if value >= size:
            raise FieldError(name, f"expected {name} from 0 to {size - 1}, but got {value}")
    call = run.layers[layer]
    width = call.q.shape[-1]
    if width > stepper.MAX_WIDTH:
        raise FieldError("head", f"expected heads at most {stepper.MAX_WIDTH} wide (the stepper's "
                         f"limit), but this model's are {width} wide")  # fmt: skip
    trace = run.trace(layer, head, query)  # q (1, d) against all N keys, the blocked ones -inf
    seen = np.flatnonzero(call.allowed()[0, 0, query])  # (M,) positions (both ways in an encoder)
    if len(seen) > stepper.MAX_TOKENS:
        raise FieldError("query", f"expected a query that sees at most {stepper.MAX_TOKENS} keys (the "
                         f"stepper's limit), but position {query} sees {len(seen)}; pick a "
                         f"position below {stepper.MAX_TOKENS}")  # fmt: skip
    scale = float(trace.scale)
    plain = bool(np.isclose(scale, 1 / np.sqrt(width), rtol=1e-6))
    pieces = _pieces(entry.model, tokens)
    # The stepper scales by 1/√d or by 1: another factor goes into q, so q kᵀ is the scaled score.
    q = trace.q.astype(float) * (1.0 if plain else scale)  # (1, d)
    return {
        "model": entry.name,
        "layer": layer,
        "head": head,
        "query": query,
        "ids": list(tokens),
        "keys": seen.tolist(),
        "scaled": plain,
        "scale": scale,
        "q": q.tolist(),
        "k": trace.k[seen].astype(float).tolist(),  # (M, d): the keys this query may see
        "v": trace.v[seen].astype(float).tolist(),  # (M, d)
        "weights": trace.weights[0, seen].astype(float).tolist(),  # (M,)
        # The variants the stepper steps through: Gemma 2's cap and gpt-oss's sink of this head.
        "softcap": None if call.softcap is None else float(call.softcap),
        "sink": None if call.sinks is None else float(call.sinks[head]),
        # The stepper's row names: 0-based positions, as the model view and the CLI count.
        "query_labels": [position_label(query, pieces[query])],
        "key_labels": [position_label(int(p), pieces[p]) for p in seen],
    }
