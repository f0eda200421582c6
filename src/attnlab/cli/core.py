"""Commands for the maths: the worked example, any small trace, and the cost model."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

import attnlab
from attnlab.cli._app import app, console, fail, friendly_errors, load_matrix, to_floats
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.core.numbers import MASKED
from attnlab.core.numbers import format_number as _fmt
from attnlab.core.softmax_working import softmax_working
from attnlab.core.stages import BACKWARD

# §6.2 by hand: a printed table is read cell by cell. Rich lays out a 16-column table in about a
# second on the project's 2-core machine (32 columns take 4 s, 64 take 10 s, each folded to a few
# characters per cell on an 80-column terminal). --json takes larger cases, up to JSON_MAX_CELLS
# per table: 256 x 256 is four 2 MiB float64 tables and 5 MB of JSON, printed in 1.5 s (its
# float-to-text conversion is the time); 30,000 x 30,000 would need 27 GiB. Sizes are checked
# from the parsed JSON's lengths, before any entry is converted or any array is built.
PRINT_MAX = 16  # rows and columns of each printed matrix: N, M, d_k, d_v
JSON_MAX_CELLS = 2**16  # cells of each table with --json: N x M and N x d_v
TRACE_TABLES = 4  # N x M tables a trace holds: scores, scaled, masked, weights

# The cost model's options: wide enough for any model ever trained, and small enough that every
# count stays an exact integer that also fits a float (printing it as 1.234e+21).
MAX_N = 10**9
MAX_D_MODEL = 10**6
MAX_LENGTHS = 8  # --n values in the printed table (one column each); any number up to
MAX_LENGTHS_JSON = 1000  # ... this many with --json


def _table(title: str, mat: np.ndarray, row_label: str = "query", col_label: str = "key") -> None:
    # The caption goes on its own line: as a table title it would wrap to the narrow table.
    console.print(f"[bold]{escape(title)}[/]", highlight=False, soft_wrap=True)  # never cut
    table = Table(show_lines=False)
    table.add_column("")
    for j in range(mat.shape[-1]):
        table.add_column(f"{col_label} {j + 1}", justify="right")
    for i, row in enumerate(mat):
        table.add_row(f"{row_label} {i + 1}", *(_fmt(float(x)) for x in row))
    console.print(table)


def show_trace(trace: attnlab.AttentionTrace) -> None:
    _table("Queries Q", trace.q, "token", "dim")
    _table("Keys K", trace.k, "token", "dim")
    _table("Values V", trace.v, "token", "dim")
    for number, (stage, mat) in enumerate(trace.steps(), 1):
        if stage is BACKWARD[0]:
            console.print("[bold]Backward: the chain rule, from the output back to Q, K, V[/]\n")
        _table(f"Step {number}. {stage.caption}", mat, stage.rows, stage.cols)
        if stage.name == "scaled":
            console.print(f"  (scale = {_fmt(trace.scale)})", highlight=False)
        console.print(f"  [dim]{escape(stage.explain)}[/]\n")


def trace_json(trace: attnlab.AttentionTrace) -> str:
    """Every table as JSON, one matrix row per line, a blocked pair as "-inf" (as the web API
    writes it, ``core/numbers.py``), never null, which means no value.

    Each row goes through the C encoder: ``json.dumps(indent=2)`` takes the pure-Python one, and
    a number per line, which made 256 x 256 take 5 s.
    """

    def rows(mat) -> str:
        cells = np.asarray(mat).astype(object)
        cells[np.isneginf(np.asarray(mat))] = MASKED
        return ",\n    ".join(json.dumps(r, allow_nan=False) for r in cells.tolist())

    fields = [f'  "{name}": [\n    {rows(mat)}\n  ]' for name, _, mat in trace.stages()]
    fields.append(f'  "scale": {json.dumps(trace.scale)}')
    fields.append(f'  "mask": {json.dumps(None if trace.mask is None else repr(trace.mask))}')
    return "{\n" + ",\n".join(fields) + "\n}"


GradOutput = Annotated[
    str | None,
    typer.Option(
        "--grad-output",
        help="The upstream gradient dO as a JSON matrix (N rows, d_v columns); implies "
        "--backward. Default with --backward: all ones.",
    ),
]


def _upstream(backward: bool, text: str | None, n: int, d_v: int) -> list | None:
    """dO for a traced backward pass: the given matrix, ones, or None for no backward pass."""
    if text is None:
        return [[1.0] * d_v for _ in range(n)] if backward else None
    rows = to_floats("grad-output", load_matrix("grad-output", text))
    if (len(rows), len(rows[0])) != (n, d_v):
        raise fail(
            f"--grad-output: expected the output's shape (N, d_v) = ({n}, {d_v}), but got "
            f"({len(rows)}, {len(rows[0])}) instead"
        )
    return rows


@app.command()
@friendly_errors
def example(
    no_mask: Annotated[bool, typer.Option("--no-mask", help="Drop the causal mask.")] = False,
    no_scale: Annotated[bool, typer.Option("--no-scale", help="Skip the 1/√d_k scaling.")] = False,
    backward: Annotated[
        bool, typer.Option("--backward", help="Also trace the gradients (dO all ones).")
    ] = False,
    grad_output: GradOutput = None,
) -> None:
    """Walk the chapter's two-token worked example (§6.2) step by step."""
    trace = attnlab.trace_attention(
        EXAMPLE_Q,
        EXAMPLE_K,
        EXAMPLE_V,
        mask=None if no_mask else attnlab.masks.Causal(),
        scale=1.0 if no_scale else None,
        grad_output=_upstream(backward, grad_output, len(EXAMPLE_Q), len(EXAMPLE_V[0])),
    )
    console.print(
        "[bold]The two-token example of §6.2[/]: "
        f"causal mask {'off' if no_mask else 'on'}, scaling {'off' if no_scale else 'on'}\n"
    )
    show_trace(trace)
    _show_softmax_working(trace)


def _show_softmax_working(trace: attnlab.AttentionTrace) -> None:
    """§6.2 step 4 written out: each row's exponentials, their sum, the division, and the gap.

    The exponentials are of the masked scores as they stand (e^0 = 1, e^-inf = 0), as the chapter
    writes them by hand, worked by ``core/softmax_working.py`` as the stepper figure works them
    (a row whose top score lies past ±EXP_LIMIT is shifted by it first); the weights printed are the library's own (trace.weights), which equal
    the division shown. §6.3's hinge: a gap g between two scores makes one weight e^g times the
    other, so each row's gap between its two largest scores is printed with e^gap.
    """
    console.print("[bold]The softmax, worked row by row[/]", highlight=False)
    for i, (scaled, masked, weights) in enumerate(
        zip(trace.scaled, trace.masked, trace.weights, strict=True)
    ):
        work = softmax_working(masked)  # the trace raised already for a row with no key
        exps = [0.0 if e is None else e for e in work.exps]  # (M,): e^-inf = 0
        # Scores past ±EXP_LIMIT are shifted by the row's top one, so e^s stays printable.
        sign = "-" if work.shift > 0 else "+"
        shift = f" {sign} {_fmt(abs(work.shift))}" if work.shift else ""
        cells = ", ".join(
            f"e^{_fmt(float(s))}{shift} = {_fmt(e)}" for s, e in zip(masked, exps, strict=True)
        )
        console.print(f"  query {i + 1}: {cells}", highlight=False)
        shares = ", ".join(f"{_fmt(e)}/{_fmt(work.total)}" for e in exps)
        ws = ", ".join(_fmt(float(w)) for w in weights)
        console.print(f"    sum {_fmt(work.total)}; weights {shares} = [{ws}]", highlight=False)
        if work.gap is not None:
            gap = work.gap
            console.print(
                f"    top two differ by {gap:.3f}: one weight "
                f"e^{gap:.3f} = {_times(gap)} times the other",
                highlight=False,
            )
        else:
            top = np.sort(scaled)[::-1]  # (M,) the scores before the mask
            gap = float(top[0] - top[1]) if top.size >= 2 else 0.0
            console.print("    one allowed key, so it takes all the weight", highlight=False)
            if top.size >= 2:
                console.print(
                    f"    unmasked: gap {gap:.3f}, one weight "
                    f"e^{gap:.3f} = {_times(gap)} times the other",
                    highlight=False,
                )
    console.print()


def _times(gap: float) -> str:
    """e^gap as a reader says it: 4.113, or 337,028 with thousands separated."""
    ratio = math.exp(gap)
    return f"{ratio:,.0f}" if ratio >= 1000 else f"{ratio:.4g}"


def _check_size(q: list, k: list, v: list, as_json: bool) -> None:
    """Refuse, before any entry is converted, a trace too large to print or to hold."""
    if not as_json:
        for name, rows in (("q", q), ("k", k), ("v", v)):
            if len(rows) > PRINT_MAX or len(rows[0]) > PRINT_MAX:
                raise fail(
                    f"--{name}: expected at most {PRINT_MAX} rows and {PRINT_MAX} columns to "
                    f"print (add --json for larger cases), but got {len(rows):,} rows and "
                    f"{len(rows[0]):,} columns instead"
                )
        return
    n, m, d_v = len(q), len(k), len(v[0])
    for names, shape in (("--q, --k", (n, m)), ("--q, --v", (n, d_v))):
        if shape[0] * shape[1] > JSON_MAX_CELLS:
            side = math.isqrt(JSON_MAX_CELLS)
            need = TRACE_TABLES * attnlab.cost.score_memory_bytes(n, m, dtype=np.float64)
            raise fail(
                f"{names}: expected tables of at most {JSON_MAX_CELLS:,} cells "
                f"({side} x {side}, say), but got {shape[0]:,} x {shape[1]:,} instead "
                f"(N = {n:,} queries, M = {m:,} keys, d_v = {d_v:,}: "
                f"{need / 2**20:,.1f} MiB of N x M tables); "
                "attnlab.attention(method='blockwise') computes long sequences without them"
            )


@app.command()
@friendly_errors
def attention(
    q: Annotated[
        str,
        typer.Option(
            "--q",
            help="Queries as a JSON matrix, e.g. '[[3,-3],[1,1]]'. Printed tables take up to "
            f"{PRINT_MAX} rows and columns per matrix (N, M, d_k, d_v).",
        ),
    ],
    k: Annotated[str, typer.Option("--k", help="Keys as a JSON matrix (M rows, d_k columns).")],
    v: Annotated[str, typer.Option("--v", help="Values as a JSON matrix (M rows, d_v columns).")],
    causal: Annotated[bool, typer.Option("--causal", help="Apply the causal mask.")] = False,
    no_scale: Annotated[bool, typer.Option("--no-scale", help="Skip the 1/√d_k scaling.")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print every table as JSON (-inf as null); takes tables of up to "
            f"{JSON_MAX_CELLS:,} cells.",
        ),
    ] = False,
    backward: Annotated[
        bool, typer.Option("--backward", help="Also trace the gradients (dO all ones).")
    ] = False,
    grad_output: GradOutput = None,
) -> None:
    """Trace attention on any small case, showing every table (and the gradients' with
    --backward)."""
    raw = {name: load_matrix(name, text) for name, text in (("q", q), ("k", k), ("v", v))}
    _check_size(raw["q"], raw["k"], raw["v"], as_json)
    qm, km, vm = (to_floats(name, rows) for name, rows in raw.items())
    # Scores that overflow (finite entries, huge products) are refused by the library itself.
    trace = attnlab.trace_attention(
        qm,
        km,
        vm,
        mask=attnlab.masks.Causal() if causal else None,
        scale=1.0 if no_scale else None,
        grad_output=_upstream(backward, grad_output, len(qm), len(vm[0])),
    )
    if as_json:
        typer.echo(trace_json(trace))
    else:
        show_trace(trace)


@app.command()
@friendly_errors
def cost(
    d_model: Annotated[
        int, typer.Option("--d-model", min=1, max=MAX_D_MODEL, help="Model width d_model.")
    ] = 4096,
    n: Annotated[
        list[int] | None,
        typer.Option(
            "--n",
            min=1,
            max=MAX_N,
            help=f"Sequence length(s) N; repeat for more (up to {MAX_LENGTHS} printed, "
            f"{MAX_LENGTHS_JSON} with --json).",
        ),
    ] = None,
    flops: Annotated[
        bool, typer.Option("--flops", help="Count multiply and add separately.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """The cost model of §6.6: 4·N·d² + 2·N²·d and where the N² term takes over."""
    most = MAX_LENGTHS_JSON if as_json else MAX_LENGTHS
    if n and len(n) > most:
        more = "" if as_json else f" (add --json for up to {MAX_LENGTHS_JSON})"
        raise fail(f"--n: expected at most {most} lengths{more}, but got {len(n)} instead")
    model = attnlab.cost
    count = "flops" if flops else "madds"
    crossover = model.crossover_length(d_model)
    lengths = n or [512, 2048, crossover, 4 * crossover]
    rows = [model.breakdown(length, d_model, count=count) for length in lengths]
    if as_json:
        typer.echo(
            json.dumps(
                {"crossover_length": crossover, "rows": [r.as_dict() for r in rows]},
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
        ("QKᵀ fp32", lambda r: f"{model.score_memory_bytes(r.n) / 2**20:,.1f} MiB"),
    ]
    for label, cell in terms:
        table.add_row(label, *(cell(r) for r in rows))
    console.print(table)
    console.print(
        f"The N² terms overtake the linear ones past N = 2·d_model = [bold]{crossover}[/]."
    )


@app.command()
@friendly_errors
def why(
    equation: Annotated[
        str | None,
        typer.Argument(help="One equation's id (score, sigma, ...); default: list them."),
    ] = None,
) -> None:
    """The chapter's equations symbol by symbol: the same entries as the page's "The why"."""
    from attnlab.figures.equation import build_equations

    found = {e.id: e for e in build_equations()}
    if equation is None:
        for e in found.values():
            console.print(f"{e.id:<20} {e.section}  {e.title}", highlight=False)
        return
    if equation not in found:
        raise fail(f"expected one of {', '.join(found)}, but got {equation!r} instead")
    e = found[equation]
    console.print(f"[bold]{escape(e.title)}[/] ({e.section}): {escape(e.words)}\n")
    for s in e.symbols:
        text = _plain(s.text)
        console.print(f"  [bold]{escape(text)}[/]  ({escape(s.shape)})  {escape(s.meaning)}")
        console.print(f"    [dim]{escape(s.link.label)}[/]", highlight=False)
    for note in e.notes:
        console.print(f"\n  {escape(note)}", highlight=False)


def _plain(text: str) -> str:
    """The page's markup as plain text: q_{i}k_{i} -> "q_i k_i", Σ_{i=1}^{d_{k}} -> Σ_(i=1)^(d_k)."""
    while "{" in text:
        text = re.sub(
            r"([_^])\{([^{}]*)\}",
            lambda m: f"{m[1]}{m[2]} " if len(m[2]) == 1 else f"{m[1]}({m[2]})",
            text,
        )
    return text.replace(" )", ")").replace(" ^", "^").strip()
