"""Commands for the maths: the worked example, any small trace, and the cost model."""

from __future__ import annotations

import json
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from attnlab.cli._app import app, console, friendly_errors, parse_matrix
from attnlab.core.attention import AttentionTrace, trace_attention
from attnlab.core.cost import breakdown, crossover_length, score_memory_bytes
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.core.masks import Causal
from attnlab.core.trace import format_number as _fmt

_EXPLAIN = {
    "scores": "Each query dotted with each key: entry (i, j) is q_i · k_j.",
    "scaled": "Multiplied by the scale (1/√d_k unless turned off), so the spread does not grow with d_k.",
    "masked": "Blocked pairs become -inf; allowed pairs are unchanged.",
    "weights": "Softmax along each row: non-negative weights that sum to 1, blocked pairs get 0.",
    "output": "Each query's output is its weights times the value rows: a weighted average of values.",
}


def _table(title: str, mat: np.ndarray, row_label: str = "query", col_label: str = "key") -> None:
    # The caption goes on its own line: as a table title it would wrap to the narrow table.
    console.print(f"[bold]{title}[/]", highlight=False)
    table = Table(show_lines=False)
    table.add_column("")
    for j in range(mat.shape[-1]):
        table.add_column(f"{col_label} {j + 1}", justify="right")
    for i, row in enumerate(mat):
        table.add_row(f"{row_label} {i + 1}", *(_fmt(float(x)) for x in row))
    console.print(table)


def _show_trace(trace: AttentionTrace) -> None:
    _table("Queries Q", trace.q, "token", "dim")
    _table("Keys K", trace.k, "token", "dim")
    _table("Values V", trace.v, "token", "dim")
    for name, caption, mat in trace.stages():
        cols = "dim" if name == "output" else "key"
        _table(f"Step {caption}", mat, "query", cols)
        extra = f" (scale = {trace.scale:.6g})" if name == "scaled" else ""
        console.print(f"  [dim]{_EXPLAIN[name]}{extra}[/]\n")


def _trace_json(trace: AttentionTrace) -> str:
    def clean(a):
        return [[None if np.isneginf(x) else float(x) for x in row] for row in np.asarray(a)]

    data = {name: clean(mat) for name, _, mat in trace.stages()}
    data["scale"] = trace.scale
    data["mask"] = None if trace.mask is None else repr(trace.mask)
    return json.dumps(data, indent=2)


@app.command()
@friendly_errors
def example(
    no_mask: Annotated[bool, typer.Option("--no-mask", help="Drop the causal mask.")] = False,
    no_scale: Annotated[bool, typer.Option("--no-scale", help="Skip the 1/√d_k scaling.")] = False,
) -> None:
    """Walk the chapter's two-token worked example (§6.2) step by step."""
    trace = trace_attention(
        EXAMPLE_Q,
        EXAMPLE_K,
        EXAMPLE_V,
        mask=None if no_mask else Causal(),
        scale=1.0 if no_scale else None,
    )
    console.print(
        "[bold]The two-token example of §6.2[/]: "
        f"causal mask {'off' if no_mask else 'on'}, scaling {'off' if no_scale else 'on'}\n"
    )
    _show_trace(trace)


@app.command()
@friendly_errors
def attention(
    q: Annotated[str, typer.Option("--q", help="Queries as a JSON matrix, e.g. '[[3,-3],[1,1]]'.")],
    k: Annotated[str, typer.Option("--k", help="Keys as a JSON matrix (M rows, d_k columns).")],
    v: Annotated[str, typer.Option("--v", help="Values as a JSON matrix (M rows, d_v columns).")],
    causal: Annotated[bool, typer.Option("--causal", help="Apply the causal mask.")] = False,
    no_scale: Annotated[bool, typer.Option("--no-scale", help="Skip the 1/√d_k scaling.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every table as JSON (-inf as null).")
    ] = False,
) -> None:
    """Trace attention on any small case, showing every table."""
    qm, km, vm = parse_matrix("q", q), parse_matrix("k", k), parse_matrix("v", v)
    # Scores that overflow (finite entries, huge products) are refused by the library itself.
    trace = trace_attention(
        qm, km, vm, mask=Causal() if causal else None, scale=1.0 if no_scale else None
    )
    if as_json:
        typer.echo(_trace_json(trace))
    else:
        _show_trace(trace)


@app.command()
@friendly_errors
def cost(
    d_model: Annotated[int, typer.Option("--d-model", min=1, help="Model width d_model.")] = 4096,
    n: Annotated[list[int] | None, typer.Option("--n", min=1, help="Sequence length(s) N.")] = None,
    flops: Annotated[
        bool, typer.Option("--flops", help="Count multiply and add separately.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """The cost model of §6.6: 4·N·d² + 2·N²·d and where the N² term takes over."""
    count = "flops" if flops else "madds"
    lengths = n or [512, 2048, crossover_length(d_model), 4 * crossover_length(d_model)]
    rows = [breakdown(length, d_model, count=count) for length in lengths]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "crossover_length": crossover_length(d_model),
                    "rows": [r.as_dict() for r in rows],
                },
                indent=2,
            )
        )
        return
    unit = "FLOPs" if flops else "multiply-adds"
    table = Table(title=f"MHA cost, d_model={d_model} ({unit})", title_justify="left")
    # One column per N and one row per term of §6.6, so the numbers fit an 80-column terminal.
    table.add_column("term")
    for r in rows:
        table.add_column(f"N={r.n}", justify="right", overflow="fold")
    terms = [
        ("Q,K,V 3Nd²", lambda r: f"{r.projections:.3e}"),
        ("QKᵀ N²d", lambda r: f"{r.scores:.3e}"),
        ("AV N²d", lambda r: f"{r.weighted_sum:.3e}"),
        ("W^O Nd²", lambda r: f"{r.output_projection:.3e}"),
        ("total", lambda r: f"{r.total:.3e}"),
        ("N² share", lambda r: f"{r.quadratic_share:.1%}"),
        ("QKᵀ fp32", lambda r: f"{score_memory_bytes(r.n) / 2**20:,.1f} MiB"),
    ]
    for label, cell in terms:
        table.add_row(label, *(cell(r) for r in rows))
    console.print(table)
    console.print(
        f"The N² terms overtake the linear ones past N = 2·d_model = "
        f"[bold]{crossover_length(d_model)}[/]."
    )
