"""Training runs as jobs: a lab that takes tens of seconds, run outside the request budget.

    POST   /api/runs          {"lab": NAME, "params": {...}} -> 202 {"id", "state", "position"}
    GET    /api/runs/{id}     {"id", "lab", "params", "state", "position", "step", "steps",
                               "losses", "error", "summary", "result", "shown" (the Labs
                               panel's summary, table, plot and claim)}; ``since=K`` sends only
                               losses[K:] (the page asks for what it has not drawn yet)
    DELETE /api/runs/{id}     cancels: a queued run leaves the queue, a running one stops at its
                              next training step (well under a second) and is answered
                              "cancelled" at once

NAME is one of the training labs (``TRAINING``: the specs marked ``training``). Its parameters are checked against the lab's
spec with the CLI's bounds (a run may go past the explorer's request bounds: that is what it is
for), then the lab's own estimate must stay within ``RUN_SECONDS`` and ``RUN_BYTES``, the CLI's
limit for a run without ``--yes``; a refusal is HTTP 422 naming the parameter.

One run trains at a time, on one worker thread of its own (the labs' request queue is not held
up); up to ``MAX_WAITING`` more wait, each with its place in line as ``position``; beyond that,
HTTP 429 with a ``Retry-After`` of the estimated seconds of the work ahead. The server keeps the
last ``MAX_KEPT`` finished runs (done, failed or cancelled) for its life, and the trained models
of the last ``MAX_MODELS`` train-induction runs; older ones are forgotten, so memory stays
bounded (a run's losses are bounded by its estimate's steps).

A state is "queued", "running", "done", "failed" (``error`` says why) or "cancelled". The
training loop reports each step through ``attnlab.labs._training.watching``; the watcher
appends the step's loss, and raises to stop the run when it was cancelled. A finished
train-induction run keeps its trained model, which ``/api/runs/{id}/learned`` (web/trained.py)
shows head by head.
"""

from __future__ import annotations

import collections
import logging
import math
import secrets
import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from attnlab import labs
from attnlab.errors import AttnlabError
from attnlab.kernels._threads import one_blas_thread
from attnlab.labs import LabSpec, Param, jsonable
from attnlab.labs._training import watching
from attnlab.web.errors import unprocessable
from attnlab.web.labview import shown
from attnlab.web.models import FieldError

__all__ = [
    "MAX_KEPT",
    "MAX_MODELS",
    "MAX_WAITING",
    "RUN_BYTES",
    "RUN_SECONDS",
    "TRAINING",
    "Runs",
    "router",
]

router = APIRouter(prefix="/api", tags=["training runs"])
log = logging.getLogger(__name__)

TRAINING = tuple(name for name, spec in labs.LABS.items() if spec.training)
RUN_SECONDS = 60.0  # the CLI's limit for a run without --yes
RUN_BYTES = 1 << 30  # estimated peak memory of one run
MAX_WAITING = 4  # runs queued behind the running one before 429
MAX_KEPT = 20  # finished runs remembered
MAX_MODELS = 4  # trained models kept for the learned view (each up to tens of MiB), newest
STATES = ("queued", "running", "done", "failed", "cancelled")
RunId = Annotated[str, Path(min_length=1, max_length=32, pattern=r"^[0-9a-f]+$")]


class _Stop(Exception):
    """Raised inside the training loop by the watcher of a cancelled run."""


class Run:
    """One job: its lab, parameters and state, its loss per step, and its result when done."""

    def __init__(self, lab: str, params: dict, total: int, seconds: float):
        self.id = secrets.token_hex(6)
        self.lab, self.params = lab, params
        self.state = "queued"
        self.step, self.steps = 0, total
        self.seconds = seconds  # estimated
        self.losses: list[float] = []
        self.result: dict | None = None
        self.shown: dict | None = None  # summary, table, plot and claim, as the Labs panel shows
        self.summary: list[str] = []
        self.error: str | None = None
        self.model = None  # a trained train-induction model, for the learned view
        self.cancel = threading.Event()
        self.created = time.time()

    def view(self, position: int | None, since: int = 0, full: bool = True) -> dict:
        out = {"id": self.id, "lab": self.lab, "params": self.params, "state": self.state,
               "position": position, "step": self.step, "steps": self.steps,
               "error": self.error, "learned": self.model is not None}  # fmt: skip
        if full:
            out |= {"since": since, "losses": self.losses[since:], "summary": self.summary,
                    "result": self.result, "shown": self.shown}  # fmt: skip
        return out


def _total(lab: str, params: dict) -> int:
    """The training steps a run makes in all (what ``step`` counts up to)."""
    if lab == "train-scaling":
        return 2 * len(params["widths"]) * params["runs"] * params["steps"]
    if lab == "train-positions":
        return 2 * params["steps"]
    return params["steps"]


class Runs:
    """The server's runs: one worker thread, a bounded queue, a bounded memory of the past."""

    def __init__(self, waiting: int = MAX_WAITING, kept: int = MAX_KEPT):
        self._lock = threading.Condition()
        self._waiting: collections.deque[Run] = collections.deque()
        self._runs: dict[str, Run] = {}  # every run known, in the order submitted
        self._limit, self._kept = waiting, kept
        self._current: Run | None = None
        self._worker: threading.Thread | None = None

    def submit(self, lab: str, params: dict, seconds: float) -> Run | None:
        """Queue a run, or None when the queue is full."""
        with self._lock:
            if len(self._waiting) >= self._limit + (self._current is None):
                return None
            run = Run(lab, params, _total(lab, params), seconds)
            self._runs[run.id] = run
            self._waiting.append(run)
            self._forget()
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="attnlab-runs",
                                                daemon=True)  # fmt: skip
                self._worker.start()
            self._lock.notify()
            return run

    def get(self, run_id: str) -> tuple[Run, int | None] | None:
        """(the run, its place in the queue counting from 1, or None when not queued)."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            place = next((i for i, r in enumerate(self._waiting, 1) if r is run), None)
            return run, place

    def all(self) -> list[Run]:
        """The runs kept, newest first."""
        with self._lock:
            return list(reversed(self._runs.values()))

    def cancel(self, run_id: str) -> Run | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            if run.state == "queued":
                self._waiting.remove(run)
            if run.state in ("queued", "running"):
                run.cancel.set()
                run.state = "cancelled"
                self._forget()
            return run

    def retry_after(self) -> int:
        """Whole seconds of estimated work ahead of a new run (at least 1)."""
        with self._lock:
            ahead = sum(r.seconds for r in self._waiting)
            if self._current is not None:
                ahead += self._current.seconds
            return max(1, math.ceil(ahead))

    def _forget(self) -> None:
        """Drop the oldest finished runs beyond ``kept`` (the lock is held)."""
        finished = [i for i, r in self._runs.items() if r.state in ("done", "failed", "cancelled")]
        for run_id in finished[: max(0, len(finished) - self._kept)]:
            del self._runs[run_id]
        with_model = [r for r in self._runs.values() if r.state == "done" and r.model is not None]
        for run in with_model[: max(0, len(with_model) - MAX_MODELS)]:
            run.model = None  # its numbers stay; its heads can no longer be opened

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._lock.wait()
                run = self._current = self._waiting.popleft()
                run.state = "running"
            try:
                self._execute(run)
            finally:
                with self._lock:
                    self._current = None
                    self._forget()

    def _execute(self, run: Run) -> None:
        spec = labs.LABS[run.lab]

        def watch(done: int, total: int, loss: float, model) -> None:
            if run.cancel.is_set():
                raise _Stop
            run.step, run.steps = done, total
            run.losses.append(round(float(loss), 6))
            if run.lab == "train-induction":
                run.model = model  # the same object every step: it trains in place

        try:
            with one_blas_thread(), watching(watch):
                result = spec(**run.params)
        except _Stop:
            run.model = None
            return
        except AttnlabError as exc:
            run.error, run.state = str(exc), "failed"
            return
        except Exception as exc:  # a bug: logged with its traceback, said in one line
            log.exception("training run %s failed", run.id)
            run.error, run.state = f"internal error ({type(exc).__name__})", "failed"
            return
        with self._lock:
            if run.cancel.is_set():  # cancelled while the lab measured, after its last step
                run.model = None
                return
            run.result, run.summary = jsonable(result.as_dict()), list(result.summary())
            run.shown = shown(spec, result)
            run.state = "done"
            self._forget()


# -- validation ------------------------------------------------------------------------------


def _field(p: Param):
    """The pydantic type of one parameter with the CLI's bounds (a run's, not a request's)."""
    low, high = p.bounds()
    if p.choices:
        kind: Any = Annotated[str, Field(pattern="^(" + "|".join(p.choices) + ")$")]
    elif p.kind is str:
        kind = Annotated[str, Field(min_length=1, max_length=p.max_length or 200)]
    else:
        names = ("gt", "lt") if p.open_bounds else ("ge", "le")
        limits = {k: v for k, v in zip(names, (low, high), strict=True) if v is not None}
        if p.kind is float:
            limits["allow_inf_nan"] = False
        kind = Annotated[p.kind, Field(strict=p.kind is int, **limits)]
    if p.many:
        kind = Annotated[list[kind], Field(min_length=1, max_length=p.web_items)]
    return kind, Field(p.default_for())


_MODELS: dict[str, type[BaseModel]] = {}


def _params_model(spec: LabSpec) -> type[BaseModel]:
    if spec.name not in _MODELS:
        fields = {p.name: _field(p) for p in spec.params if p.web}
        _MODELS[spec.name] = create_model(f"{spec.name.title()}Run",
                                          __config__=ConfigDict(extra="forbid"), **fields)  # fmt: skip
    return _MODELS[spec.name]


def checked_params(lab: str, params: dict) -> tuple[dict, float]:
    """(the lab's parameters, defaults filled in, and its estimated seconds), or FieldError
    naming the first parameter refused."""
    if lab not in TRAINING:
        raise FieldError("lab", f"expected a lab named one of {list(TRAINING)}, but got "
                         f"{lab[:40]!r} instead")  # fmt: skip
    spec = labs.LABS[lab]
    try:
        values = _params_model(spec).model_validate(params).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        where = where.lstrip(".") or "params"
        raise FieldError(f"params.{where}", f"{where}: {first['msg']}") from None
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    estimate = spec.estimate(**{**spec.defaults(), **values})
    if estimate.seconds > RUN_SECONDS or estimate.bytes > RUN_BYTES:
        raise FieldError(f"params.{spec.budget_field}",
                         f"expected a run of at most {RUN_SECONDS:g} s and {RUN_BYTES >> 20} MiB, "
                         f"but this one is estimated at {estimate}; lower "
                         f"{spec.budget_field}")  # fmt: skip
    return values, estimate.seconds


# -- routes ----------------------------------------------------------------------------------


class RunRequest(BaseModel):
    """A training run to start: a training lab and its parameters (the rest at defaults)."""

    model_config = ConfigDict(extra="forbid")
    lab: str = Field(max_length=40, description=f"One of {', '.join(TRAINING)}.")
    params: dict[str, Any] = Field(default_factory=dict, max_length=16,
                                   description="The lab's parameters, as on the CLI.")  # fmt: skip


def runs_of(request: Request) -> Runs:
    return request.app.state.runs


def _missing(run_id: str) -> JSONResponse:
    """HTTP 404 naming the id: never made here, or forgotten."""
    msg = (f"expected the id of a run this server kept, but got {run_id!r}; it may have been "
           f"forgotten (the last {MAX_KEPT} finished runs are kept)")  # fmt: skip
    return unprocessable([{"field": "id", "loc": ["path", "run_id"], "msg": msg,
                           "type": "not_found"}], status=404)  # fmt: skip


_NOT_KEPT = {404: {"description": "No run of that id: never made here, or forgotten."}}
_QUEUE_FULL = {429: {"description": "The runs' queue is full; retry after Retry-After seconds."}}


@router.post("/runs", status_code=202, summary="Start a training run", responses=_QUEUE_FULL)
def start_run(body: RunRequest, request: Request):
    """Queue a training lab; answers 202 with the run's id, 429 with Retry-After when full."""
    params, seconds = checked_params(body.lab, body.params)
    runs = runs_of(request)
    run = runs.submit(body.lab, params, seconds)
    if run is None:
        wait = runs.retry_after()
        return JSONResponse({"message": f"expected at most {MAX_WAITING} runs waiting, but the "
                             f"queue is full; try again in {wait} s"}, status_code=429,
                            headers={"Retry-After": str(wait)})  # fmt: skip
    found = runs.get(run.id)
    place = found[1] if found else None
    return JSONResponse({"id": run.id, "state": run.state, "position": place}, status_code=202,
                        headers={"Location": f"/api/runs/{run.id}"})  # fmt: skip


@router.get("/runs/{run_id}", summary="A run's state, loss per step and result",
            responses=_NOT_KEPT)  # fmt: skip
def get_run(run_id: RunId, request: Request,
            since: Annotated[int, Query(ge=0, le=10**7)] = 0):  # fmt: skip
    """The run's state, its losses from step ``since`` on, and its result once done."""
    found = runs_of(request).get(run_id)
    if found is None:
        return _missing(run_id)
    run, place = found
    return run.view(place, since=since)


@router.delete("/runs/{run_id}", summary="Cancel a run", responses=_NOT_KEPT)
def cancel_run(run_id: RunId, request: Request):
    """A queued run leaves the queue; a running one stops at its next training step."""
    run = runs_of(request).cancel(run_id)
    return _missing(run_id) if run is None else run.view(None, full=False)


@router.api_route("/runs/{run_id}", methods=["OPTIONS", "PATCH", "POST", "PUT"],
                  include_in_schema=False)  # fmt: skip
def other_methods(run_id: str):
    # Two routes share the path; left alone, a 405 would list only the first one's method.
    error = {"field": "request", "loc": [], "msg": "Method Not Allowed", "type": "http_405"}
    return unprocessable([error], status=405, headers={"Allow": "GET, DELETE"})


def install(app) -> None:
    """Give ``app`` its own runs and their routes."""
    app.state.runs = Runs()
    app.include_router(router)
