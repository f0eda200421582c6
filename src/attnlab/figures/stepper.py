"""Figure ``attention-stepper``: every table of one attention call, step by step (§6.2).

Shape legend: N query rows, M key rows, d_k query/key width, d_v value width (N, M <= 32 and
d_k, d_v <= 16: one query of any head of the shipped induction model fits, keys and all).

Every number comes from ``trace_attention``. A query row that the mask leaves with no key gets
an error message instead of weights (attnlab refuses the 0/0 = NaN that softmax would give).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlab import trace_attention
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.core.numbers import MASKED, format_number
from attnlab.core.softmax_working import SoftmaxRow, softmax_working
from attnlab.core.stages import BACKWARD, FORWARD, INPUTS, Stage
from attnlab.errors import AttnlabError, FullyMaskedRowError
from attnlab.figures._data import as_dict, matrix, vector
from attnlab.figures._steps import Step, Table, float_matrix
from attnlab.figures.stepper_backward import backward_steps, grad_output_matrix, stage_step
from attnlab.figures.stepper_variants import (
    check_variants,
    sink_share,
    variant_steps,
    variant_table,
    variant_values,
)
from attnlab.masks import Causal, Dense, Mask

__all__ = [
    "EXAMPLE_K",
    "EXAMPLE_Q",
    "EXAMPLE_V",
    "HEATMAP_COLUMNS",
    "MAX_ABS",
    "MAX_LABEL",
    "MAX_TOKENS",
    "MAX_WIDTH",
    "RANDOM_RANGE",
    "RANDOM_TOKENS",
    "RANDOM_WIDTH",
    "SoftmaxRow",
    "Step",
    "StepperFigure",
    "Table",
    "build_stepper",
]

FIGURE_ID = "attention-stepper"
# What a query row that allows no key leaves blank: every table with one row per query, after
# the mask (the scores and the upstream gradient do not depend on the mask).
_QUERY_ROWS = tuple(s.name for s in FORWARD[2:] + BACKWARD[1:] if s.rows == "query")

# Sized for a learned head (pretrained("induction") has context 32 and heads of width 64 / 4)
# and for one query row of a real model's head: GPT-2, Llama, Mistral, Qwen2 and gpt-oss use
# widths 64 or 128, Gemma 2 uses 256.
MAX_TOKENS = 32  # rows of Q, K and V
MAX_WIDTH = 256  # d_k and d_v
MAX_ABS = 1000.0  # keeps every score finite: 256 * 1000 * 1000 is far from overflow
MAX_LABEL = 40  # characters of a head's row label ("12 ␣cat"): a position and one token
# Presenting, a table wider than this many columns is drawn as a heatmap (its numbers would be
# too small to read from the back of a room); the page reads it from GET /api/config.
HEATMAP_COLUMNS = 8
# The page's "Random" button: this many tokens of this width, whole entries in ±RANDOM_RANGE,
# small enough to check a dot product by hand.
RANDOM_TOKENS, RANDOM_WIDTH, RANDOM_RANGE = 4, 3, 2


@dataclass(frozen=True)
class StepperFigure:
    figure: str
    causal: bool
    scaled: bool
    scale: float
    d_k: int
    tables: dict[str, Table]
    steps: list[Step]
    row_errors: list[str | None]  # per query row: why it has no weights, or None
    blocked: list[list[int]]  # the pairs (i, j) blocked by hand
    softmax: list[SoftmaxRow | None]  # per query row, the softmax working (None: empty row)
    # per query row, δ_i = Σ_j A_ij dA_ij = dO_i · O_i, the backward softmax step's subtrahend
    grad_delta: list[float | None]
    softcap: float | None = None  # c of a capped head (Gemma 2), else None
    sink: float | None = None  # a head's sink logit (gpt-oss), else None

    def as_dict(self) -> dict:
        return as_dict(self)


def _steps(scale: float, scaled: bool, masked: bool) -> list[Step]:
    """Steps 0-5, each the stage's own words (``core/stages.py``) and what this case adds."""
    scale_text = (
        f"Here the scale is 1/√d_k = {format_number(scale)}."
        if scaled
        else "Here scaling is switched off: the scale is 1, so the scores pass through unchanged."
    )
    mask_text = (
        "" if masked else "Here there is no mask: M is all zeros, so every query may see every key."
    )
    inputs = Step(
        INPUTS.name, INPUTS.title, INPUTS.formula, INPUTS.explain, ["q", "k", "v"], "", ""
    )
    scores, scaled_, masked_, weights, output = FORWARD
    return [
        inputs,
        stage_step(scores, ["q", "k"], "qk"),
        stage_step(scaled_, ["scores"], "cell", extra=scale_text, scaled=scaled),
        stage_step(masked_, ["scaled", "mask"], "cell", extra=mask_text),
        stage_step(weights, ["masked"], "row"),
        stage_step(output, ["weights", "v"], "av"),
    ]


def _mask(causal: bool, blocked: Sequence[Sequence[int]], n: int, m: int) -> Mask | None:
    parts: list[Mask] = [Causal()] if causal else []
    if blocked:
        allowed = np.ones((n, m), dtype=bool)  # (N, M)
        for index, pair in enumerate(blocked):
            if len(pair) != 2 or not (0 <= pair[0] < n and 0 <= pair[1] < m):
                raise AttnlabError(
                    f"expected blocked[{index}] to be a pair [i, j] with 0 <= i < {n} and "
                    f"0 <= j < {m}, but got {list(pair)!r} instead"
                )
            allowed[pair[0], pair[1]] = False
        parts.append(Dense(allowed))
    return sum(parts[1:], parts[0]) if parts else None


def _culprit(i: int, m: int, causal: bool, blocked: Sequence[Sequence[int]]) -> str:
    """Which part of the mask empties row ``i``, part by part as ``Mask.blame`` does: the cells
    blocked by hand alone, or only the causal mask and the hand-blocked cells together. (The
    causal mask alone never empties a row: query i always sees key 1.)"""
    hand = {int(j) for a, j in blocked if int(a) == i}
    if len(hand) >= m:
        return "by hand"
    if causal:
        return "by the causal mask together with the cells blocked by hand"
    return "by hand"  # pragma: no cover - without the causal mask only the hand blocks


def _working(masked: list[list[float | str]], sink: float | None) -> list[SoftmaxRow | None]:
    """The softmax step written out for each row: exponentials, their sum, the division, gap.
    With a sink, its exp is each row's last entry and joins the sum; the gap stays the keys'."""
    if sink is None:
        return [softmax_working(row) for row in masked]
    out = []
    for row in masked:
        worked, keys = softmax_working([*row, sink]), softmax_working(row)
        gap = {"gap": None, "gap_ratio": None} if keys is None else {
            "gap": keys.gap, "gap_ratio": keys.gap_ratio}  # fmt: skip
        out.append(None if worked is None else dataclasses.replace(worked, **gap))
    return out


def _delta(trace) -> list[float]:
    return vector((trace.weights * trace.grad_weights).sum(axis=-1))  # (N,)


def _partial(q, k, v, mask: Mask, scale, g, err: FullyMaskedRowError, culprit, softcap, sink):
    """The tables when some query rows allow no key: those rows get a message, not NaN.

    Attention treats each query row on its own, so the other rows are traced without them; an
    empty row has no output, so it sends no gradient back, and dK and dV sum the other rows.
    """
    n, m = q.shape[0], k.shape[0]
    empty = sorted({int(row[-1]) for row in err.rows})
    # scores, scaled and capped need no mask
    full = trace_attention(q, k, v, None, scale=scale, softcap=softcap)
    tables = {"scores": matrix(full.scores), "scaled": matrix(full.scaled)}
    if softcap is not None:
        tables["capped"] = matrix(full.capped)
    share: list[float | None] = [None] * n  # the sink's share, for the rows that have weights
    tables["grad_output"] = matrix(g)
    widths = {"output": v.shape[1], "grad_q": q.shape[1]}
    for stage in _QUERY_ROWS:  # an empty row is all -inf, then has nothing
        blank = MASKED if stage == "masked" else None
        tables[stage] = [[blank] * widths.get(stage, m) for _ in range(n)]
    for stage, width in (("grad_v", v.shape[1]), ("grad_k", k.shape[1])):
        tables[stage] = [[None] * width for _ in range(m)]
    delta: list[float | None] = [None] * n
    open_rows = [i for i in range(n) if i not in empty]
    if open_rows:
        allowed = mask.allowed(n, m)[open_rows]  # (N_open, M)
        part = trace_attention(q[open_rows], k, v, Dense(allowed), scale=scale,
                               grad_output=g[open_rows], softcap=softcap, sinks=sink)  # fmt: skip
        if sink is not None:
            for row, value in zip(open_rows, sink_share(part, sink).tolist(), strict=True):
                share[row] = value
        for stage in _QUERY_ROWS:
            for row, values in zip(open_rows, matrix(getattr(part, stage)), strict=True):
                tables[stage][row] = values
        tables["grad_v"], tables["grad_k"] = matrix(part.grad_v), matrix(part.grad_k)
        for row, value in zip(open_rows, _delta(part), strict=True):
            delta[row] = value
    row_errors: list[str | None] = [None] * n
    for i in empty:
        row_errors[i] = (
            f"query {i + 1} may attend to no key: every key of its row is blocked {culprit(i)}. "
            "Softmax of a row of −∞ is 0/0 = NaN, so this row has no weights, no output and "
            "no gradient"
        )
    if sink is not None:
        tables["sink"] = [[sink, x] for x in share]
    return tables, row_errors, full.scale, delta


def _check_size(name: str, arr: np.ndarray) -> None:
    if arr.ndim != 2:
        raise AttnlabError(
            f"expected {name} to be a matrix (rows, width), but got shape {arr.shape}"
        )
    rows, width = arr.shape
    if not (1 <= rows <= MAX_TOKENS and 1 <= width <= MAX_WIDTH):
        raise AttnlabError(
            f"expected {name} to have 1 to {MAX_TOKENS} rows and 1 to {MAX_WIDTH} columns, "
            f"but got {name}.shape={arr.shape} instead"
        )
    if (
        np.issubdtype(arr.dtype, np.number)
        and np.isfinite(arr).all()
        and (abs(arr) > MAX_ABS).any()
    ):
        raise AttnlabError(
            f"expected every entry of {name} within ±{MAX_ABS:g}, but got {abs(arr).max():g}"
        )


def _labels(prefix: str, count: int) -> list[str]:
    return [f"{prefix} {i + 1}" for i in range(count)]


def _tables(q, k, v, additive, tables: dict, named: dict | None) -> dict[str, Table]:
    """The inputs, the mask and every step's table, labelled: rows and columns by what they are
    (the stage's ``rows`` and ``cols``), the caption by the stage's title; then the variants'
    tables where the call has them (capped, sink). ``named``: a head's own labels of its query
    rows and key rows (position and token), else "query 1", "key 1", "token 1" ..."""
    n, m = q.shape[0], k.shape[0]
    labels = {"query": _labels("query", n), "key": _labels("key", m)}
    tokens = _labels("token", m)
    if named:
        labels = {"query": list(named["query"]), "key": list(named["key"])}
        tokens = labels["key"]
    widths = {"grad_q": q.shape[1], "grad_k": k.shape[1]}  # the others' dims are d_v wide
    out = {
        "q": Table("q", "Queries Q", labels["query"], _labels("dim", q.shape[1]), matrix(q)),
        "k": Table("k", "Keys K", tokens, _labels("dim", k.shape[1]), matrix(k)),
        "v": Table("v", "Values V", tokens, _labels("dim", v.shape[1]), matrix(v)),
        "mask": Table("mask", "Mask M", labels["query"], labels["key"], matrix(additive)),
    }
    for stage in FORWARD + BACKWARD:
        rows = labels["query"] if stage.rows == "query" else tokens
        dims = _labels("dim", widths.get(stage.name, v.shape[1]))
        cols = dims if stage.cols == "dim" else labels["key"]
        out[stage.name] = Table(stage.name, _label(stage), rows, cols, tables[stage.name])
    for name in ("capped", "sink"):
        if name in tables:
            out[name] = variant_table(name, tables[name], labels["query"], labels["key"])
    if "capped" in tables:  # the mask is added to the capped scores, not the scaled ones
        out["masked"] = dataclasses.replace(out["masked"], label="Mask added: capped + M")
    return out


def _named(query_labels, key_labels, n: int, m: int) -> dict | None:
    """The head's labels, checked: both given, one per row, short strings; or None."""
    if query_labels is None and key_labels is None:
        return None
    for name, given, count in (("query_labels", query_labels, n), ("key_labels", key_labels, m)):
        if given is None or isinstance(given, str) or len(given) != count:
            got = "none" if given is None else f"{len(given)}"
            raise AttnlabError(f"expected {name} to have one label per row ({count}), but got "
                               f"{got} instead")  # fmt: skip
        if not all(isinstance(x, str) and 0 < len(x) <= MAX_LABEL for x in given):
            raise AttnlabError(f"expected every entry of {name} to be text of 1 to {MAX_LABEL} "
                               "characters, but got one that is not")  # fmt: skip
    return {"query": list(query_labels), "key": list(key_labels)}


def _label(stage: Stage) -> str:
    """A table's caption on the page: the stage's title and formula."""
    return f"{stage.title}: {stage.formula}"


def build_stepper(
    q=EXAMPLE_Q,
    k=EXAMPLE_K,
    v=EXAMPLE_V,
    *,
    causal: bool = True,
    scaled: bool = True,
    blocked: Sequence[Sequence[int]] = (),
    grad_output=None,
    softcap: float | None = None,
    sink: float | None = None,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
) -> StepperFigure:
    """Every table of attention on a small case, for the stepper.

    Args:
        q: queries (N, d_k).  k: keys (M, d_k).  v: values (M, d_v). At most 8 rows and 8
            columns each, entries within ±1000. Defaults: the chapter's two-token example.
        causal: add the causal mask (query i sees keys 1..i).
        scaled: multiply the scores by 1/√d_k (False: by 1).
        blocked: extra pairs [i, j] (0-based) to block by hand, added to the causal mask.
        grad_output: the upstream gradient dO for the backward steps, (N, d_v), entries
            within ±1000; None: all ones (the loss is the sum of the outputs).
        softcap: Gemma 2's cap c: a step c · tanh(s / c) after scaling, the mask added to it
            (the backward steps are left out then; see ``figures/stepper_variants.py``).
        sink: gpt-oss's sink logit of the head: it joins every row's softmax divisor, and its
            share is shown as its own table beside the softmax step.
        query_labels, key_labels: a real or learned head's own names for its rows and keys
            (its 0-based positions and token strings), one per row of q and of k; both or none.

    >>> fig = build_stepper()
    >>> [round(x, 3) for x in fig.tables["weights"].values[1]]
    [0.196, 0.804]
    >>> [round(x, 3) for x in fig.tables["output"].values[1]]
    [0.804, 1.413]
    >>> [round(x, 3) for x in fig.tables["grad_scores"].values[1]]  # rows of dS add up to 0
    [-0.629, 0.629]
    """
    arrays = {}
    for name, value in (("q", q), ("k", k), ("v", v)):
        arr = float_matrix(name, value)
        _check_size(name, arr)
        arrays[name] = arr
    q, k, v = arrays["q"], arrays["k"], arrays["v"]  # (N, d_k), (M, d_k), (M, d_v)
    softcap, sink = check_variants(softcap, sink)
    named = _named(query_labels, key_labels, q.shape[0], k.shape[0])
    n, m = q.shape[0], k.shape[0]
    d_v = v.shape[1]
    fits = m == v.shape[0]  # else trace_attention names the mismatch first
    mask = _mask(causal, blocked, n, m) if fits else None
    scale = None if scaled else 1.0
    g = grad_output_matrix(grad_output if fits else None, n, d_v, MAX_ABS)  # (N, d_v)

    try:
        trace = trace_attention(q, k, v, mask, scale=scale, grad_output=g, softcap=softcap,
                                sinks=sink)  # fmt: skip
        tables = {s.name: matrix(getattr(trace, s.name)) for s in FORWARD + BACKWARD}
        tables.update(variant_values(trace, softcap, sink))
        row_errors: list[str | None] = [None] * n
        used_scale, delta = trace.scale, _delta(trace)
    except FullyMaskedRowError as err:

        def culprit(i: int) -> str:
            return _culprit(i, m, causal, blocked)

        tables, row_errors, used_scale, delta = _partial(q, k, v, mask, scale, g, err, culprit,
                                                         softcap, sink)  # fmt: skip
    additive = np.zeros((n, m)) if mask is None else mask.additive(n, m)  # (N, M), 0 / -inf
    out = _tables(q, k, v, additive, tables, named)
    forward = variant_steps(_steps(used_scale, scaled, mask is not None), softcap, sink)
    backward = variant_steps(backward_steps(used_scale, scaled, ones=grad_output is None),
                             softcap, sink)  # fmt: skip
    return StepperFigure(
        figure=FIGURE_ID,
        causal=causal,
        scaled=scaled,
        scale=used_scale,
        d_k=int(q.shape[1]),
        tables=out,
        steps=forward + backward,
        row_errors=row_errors,
        blocked=[[int(i), int(j)] for i, j in blocked],
        softmax=_working(tables["masked"], sink),
        grad_delta=delta,
        softcap=softcap,
        sink=sink,
    )
