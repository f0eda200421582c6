"""Request models of the JSON API: every input typed and bounded before any array is built.

The bounds come from the figure modules (``MAX_TOKENS``, ``D_K_MIN`` ...), so the page, the API and
the figures agree on one set of limits. A request outside them gets HTTP 422 naming the field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from attnlab.errors import AttnlabError
from attnlab.figures import histogram, multihead, permutation, stepper

__all__ = ["FieldError", "HistogramQuery", "MultiHeadQuery", "PermutationRequest", "TraceRequest"]


class FieldError(AttnlabError):
    """A refusal that names the field it is about; the app answers it with HTTP 422."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


SEED_MAX = 2**32 - 1

# strict: a JSON number only (true or "1" is refused, not quietly read as 1).
Number = Annotated[
    float, Field(strict=True, allow_inf_nan=False, ge=-stepper.MAX_ABS, le=stepper.MAX_ABS)
]
Label = Annotated[str, Field(min_length=1, max_length=stepper.MAX_LABEL)]
Row = Annotated[list[Number], Field(min_length=1, max_length=stepper.MAX_WIDTH)]
MatrixIn = Annotated[list[Row], Field(min_length=1, max_length=stepper.MAX_TOKENS)]
# strict: a JSON integer only (true is refused, not read as 1); in the bodies, true and false are
# the only booleans (StrictBool: 0 and "yes" are refused, not read as false and true).
Index = Annotated[int, Field(strict=True, ge=0, lt=stepper.MAX_TOKENS)]
Seed = Annotated[int, Field(ge=0, le=SEED_MAX, description="Same seed, same numbers.")]


def _example(matrix) -> list[list[float]]:
    return [list(row) for row in matrix]


class TraceRequest(BaseModel):
    """Inputs of the attention stepper. Defaults: the chapter's two-token example (§6.2)."""

    model_config = ConfigDict(extra="forbid")

    q: MatrixIn = Field(
        default_factory=lambda: _example(stepper.EXAMPLE_Q),
        description=f"Queries, N × d_k (N, d_k ≤ {stepper.MAX_TOKENS}).",
    )
    k: MatrixIn = Field(
        default_factory=lambda: _example(stepper.EXAMPLE_K), description="Keys, M × d_k."
    )
    v: MatrixIn = Field(
        default_factory=lambda: _example(stepper.EXAMPLE_V), description="Values, M × d_v."
    )
    causal: StrictBool = Field(True, description="Add the causal mask: query i sees keys 1..i.")
    scaled: StrictBool = Field(True, description="Multiply the scores by 1/√d_k (false: by 1).")
    blocked: list[tuple[Index, Index]] = Field(
        default_factory=list,
        max_length=stepper.MAX_TOKENS**2,
        description="Extra pairs [i, j] (0-based) blocked by hand, on top of the causal mask.",
    )
    grad_output: MatrixIn | None = Field(
        None,
        description="The backward steps' upstream gradient dO, N × d_v like the output; "
        "null: all ones.",
    )
    softcap: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)] | None = Field(
        None, description="A capped head's c (Gemma 2): a step c · tanh(s / c) after scaling."
    )
    sink: Annotated[float, Field(ge=-1000, le=1000, allow_inf_nan=False)] | None = Field(
        None, description="A head's sink logit (gpt-oss): it joins every row's divisor."
    )
    query_labels: list[Label] | None = Field(
        None, max_length=stepper.MAX_TOKENS,
        description="A head's names for its query rows (0-based position and token).",
    )  # fmt: skip
    key_labels: list[Label] | None = Field(
        None, max_length=stepper.MAX_TOKENS,
        description="A head's names for its key rows (0-based position and token).",
    )  # fmt: skip

    @field_validator("q", "k", "v", "grad_output", mode="before")
    @classmethod
    def _entries(cls, value, info):
        """Name a bad entry the way the page does: "Q row 2, column 1" (1-based)."""
        name = {"grad_output": "dO"}.get(info.field_name, info.field_name.upper())
        if not isinstance(value, list):
            return value
        for i, row in enumerate(value):
            for j, x in enumerate(row if isinstance(row, list) else []):
                # A number out of range is named here; a value that is no number at all is left
                # to the type check below, which lists every such entry (q[0][1], 0-based).
                number = isinstance(x, int | float) and not isinstance(x, bool)
                if number and x == x and abs(x) != float("inf") and abs(x) > stepper.MAX_ABS:
                    where = f"{name} row {i + 1}, column {j + 1}"
                    raise FieldError(
                        where, f"expected a number within ±{stepper.MAX_ABS:g}, but got {x!r}"
                    )
        return value

    @field_validator("q", "k", "v", "grad_output")
    @classmethod
    def _rectangular(cls, value: list[list[float]] | None) -> list[list[float]] | None:
        if value is None:
            return value
        widths = [len(row) for row in value]
        if len(set(widths)) != 1:
            raise ValueError(
                f"expected every row to have the same width, but got row widths {widths} instead"
            )
        return value


class HistogramQuery(BaseModel):
    """The √d_k figure's controls."""

    model_config = ConfigDict(extra="forbid")

    d_k: int = Field(
        histogram.D_K_DEFAULT,
        ge=histogram.D_K_MIN,
        le=histogram.D_K_MAX,
        description="Query/key width.",
    )
    scaled: bool = Field(False, description="Divide the scores by √d_k.")
    seed: Seed = 0


class PermutationRequest(BaseModel):
    """The permutation demo's controls."""

    model_config = ConfigDict(extra="forbid")

    order: list[Annotated[int, Field(strict=True)]] | None = Field(
        None,
        max_length=permutation.MAX_WORDS,
        description="order[slot] = index of the token placed there; null keeps the sentence.",
    )
    words: list[str] | None = Field(
        None,
        description=(
            f"Your own sentence, {permutation.MIN_WORDS} to {permutation.MAX_WORDS} words of "
            f"letters (at most {permutation.MAX_WORD_LENGTH} each); null: §6.5's sentence."
        ),
    )

    @field_validator("words", mode="before")
    @classmethod
    def _words(cls, value):
        if value is None:
            return value
        if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
            raise FieldError("words", "expected a list of words (strings)")
        try:
            return permutation.check_words(value)
        except AttnlabError as err:
            raise FieldError("words", str(err)) from None

    positions: StrictBool = Field(False, description="Add sinusoidal position vectors first.")


class MultiHeadQuery(BaseModel):
    """The multi-head figure's control: which word asks."""

    model_config = ConfigDict(extra="forbid")

    query: int = Field(
        3,
        ge=0,
        lt=len(multihead.SENTENCE),
        description="Index of the query word in the sentence (0 = 'The', 7 = 'it').",
    )
