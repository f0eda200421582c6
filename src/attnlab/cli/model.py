"""``attnlab model PATH``: a Hugging Face model folder run through attnlab's attention.

Prints the model's shape, each layer's attention kind (full, sliding window, softcap, sinks,
latent (DeepSeek-V3, --mla naive or absorbed), bidirectional (BERT)),
the strongest heads of each kind on the text, and with --layer/--head/--query that row's
tables as ``attnlab attention`` prints a trace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from attnlab.cli._app import app, console, fail, friendly_errors
from attnlab.cli.core import show_trace, trace_json

#: The longest input the command runs: every layer's (h, N, N) weights are kept for the scores.
MAX_TOKENS = 2048
DEFAULT_TEXT = "The cat sat on the mat. The cat sat on the mat."


def _ids(model, text: str | None, ids: str | None) -> np.ndarray:
    if text is not None and ids is not None:
        raise fail("expected --text or --ids, but got both")
    if ids is not None:
        try:
            values = [int(x) for x in ids.replace(",", " ").split()]
        except ValueError:
            raise fail(
                f"--ids: expected integers separated by commas or spaces, but got {ids[:60]!r}"
            ) from None
    else:
        values = model.tokenize(DEFAULT_TEXT if text is None else text).tolist()
    if not 1 <= len(values) <= MAX_TOKENS:
        raise fail(f"expected 1 to {MAX_TOKENS} tokens, but got {len(values)}")
    return np.asarray(values, dtype=np.int64)


def summary(model, run, top: int = 3) -> dict:
    """The command's JSON: shape, layer kinds, the strongest heads of each kind (both
    definitions' scores for each), ids and text."""
    scores = run.head_scores()
    strongest = {
        kind: [
            {"layer": layer, "head": head, "attnlab": value,
             "transformer_lens": float(scores.transformer_lens[kind][layer, head])}
            for layer, head, value in scores.strongest(kind, top)
        ]
        for kind in scores.scores
    }  # fmt: skip
    return {
        "path": str(model.path),
        "architecture": model.architecture,
        "dtype": str(model.dtype),
        "shape": model.shape.as_dict(),
        "layers": run.kinds,
        "output": run.output,
        "ids": run.ids[0].tolist(),
        "strongest_heads": strongest,
    }


def _print(data: dict) -> None:
    s = data["shape"]
    console.print(
        f"[bold]{escape(data['architecture'])}[/] {escape(data['path'])}: {s['layers']} layers, "
        f"d_model {s['d_model']}, {s['heads']} heads ({s['kv_heads']} key/value heads) of width "
        f"{s['head_dim']}, vocabulary {s['vocab']}, {data['dtype']}",
        highlight=False,
    )
    console.print(
        "layers: " + "; ".join(f"{i}: {k}" for i, k in enumerate(data["layers"])), highlight=False
    )
    console.print(f"tokens: {len(data['ids'])}; logits: {data['output']}", highlight=False)
    table = Table(title="Strongest heads (attnlab score; TransformerLens detect_head score)")
    for column in ("kind", "layer.head", "attnlab", "TransformerLens"):
        table.add_column(column)
    for kind, rows in data["strongest_heads"].items():
        for row in rows or [{"layer": "—", "head": "—", "attnlab": None, "transformer_lens": None}]:
            table.add_row(
                kind,
                f"{row['layer']}.{row['head']}",
                "—" if row["attnlab"] is None else f"{row['attnlab']:.3f}",
                "—" if row["transformer_lens"] is None else f"{row['transformer_lens']:.3f}",
            )
    console.print(table)


@app.command()
@friendly_errors
def model(
    path: Annotated[
        Path, typer.Argument(help="A Hugging Face model folder (config.json, safetensors).")
    ],
    text: Annotated[
        str | None, typer.Option(help="Text to tokenize (the folder's tokenizer.json).")
    ] = None,
    ids: Annotated[
        str | None, typer.Option(help="Token ids instead of text: '464, 3797, 3332'.")
    ] = None,
    layer: Annotated[int | None, typer.Option(min=0, help="Layer of the row to trace.")] = None,
    head: Annotated[int | None, typer.Option(min=0, help="Head of the row to trace.")] = None,
    query: Annotated[
        int | None, typer.Option(min=0, help="Query (token position) of the row.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="float32 or float64.")] = "float32",
    mla: Annotated[
        str | None,
        typer.Option(help="DeepSeek-V3's latent attention: naive (default) or absorbed."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Run a Hugging Face checkpoint (gpt2, llama, mistral, qwen2, gemma2, gpt_oss, gpt_neox,
    qwen3, gemma3_text, olmo2, phi3, llama4_text, deepseek_v3, bert) through attnlab's
    attention: its shape, each layer's attention kind and the strongest heads; with --layer,
    --head and --query, that row's tables."""
    from attnlab.models import load

    row = (layer, head, query)
    if any(x is not None for x in row) and any(x is None for x in row):
        raise fail("expected --layer, --head and --query together, or none of them")
    loaded = load(path, dtype=dtype)
    run = loaded.run(_ids(loaded, text, ids), mla=mla)
    data = summary(loaded, run)
    trace = run.trace(layer, head, query) if layer is not None else None
    if as_json:
        if trace is not None:
            data["trace"] = json.loads(trace_json(trace))
        typer.echo(json.dumps(data, indent=2))
        return
    _print(data)
    if trace is not None:
        console.print(f"\n[bold]Layer {layer}, head {head}, query {query}[/] ({run.kinds[layer]})")
        show_trace(trace)
