"""Routes of the labs and the exercises: bounded parameters in, the lab's own result out.

Each lab has a query model whose bounds keep one run to a few seconds and a few tens of MB at
most (a "work" budget per lab on top of per-field bounds), and one lab runs at a time, so no
request can allocate without bound or keep the server busy for long.
"""

from __future__ import annotations

import csv
import io
import json
import math
import threading
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from attnlab import exercises, labs
from attnlab.figures.labplots import lab_plot
from attnlab.web.models import FieldError, Seed

router = APIRouter(prefix="/api", tags=["labs and exercises"])

Width = Annotated[int, Field(ge=1, le=1024)]
Widths = Annotated[list[Width], Field(min_length=1, max_length=8)]
Download = Literal["csv", "json"]


class _LabQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: Seed = 0
    download: Download | None = Field(
        None, description="Return a CSV table or the JSON result as a file."
    )

    def params(self) -> dict:
        return self.model_dump(exclude={"download"})


def _budget(name: str, work: float, limit: float, what: str) -> None:
    if work > limit:
        raise FieldError(
            name,
            f"expected {what} of at most {limit:,.0f}, but got {work:,.0f} instead; "
            "lower it so the lab finishes in a few seconds",
        )


class VarianceQuery(_LabQuery):
    """Lab variance: Var(q·k)/d_k and Var(q·k/√d_k) per width (§6.3)."""

    widths: Widths = Field([32, 64, 128, 256], description="The d_k values.")
    draws: int = Field(200_000, ge=2, le=1_000_000, description="Pairs (q, k) per width.")

    @model_validator(mode="after")
    def _work(self):
        _budget("draws", self.draws * sum(self.widths), 1e8, "draws × sum(widths)")
        return self


class SaturationQuery(_LabQuery):
    """Lab saturation: the share of softmax trials whose largest weight passes the threshold."""

    d_k: Width = Field(128, description="Query/key width.")
    keys: int = Field(64, ge=2, le=256, description="Keys per trial (M).")
    trials: int = Field(500, ge=1, le=5000, description="Softmax trials.")
    threshold: float = Field(0.99, gt=0, lt=1, description="p_max above this counts as saturated.")

    @model_validator(mode="after")
    def _work(self):
        work = self.trials * self.keys * (self.d_k + self.keys)
        _budget("trials", work, 1e8, "trials × keys × (d_k + keys)")
        return self


class SweepQuery(_LabQuery):
    """Lab sweep: the saturation lab and score spreads across widths."""

    widths: Widths = Field([16, 32, 64, 128, 256], description="The d_k values.")
    keys: int = Field(64, ge=2, le=256, description="Keys per trial (M).")
    trials: int = Field(500, ge=1, le=2000, description="Softmax trials per width.")
    threshold: float = Field(0.99, gt=0, lt=1, description="p_max above this counts as saturated.")
    draws: int = Field(20_000, ge=2, le=200_000, description="Scores per histogram.")
    bins: int = Field(40, ge=1, le=200, description="Histogram bins.")

    @model_validator(mode="after")
    def _work(self):
        work = sum(self.trials * self.keys * (w + self.keys) + self.draws * w for w in self.widths)
        _budget("widths", work, 1e8, "Σ over widths of trials × keys × (d_k + keys) + draws × d_k")
        return self


class PermutationQuery(_LabQuery):
    """Lab permutation: a sentence and its reordering, without and with position vectors."""

    d_model: int = Field(8, ge=1, le=256, description="Width of the word vectors.")
    sentence: str = Field("The dog bit the man", min_length=1, max_length=200)
    shuffled: str = Field(
        "The man bit the dog",
        min_length=1,
        max_length=200,
        description="The same words in another order.",
    )
    word: str = Field("dog", min_length=1, max_length=40, description="The word to follow.")


class CostQuery(_LabQuery):
    """Lab cost: multi-head attention timed across N beside the cost model (§6.6)."""

    d_model: int = Field(256, ge=8, le=1024, description="Model width; heads must divide it.")
    lengths: Annotated[
        list[Annotated[int, Field(ge=1, le=2048)]], Field(min_length=1, max_length=8)
    ] = Field([64, 128, 256, 512, 1024], description="The N values.")
    heads: int = Field(4, ge=1, le=16, description="Heads h.")
    repeats: int = Field(3, ge=1, le=5, description="Runs per part; the fastest counts.")
    dtype: Literal["float32", "float64"] = "float32"

    @model_validator(mode="after")
    def _work(self):
        madds = sum(4 * n * self.d_model**2 + 2 * n * n * self.d_model for n in self.lengths)
        _budget("lengths", madds * self.repeats, 3e10, "multiply-adds × repeats")
        _budget("lengths", self.heads * max(self.lengths) ** 2, 2**23, "heads × N² score entries")
        return self


_QUERIES: dict[str, type[_LabQuery]] = {
    "variance": VarianceQuery,
    "saturation": SaturationQuery,
    "sweep": SweepQuery,
    "permutation": PermutationQuery,
    "cost": CostQuery,
}
_TITLES = {
    "variance": "Variance of a score, by width",
    "saturation": "Softmax saturation",
    "sweep": "Width sweep",
    "permutation": "Word order",
    "cost": "Cost across N",
}

# One lab at a time: each is bounded, and serialising them bounds the whole server too.
_running = threading.Semaphore(1)
_WAIT_S = 30.0


def _csv(columns: list[str], rows: list[list]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            ["" if x is None or (isinstance(x, float) and not math.isfinite(x)) else x for x in row]
        )
    return out.getvalue()


def _clean(value):
    # Table cells may hold NaN (a lab's "no data"); JSON has no NaN, so it becomes null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _run(name: str, query: _LabQuery):
    if not _running.acquire(timeout=_WAIT_S):
        raise HTTPException(
            503, f"expected the previous lab to finish within {_WAIT_S:.0f} s; try again"
        )
    try:
        result = labs.LABS[name](**query.params())
    finally:
        _running.release()
    columns, rows = result.table()
    if query.download == "csv":
        return Response(
            _csv(columns, rows),
            media_type="text/csv",
            headers={
                "Content-Disposition": f'attachment; filename="attnlab-{name}-seed{query.seed}.csv"'
            },
        )
    if query.download == "json":
        return Response(
            json.dumps(result.as_dict(), indent=2),
            media_type="application/json",
            headers={
                "Content-Disposition": f'attachment; filename="attnlab-{name}-seed{query.seed}.json"'
            },
        )
    return JSONResponse(
        {
            "lab": name,
            "params": query.params(),
            "summary": list(result.summary()),
            "table": {
                "columns": columns,
                "titles": [labs.COLUMN_TITLES.get(c, c) for c in columns],
                "rows": _clean(rows),
            },
            "plot": lab_plot(result).as_dict(),
        }
    )


def _describe(name: str, model: type[_LabQuery]) -> dict:
    schema = model.model_json_schema()
    params = []
    for key, prop in schema["properties"].items():
        if key == "download":
            continue
        item = prop.get("items", {})
        params.append(
            {
                "name": key,
                "type": "list" if prop.get("type") == "array" else prop.get("type", "string"),
                "enum": prop.get("enum"),
                "default": prop.get("default"),
                "min": prop.get("minimum", prop.get("exclusiveMinimum", item.get("minimum"))),
                "max": prop.get("maximum", prop.get("exclusiveMaximum", item.get("maximum"))),
                "description": prop.get("description", ""),
            }
        )
    return {
        "name": name,
        "title": _TITLES[name],
        "doc": schema.get("description", ""),
        "params": params,
    }


@router.get("/labs")
def list_labs() -> list[dict]:
    """Every lab with its parameters: type, default and bounds."""
    return [_describe(name, model) for name, model in _QUERIES.items()]


def _route(name: str, model: type[_LabQuery]) -> None:
    def run(query):
        return _run(name, query)

    # Set as an object, not a string: the model is a closure variable that a postponed
    # annotation (this module uses `from __future__ import annotations`) could not resolve.
    run.__annotations__ = {"query": Annotated[model, Query()]}
    run.__doc__ = (model.__doc__ or "") + (
        " Returns summary, table and plot, or a file with download=csv|json."
    )
    router.add_api_route(
        f"/labs/{name}", run, methods=["GET"], name=f"lab_{name}", summary=_TITLES[name]
    )


for _name, _model in _QUERIES.items():
    _route(_name, _model)


@router.get("/labs/{name}", include_in_schema=False)
def unknown_lab(name: Annotated[str, Path(max_length=100)]):
    raise FieldError(
        "name", f"expected a lab named one of {sorted(_QUERIES)}, but got {name!r} instead"
    )


# -- exercises -----------------------------------------------------------------------------------


class AnswerRequest(BaseModel):
    """A learner's answer: a number for the numeric exercises, words for the written ones."""

    model_config = ConfigDict(extra="forbid")

    answer: (
        Annotated[float, Field(allow_inf_nan=False, ge=-1e12, le=1e12)]
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
    return {name: _clean(getattr(verdict, name)) for name in fields}
