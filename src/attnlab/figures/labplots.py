"""What to plot for each lab of ``attnlab.labs``: series read from the lab's own result.

A ``LabPlot`` is data (x values, named y series, axis titles); the page draws it with plotly.js.
Nothing is recomputed here: every number is a field or a table column of the lab's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.figures._data import as_dict

__all__ = ["LabPlot", "Series", "lab_plot"]


@dataclass(frozen=True)
class Series:
    name: str
    y: list[float | None]
    error: list[float | None] | None = None  # ± one standard error, when the lab reports it
    dash: bool = False  # a reference (model or theory), drawn dashed


@dataclass(frozen=True)
class LabPlot:
    title: str
    kind: str  # "line" | "bar"
    x: list
    x_label: str
    y_label: str
    series: list[Series]
    log_x: bool = False
    log_y: bool = False
    words: list[str] = field(default_factory=list)  # the lab's own summary sentences

    def as_dict(self) -> dict:
        return as_dict(self)


def _columns(result) -> dict[str, list]:
    columns, rows = result.table()
    return {name: [row[i] for row in rows] for i, name in enumerate(columns)}


def _variance(r) -> LabPlot:
    c = _columns(r)
    return LabPlot(
        title=f"Var(q·k)/d_k and Var(q·k/√d_k) over {r.draws:,} draws per width",
        kind="line",
        x=c["width"],
        x_label="d_k",
        y_label="variance ratio",
        series=[
            Series("Var(q·k) / d_k", c["var_ratio"], c["var_ratio_se"]),
            Series("Var(q·k / √d_k)", c["scaled_var"], c["scaled_var_se"]),
            Series("the proof: 1", [1.0] * len(c["width"]), dash=True),
        ],
        log_x=True,
    )


def _saturation(r) -> LabPlot:
    c = _columns(r)
    cases = [i for i, case in enumerate(c["case"]) if case in ("unscaled", "scaled")]
    return LabPlot(
        title=f"Share of {r.trials} trials with p_max > {r.threshold} (d_k = {r.d_k}, {r.keys} keys)",
        kind="bar",
        x=[c["case"][i] for i in cases],
        x_label="scores",
        y_label="share of trials",
        series=[
            Series(
                "saturated share", [c["share"][i] for i in cases], [c["share_se"][i] for i in cases]
            )
        ],
    )


def _sweep(r) -> LabPlot:
    c = _columns(r)
    return LabPlot(
        title=f"Saturated share of {r.trials} trials over {r.keys} keys, by width",
        kind="line",
        x=c["width"],
        x_label="d_k",
        y_label="share of trials with p_max > threshold",
        series=[
            Series("unscaled", c["unscaled_share"]),
            Series("scaled by 1/√d_k", c["scaled_share"]),
        ],
        log_x=True,
    )


def _permutation(r) -> LabPlot:
    c = _columns(r)
    return LabPlot(
        title=f"How far each token's output moves: “{' '.join(r.tokens)}” → “{' '.join(r.shuffled_tokens)}”",
        kind="bar",
        x=[f"{t} ({p})" for t, p in zip(c["token"], c["shuffled_position"], strict=True)],
        x_label="token (its new position)",
        y_label="largest |change| of its output (log scale)",
        series=[
            Series("without positions", c["change_without_positions"]),
            Series("with position vectors", c["change_with_positions"]),
        ],
        log_y=True,
    )


def _cost(r) -> LabPlot:
    c = _columns(r)
    return LabPlot(
        title=f"Share of time in the attention core, d_model = {r.d_model} (model crossover N = {r.model_crossover})",
        kind="line",
        x=c["n"],
        x_label="N (tokens)",
        y_label="share of the time",
        series=[
            Series("measured: core with softmax", c["measured_share"]),
            Series("measured: Q Kᵀ and A V only", c["matmul_share"]),
            Series("cost model 2N²d / (4Nd² + 2N²d)", c["model_share"], dash=True),
        ],
        log_x=True,
    )


_PLOTS = {
    "variance": _variance,
    "saturation": _saturation,
    "sweep": _sweep,
    "permutation": _permutation,
    "cost": _cost,
}


def lab_plot(result) -> LabPlot:
    """The plot for a lab result (its ``lab`` attribute picks the layout)."""
    plot = _PLOTS[result.lab](result)
    return LabPlot(**{**plot.__dict__, "words": list(result.summary())})
