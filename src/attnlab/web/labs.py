"""Routes of the labs and the exercises: bounded parameters in, the lab's own result out.

The request model and the route of each lab are generated from its spec (attnlab.labs.LABS):
the fields take the spec's web defaults and bounds, and a request whose estimated cost passes
``WEB_SECONDS`` or ``WEB_BYTES`` is refused with 422 naming the spec's budget field, so no
request can allocate without bound or keep the server busy for long. The training labs are the
exception: their bounds and budget are a training run's (``web/runs.py``), so a request with no
parameters runs the CLI's defaults (tens of seconds); the page runs them as jobs instead. The web bounds are sized
so that no combination of them passes the budget (tests/web/test_web_budget.py): a request the
OpenAPI document allows is never refused by it, and the check stays as a second guard.

Labs run on a queue of their own: one lab at a time on one worker thread, with at
most ``MAX_WAITING`` more waiting; the routes are ``async`` and await the lab, so waiting labs
hold no thread of the pool that serves every other route. A lab request beyond the queue gets
HTTP 429 at once, with a ``Retry-After`` of the queued work's estimated seconds.

A lab runs with OpenBLAS held to one thread (``kernels/_threads.one_blas_thread``): the estimates
count one core, and the cost lab, which times matmuls, took 10.7 s with OpenBLAS's own threads
on a loaded machine against 1.24 s on one (their waiting threads spin). The labs that spread
their draws over the machine's threads already pin BLAS in their pool; the pin is counted, so
it nests.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Annotated, ClassVar, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from attnlab import exercises, labs
from attnlab.kernels._threads import one_blas_thread
from attnlab.labs import LabSpec, Param, jsonable
from attnlab.web.labview import shown
from attnlab.web.models import FieldError
from attnlab.web.runs import RUN_BYTES, RUN_SECONDS

router = APIRouter(prefix="/api", tags=["labs and exercises"])

WEB_SECONDS = 2.0  # a request's estimated run time, at most (a class waits no longer)
WEB_BYTES = 256 << 20  # and its estimated memory (a training lab's: a run's, ``budget``)
MAX_WAITING = 4  # lab requests queued behind the running one before 429

Download = Literal["csv", "json"]


class LabQueue:
    """One worker thread for the labs, ``waiting`` more accepted behind it, no more."""

    def __init__(self, waiting: int = MAX_WAITING):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="attnlab-lab")
        self._lock = threading.Lock()
        self._limit = 1 + waiting
        self.count = 0  # accepted and not finished: running or waiting
        self._seconds = 0.0  # their estimated seconds

    def submit(self, fn: Callable, seconds: float) -> Future | None:
        """Queue ``fn``, or None when the queue is full. Finished or cancelled, it leaves."""
        with self._lock:
            if self.count >= self._limit:
                return None
            self.count += 1
            self._seconds += seconds
        future = self._pool.submit(fn)
        future.add_done_callback(lambda _: self._leave(seconds))
        return future

    def _leave(self, seconds: float) -> None:
        with self._lock:
            self.count -= 1
            self._seconds = max(0.0, self._seconds - seconds)

    def retry_after(self) -> int:
        """Whole seconds until the queued work is estimated to be done (at least 1)."""
        with self._lock:
            return max(1, math.ceil(self._seconds))


QUEUE = LabQueue()


class _LabQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lab: ClassVar[str]

    download: Download | None = Field(
        None, description="Return a CSV table or the JSON result as a file."
    )

    def params(self) -> dict:
        return self.model_dump(exclude={"download"})

    @model_validator(mode="after")
    def _within_budget(self):
        spec = labs.LABS[self.lab]
        estimate = spec.cost(**self.params())
        seconds, size = budget(spec)
        if estimate.seconds > seconds or estimate.bytes > size:
            raise FieldError(
                spec.budget_field,
                f"expected work of at most {seconds:g} s and {size >> 20} MiB, but "
                f"got an estimated {estimate} instead; lower it so the lab finishes in time",
            )
        return self


def budget(spec: LabSpec) -> tuple[float, int]:
    """(seconds, bytes) a request of ``spec`` may be estimated at: a training lab's is a
    training run's, so that its route answers at the CLI's defaults however long they take."""
    return (RUN_SECONDS, RUN_BYTES) if spec.training else (WEB_SECONDS, WEB_BYTES)


def _field(p: Param):
    """The pydantic type and Field of one spec parameter, with the web's bounds and default."""
    low, high = p.bounds(web=True)
    if p.choices:
        kind, limits = Literal[p.choices], {}
    elif p.kind is str:
        kind, limits = str, {"min_length": 1, "max_length": p.max_length}
    else:
        kind = p.kind
        names = ("gt", "lt") if p.open_bounds else ("ge", "le")
        limits = {k: v for k, v in zip(names, (low, high), strict=True) if v is not None}
        if p.kind is float:
            limits["allow_inf_nan"] = False
    kind = Annotated[kind, Field(**limits)]
    if p.many:
        kind = Annotated[list[kind], Field(min_length=1, max_length=p.web_items)]
    return kind, Field(p.default_for(web=True), description=p.help)


def request_model(spec: LabSpec) -> type[_LabQuery]:
    """The query model of ``spec``'s route: one field per web parameter."""
    fields = {p.name: _field(p) for p in spec.params if p.web}
    name = f"{spec.name.capitalize()}Query"
    model = create_model(name, __base__=_LabQuery, __doc__=f"Lab {spec.name}: {spec.summary}",
                         **fields)  # fmt: skip
    model.lab = spec.name
    return model


def _busy() -> JSONResponse:
    wait = QUEUE.retry_after()
    return JSONResponse(
        {"message": f"expected at most {MAX_WAITING} labs waiting, but the queue is full; "
                    f"try again in {wait} s"},
        status_code=429,
        headers={"Retry-After": str(wait)},
    )  # fmt: skip


def _single_blas(spec: LabSpec, params: dict):
    """Run the lab with OpenBLAS on one thread, as its estimate counts it (module docstring)."""
    with one_blas_thread():
        return spec(**params)


async def _run(name: str, query: _LabQuery):
    spec, params = labs.LABS[name], query.params()
    future = QUEUE.submit(lambda: _single_blas(spec, params), spec.cost(**params).seconds)
    if future is None:
        return _busy()
    result = await asyncio.wrap_future(future)
    if query.download is not None:
        text, media = {"csv": (result.to_csv, "text/csv"),
                       "json": (result.to_json, "application/json")}[query.download]  # fmt: skip
        filename = f"attnlab-{name}-seed{query.seed}.{query.download}"
        disposition = f'attachment; filename="{filename}"'
        return Response(text(), media_type=media, headers={"Content-Disposition": disposition})
    return JSONResponse({"lab": name, "params": params, **shown(spec, result)})


@router.get("/labs")
def list_labs() -> list[dict]:
    """Every lab with its parameters: type, default and bounds."""
    return [spec.describe() for spec in labs.LABS.values()]


def _route(spec: LabSpec) -> None:
    model = request_model(spec)

    async def run(query):
        return await _run(spec.name, query)

    # Set as an object, not a string: the model is a closure variable that a postponed
    # annotation (this module uses `from __future__ import annotations`) could not resolve.
    run.__annotations__ = {"query": Annotated[model, Query()]}
    run.__doc__ = (model.__doc__ or "") + (
        " Returns summary, table and plot, or a file with download=csv|json; 429 with "
        "Retry-After while the lab queue is full."
    )
    router.add_api_route(
        f"/labs/{spec.name}", run, methods=["GET"], name=f"lab_{spec.name}", summary=spec.title
    )


for _spec in labs.LABS.values():
    _route(_spec)


@router.get("/labs/{name}", include_in_schema=False)
def unknown_lab(name: Annotated[str, Path(max_length=100)]):
    raise FieldError(
        "name", f"expected a lab named one of {sorted(labs.LABS)}, but got {name!r} instead"
    )


# -- exercises -----------------------------------------------------------------------------------


class AnswerRequest(BaseModel):
    """A learner's answer: a number for the numeric exercises, words for the written ones."""

    model_config = ConfigDict(extra="forbid")

    answer: (
        # strict: a JSON number only (true is not quietly read as 1; "1.96" goes to the text
        # branch and is read by exercises.check, strictly too)
        Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-1e12, le=1e12)]
        | Annotated[str, Field(max_length=4000)]
    ) = Field(
        description="A number, or for a written exercise your own words (up to 4000 characters)."
    )


def _exercise(n: int):
    count = len(exercises.EXERCISES)
    if not 1 <= n <= count:
        raise FieldError("n", f"expected an exercise number from 1 to {count}, but got {n} instead")
    return exercises.get(n)


@router.get("/exercises")
def list_exercises() -> list[dict]:
    """The chapter's exercises, without answers: those come back from the check route."""
    return [
        {
            "number": ex.number,
            "kind": ex.kind,
            "question": ex.question,
            "numeric": ex.answer is not None,
        }
        for ex in exercises.EXERCISES
    ]


@router.post("/exercises/{n}/check")
def check_exercise(n: Annotated[int, Path(ge=1, le=99)], request: AnswerRequest) -> dict:
    """Check an answer: correct or not (null for a written exercise), the expected value and
    its tolerance, and the worked solution."""
    _exercise(n)
    return _clean_verdict(exercises.check(n, request.answer))


def _clean_verdict(verdict) -> dict:
    fields = ("number", "correct", "expected", "tolerance", "message", "solution")
    return {name: jsonable(getattr(verdict, name)) for name in fields}
