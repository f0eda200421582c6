"""How ``attnlab model`` prints: tables narrow enough for an 80-column terminal.

Shape legend: N tokens, L layers, M keys of one query.

A row of N numbers as N columns folds to "…" in every cell at 80 columns once N passes ~8, so
every table here runs down the page instead: one line per token, per layer or per component,
with a few short columns. Tokens are shown as text with their spaces made visible ("·").
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from attnlab.cli._app import console
from attnlab.core.numbers import format_number

__all__ = ["show_ablation", "show_attribution", "show_lens", "show_row", "show_summary",
           "show_tokens", "visible"]  # fmt: skip


def visible(token: str) -> str:
    """A token as printable text: spaces as "·", newlines and tabs as ↵ and →, "∅" if empty."""
    if not token:
        return "∅"
    return token.replace(" ", "·").replace("\n", "↵").replace("\t", "→")


def _title(text: str) -> None:
    # On its own line: as a table's title it would wrap, centred, to the narrow table.
    console.print(f"[bold]{escape(text)}[/]", highlight=False)


def show_summary(data: dict) -> None:
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
    _title("Strongest heads (attnlab score; TransformerLens detect_head score)")
    table = Table()
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


def show_tokens(tokens: list[str], ids: list[int]) -> None:
    """The tokens as one row that wraps at the terminal's width: "position:token" pairs."""
    console.print(f"[bold]{len(tokens)} tokens[/]", highlight=False)
    row = Text()
    for i, token in enumerate(tokens):
        row.append(f"{i}:", style="dim")
        row.append(visible(token))
        row.append("  ")
    console.print(row, soft_wrap=False)


def show_row(data: dict) -> None:
    """One head's row for one query, one line per key it may see: token, q·k, scaled, weight."""
    t = data["trace"]
    console.print(
        f"\n[bold]Layer {data['layer']}, head {data['head']}, query {data['query']} "
        f"({escape(visible(data['tokens'][data['query']]))})[/] ({data['kind']}), scale "
        f"{format_number(t['scale'])}",
        highlight=False,
    )
    table = Table()
    for name, justify in (("key", "right"), ("token", "left"), ("q·k", "right"),
                          ("scaled + mask", "right"), ("weight", "right")):  # fmt: skip
        table.add_column(name, justify=justify)
    scores, masked, weights = t["scores"][0], t["masked"][0], t["weights"][0]
    for j, token in enumerate(data["tokens"]):
        blocked = masked[j] == "-inf"
        table.add_row(
            str(j),
            escape(visible(token)),
            "" if blocked else format_number(scores[j]),
            "-inf" if blocked else format_number(masked[j]),
            format_number(weights[j]),
        )
    console.print(table)
    out = ", ".join(format_number(x) for x in t["output"][0])
    console.print(f"output O = A V ({len(t['output'][0])} numbers): {out}", highlight=False)


def show_lens(lens: dict) -> None:
    _title(f"Logit lens at position {lens['position']} ({visible(lens['token'])}): each "
           "layer's top token")  # fmt: skip
    table = Table()
    for name in ("layer", "top token", "probability", "final top's probability"):
        table.add_column(name, justify="left" if name == "top token" else "right")
    for row in lens["layers"]:
        table.add_row(str(row["layer"]), escape(visible(row["top"])), f"{row['p']:.3f}",
                      f"{row['p_final']:.3f}")  # fmt: skip
    console.print(table)


def show_attribution(data: dict) -> None:
    a = data["attribution"]
    console.print(
        f"\n[bold]Logit of {escape(visible(a['token']))} (id {a['id']}) at position "
        f"{a['position']}[/]: {a['logit']:.4f}; its parts add up to {a['sum']:.4f}",
        highlight=False,
    )
    _title(f"The {len(a['top'])} largest parts (of {a['parts']})")
    table = Table()
    table.add_column("component")
    table.add_column("contribution", justify="right")
    for name, value in a["top"]:
        table.add_row(name, f"{value:+.4f}")
    console.print(table)


def show_ablation(data: dict) -> None:
    a = data["ablation"]
    heads = ", ".join(f"{layer}.{head}" for layer, head in a["heads"])
    _title(f"Position {a['position']}: the next token's top 5, heads {heads} zeroed")
    table = Table()
    for name in ("rank", "before", "p", "after", "p"):
        table.add_column(name, justify="left" if name in ("before", "after") else "right")
    for i, (before, after) in enumerate(zip(a["before"], a["after"], strict=True)):
        table.add_row(str(i + 1), escape(visible(before[0])), f"{before[1]:.3f}",
                      escape(visible(after[0])), f"{after[1]:.3f}")  # fmt: skip
    console.print(table)
