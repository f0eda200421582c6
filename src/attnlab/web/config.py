"""``GET /api/config``: the constants the page needs, served from the Python that defines them.

The browser declares none of these itself (docs/style.md, "constants live in Python"): the steps
of the forward and backward pass with their names, captions and words (``core/stages.py``), the
worked example, the stepper's limits and its random-example shape, the √d_k slider's range and
the saturation threshold, and the permutation demo's swap all come from the Python that owns
them, so changing one there changes the page too.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from attnlab.core.stages import stages_data
from attnlab.figures import histogram, permutation, stepper
from attnlab.web import inside

__all__ = ["ExplorerConfig", "explorer_config", "router"]

router = APIRouter(prefix="/api", tags=["figures"])


class Example(BaseModel):
    """The chapter's two-token worked example (§6.2)."""

    q: list[list[float]]
    k: list[list[float]]
    v: list[list[float]]


class StepperConfig(BaseModel):
    example: Example
    max_tokens: int = Field(description="Most rows of Q, K and V.")
    max_width: int = Field(description="Largest d_k and d_v.")
    max_abs: float = Field(description="Largest |entry| of Q, K and V.")
    random_tokens: int = Field(description="Tokens of the page's random example.")
    random_width: int = Field(description="Width of the page's random example.")
    random_range: int = Field(description="Random entries are whole numbers in ±random_range.")
    heatmap_columns: int = Field(
        description="Presenting, a table wider than this is drawn as a labelled heatmap."
    )


class HistogramConfig(BaseModel):
    d_k_min: int
    d_k_max: int
    d_k_step: int = Field(description="The slider's step.")
    d_k_default: int = Field(description="The width the page starts on.")
    keys: int = Field(description="Keys per softmax trial.")
    trials: int
    threshold: float = Field(description="A trial saturates when its largest weight passes this.")


class PermutationConfig(BaseModel):
    sentence: list[str]
    swap: list[int] = Field(description="The order of the swap button: order[slot] = token.")
    min_words: int = Field(description="Fewest words of your own sentence.")
    max_words: int = Field(description="Most words of your own sentence.")
    max_word_length: int = Field(description="Most letters a word.")


class StageConfig(BaseModel):
    """One step of the forward or backward pass, as ``core/stages.py`` declares it."""

    name: str = Field(description="The trace's table: scores, ..., grad_k.")
    symbol: str
    title: str
    formula: str
    caption: str = Field(description="One line: the step, its formula and its shape.")
    explain: str
    rows: str = Field(description="What a row of the table is: query, key or dim.")
    cols: str = Field(description="What a column of the table is: query, key or dim.")
    phase: str = Field(description="forward or backward.")


class InsideConfig(BaseModel):
    """The real-model mode's inside views: the tokens they take, and Generate's first and
    largest request."""

    new_default: int
    new_max: int
    max_tokens: int


class ExplorerConfig(BaseModel):
    """Everything the page would otherwise have to declare as a literal."""

    stages: list[StageConfig]
    stepper: StepperConfig
    histogram: HistogramConfig
    permutation: PermutationConfig
    inside: InsideConfig


def _read(model: type[BaseModel], module, **given) -> BaseModel:
    """``model`` filled from ``module``: each field is the module's constant of that name in
    capitals (``d_k_min`` is ``histogram.D_K_MIN``), read now, so the route always serves the
    current value; tuples become lists. ``given`` fills the fields that are not constants."""
    values = {
        name: getattr(module, name.upper()) for name in model.model_fields if name not in given
    }
    return model(**{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}, **given)


def explorer_config() -> ExplorerConfig:
    """The page's constants, read from the modules that own them."""
    example = Example(
        q=[list(r) for r in stepper.EXAMPLE_Q],
        k=[list(r) for r in stepper.EXAMPLE_K],
        v=[list(r) for r in stepper.EXAMPLE_V],
    )
    return ExplorerConfig(
        stages=[StageConfig(**s) for s in stages_data()],
        stepper=_read(StepperConfig, stepper, example=example),
        histogram=_read(HistogramConfig, histogram),
        permutation=_read(PermutationConfig, permutation),
        inside=InsideConfig(
            new_default=inside.NEW_DEFAULT, new_max=inside.MAX_NEW, max_tokens=inside.MAX_TOKENS
        ),
    )


@router.get("/config", response_model=ExplorerConfig)
def config() -> ExplorerConfig:
    """The page's constants: the steps of the pass, worked example, stepper limits, slider range, threshold, swap."""
    return explorer_config()
