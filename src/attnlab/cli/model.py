"""``attnlab model PATH|ID``: a Hugging Face model (a folder or a hub id) run through attnlab's
attention.

Shape legend: N tokens, L layers, h heads, V vocabulary.

Prints the model's shape, what its logits are, each layer's attention kind (full, sliding
window, chunked, softcap, sinks, latent (DeepSeek-V3, --mla naive or absorbed), bidirectional
(BERT)), the tokens as a row, the strongest heads of each kind; with --layer/--head/--query
that row, one line per key, labelled by token; with --lens each layer's top token at
--position; with --attribute TOKEN that token's logit split into heads, MLPs and embeddings;
with --ablate L.H the prediction before and after zeroing those heads; with --generate N new
tokens, printed as they come. --json prints the same as
one JSON object. Loading shows a progress bar (on stderr, so --json stays clean).
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import numpy as np
import typer

from attnlab.cli import model_show as show
from attnlab.cli._app import app, console, err_console, fail, friendly_errors
from attnlab.cli.core import trace_json

#: The longest input the command runs: every layer's (h, N, N) weights are kept for the scores.
MAX_TOKENS = 2048
MAX_NEW_TOKENS = 1024
DEFAULT_TEXT = "The cat sat on the mat. The cat sat on the mat."
TOP_PARTS = 12  # attribution parts printed (--json has them all)
_HEAD = re.compile(r"([0-9]+)\.([0-9]+)", re.ASCII)


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


def _heads(values: list[str], shape) -> list[tuple[int, int]]:
    """--ablate's "L.H" values (each flag may hold several, split by commas or spaces)."""
    pairs = []
    for value in " ".join(values).replace(",", " ").split():
        match = _HEAD.fullmatch(value)
        if match is None:
            raise fail(f"--ablate: expected LAYER.HEAD such as 3.7, but got {value[:40]!r}")
        layer, head = int(match[1]), int(match[2])
        if layer >= shape.layers or head >= shape.heads:
            raise fail(f"--ablate: expected layer < {shape.layers} and head < {shape.heads}, but "
                       f"got {value}")  # fmt: skip
        pairs.append((layer, head))
    return pairs


def _token(model, value: str) -> int:
    """--attribute's TOKEN: text that is one token of the vocabulary, or ASCII digits (an id)."""
    if model.tokenizer_path is not None:
        ids = model.tokenize(value)
        if len(ids) == 1:
            return int(ids[0])
    if re.fullmatch(r"[0-9]{1,12}", value, re.ASCII) and int(value) < model.shape.vocab:
        return int(value)
    raise fail(f"--attribute: expected one token of the vocabulary (text or an id below "
               f"{model.shape.vocab}), but got {value[:40]!r}")  # fmt: skip


def _position(value: int | None, n: int) -> int:
    if value is None:
        return n - 1
    if not -n <= value < n:
        raise fail(f"--position: expected -{n} <= position < {n}, but got {value}")
    return value % n


def summary(model, run, top: int = 3) -> dict:
    """The command's JSON: shape, layer kinds, the strongest heads of each kind (both
    definitions' scores for each), ids, tokens and text."""
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
        "tokens": model.tokens(run.ids[0]),
        "strongest_heads": strongest,
    }


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    p = np.exp(z)
    return p / p.sum()


def lens(model, run, position: int) -> dict:
    """Each layer's top token at ``position`` through the logit lens, its probability, and the
    probability there of the final layer's top token."""
    final = int(np.argmax(run.logits[0, position]))
    rows = []
    for layer in range(model.shape.layers):
        p = _softmax(run.logit_lens(layer)[0, position])  # (V,)
        top = int(np.argmax(p))
        rows.append({"layer": layer, "id": top, "top": model.tokens([top])[0],
                     "p": float(p[top]), "p_final": float(p[final])})  # fmt: skip
    return {"position": position, "token": model.tokens(run.ids[0, position : position + 1])[0],
            "layers": rows}  # fmt: skip


def attribution(model, run, position: int, token: int) -> dict:
    parts = run.logit_attribution(position, token)
    ranked = sorted(parts.items(), key=lambda kv: -abs(kv[1]))
    return {"position": position, "id": token, "token": model.tokens([token])[0],
            "logit": float(run.logits[0, position, token]), "sum": float(sum(parts.values())),
            "parts": len(parts), "top": [[k, v] for k, v in ranked[:TOP_PARTS]],
            "all": parts}  # fmt: skip


def ablation(model, run, ids, heads, position: int) -> dict:
    from attnlab.models.inside import ablate

    after = ablate(model, ids, heads, how="zero")

    def top5(logits):
        p = _softmax(logits[0, position])
        best = np.argsort(-p)[:5]
        return [[model.tokens([int(i)])[0], float(p[i]), int(i)] for i in best]

    return {"heads": heads, "position": position, "before": top5(run.logits),
            "after": top5(after.logits)}  # fmt: skip


def _load(path: str, revision: str | None, dtype: str, quiet: bool):
    """The model, with a bar for each download (a hub id not yet cached) and one while its
    tensors are read, on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from attnlab.models._load import check_dtype, open_folder, resolve

    check_dtype(dtype)  # before a download
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    console=err_console, transient=True, disable=quiet)  # fmt: skip
    with bars:
        folder = resolve(path, revision, tqdm_class=_download_bars(bars))
        task = bars.add_task(f"loading {folder.name}", total=None)
        return open_folder(folder, dtype, lambda done, total: bars.update(task, completed=done,
                                                                         total=total))  # fmt: skip


def _download_bars(bars):
    """A tqdm class (what huggingface_hub takes) that draws each of its bars as a task of the
    Rich progress ``bars`` and writes nothing itself."""
    import io

    from tqdm import tqdm

    class RichBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["file"] = io.StringIO()  # tqdm's own drawing goes nowhere
            self.task = None
            super().__init__(*args, **kwargs)
            self.task = bars.add_task(self.desc or "downloading", total=self.total or None)

        def display(self, msg=None, pos=None):
            if self.task is not None:  # tqdm draws once before __init__ has made the task
                bars.update(self.task, completed=self.n, total=self.total or None,
                            description=self.desc or "downloading")  # fmt: skip
            return True

        def close(self):
            if getattr(self, "task", None) is not None:
                self.display()
            super().close()

    return RichBar


def _generate(model, ids, n: int, as_json: bool) -> list[int]:
    """The new tokens, each printed as it comes unless the answer is JSON: the text of all new
    tokens is decoded again at each step and only what it adds is printed, so byte-level
    pieces of one character appear once it is whole."""
    new, shown = [], ""
    if not as_json:
        console.print("\n[bold]Generated[/] (greedy):", highlight=False)
    for step in model.stream(ids, n):
        new.append(int(step[0]))
        if as_json:
            continue
        if model.tokenizer_path is None:
            text = " ".join(map(str, new)) + " "
        else:
            text = model.detokenize(new)
        if text.startswith(shown) and not text.endswith("\ufffd"):  # a whole character
            console.out(text[len(shown) :], end="", highlight=False)
            shown = text
    if not as_json:
        console.print()
    return new


Opt = typer.Option


@app.command()
@friendly_errors
def model(
    path: Annotated[str, typer.Argument(metavar="PATH|ID",
        help="A Hugging Face model folder (config.json, safetensors) or a hub id 'org/name'.")],
    text: Annotated[str | None, Opt(help="Text to tokenize (the folder's tokenizer).")] = None,
    ids: Annotated[str | None, Opt(help="Token ids instead of text: '464, 3797, 3332'.")] = None,
    layer: Annotated[int | None, Opt(min=0, help="Layer of the row to trace.")] = None,
    head: Annotated[int | None, Opt(min=0, help="Head of the row to trace.")] = None,
    query: Annotated[int | None, Opt(min=0, help="Query (token position) of the row.")] = None,
    lens_: Annotated[bool, Opt("--lens", help="Each layer's top token (logit lens).")] = False,
    attribute: Annotated[str | None, Opt(
        help="Split this token's logit into heads, MLPs and embeddings.")] = None,
    position: Annotated[int | None, Opt(
        help="Position for --lens, --attribute, --ablate (default: the last).")] = None,
    ablate: Annotated[list[str] | None, Opt(
        help="Zero heads LAYER.HEAD (repeat, or '1.0,2.3') and show the prediction.")] = None,
    generate: Annotated[int | None, Opt(
        min=1, max=MAX_NEW_TOKENS, help="Generate this many tokens (greedy), streamed.")] = None,
    revision: Annotated[str | None, Opt(help="A hub id's branch, tag or commit.")] = None,
    dtype: Annotated[str, Opt(help="float32 or float64.")] = "float32",
    mla: Annotated[str | None, Opt(
        help="DeepSeek-V3's latent attention: naive (default) or absorbed.")] = None,
    as_json: Annotated[bool, Opt("--json", help="Print JSON instead of tables.")] = False,
) -> None:  # fmt: skip
    """Run a Hugging Face checkpoint (gpt2, llama, mistral, qwen2, gemma2, gpt_oss, gpt_neox,
    qwen3, gemma3_text, olmo2, phi3, llama4_text, deepseek_v3, bert) through attnlab's
    attention: its shape, each layer's attention kind, the tokens and the strongest heads;
    --layer, --head and --query trace one row; --lens, --attribute, --ablate and --generate
    look inside."""
    row = (layer, head, query)
    if any(x is not None for x in row) and any(x is None for x in row):
        raise fail("expected --layer, --head and --query together, or none of them")
    loaded = _load(path, revision, dtype, quiet=as_json or not err_console.is_terminal)
    tokens = _ids(loaded, text, ids)
    inside = lens_ or attribute is not None
    run = loaded.run(tokens, cache=inside, mla=mla)
    data = summary(loaded, run)
    n = len(tokens)
    where = _position(position, n)
    if layer is not None:
        if layer >= loaded.shape.layers or head >= loaded.shape.heads or query >= n:
            raise fail(f"expected --layer < {loaded.shape.layers}, --head < {loaded.shape.heads} "
                       f"and --query < {n}, but got {layer}, {head} and {query}")  # fmt: skip
        data |= {"layer": layer, "head": head, "query": query, "kind": run.kinds[layer],
                 "trace": json.loads(trace_json(run.trace(layer, head, query)))}  # fmt: skip
    if lens_:
        data["lens"] = lens(loaded, run, where)
    if attribute is not None:
        data["attribution"] = attribution(loaded, run, where, _token(loaded, attribute))
    if ablate:
        data["ablation"] = ablation(loaded, run, tokens, _heads(ablate, loaded.shape), where)
    if not as_json:
        _print(data)
    if generate is not None:
        data["generated"] = _generate(loaded, tokens, generate, as_json)
        data["generated_tokens"] = loaded.tokens(data["generated"])
    if as_json:
        typer.echo(json.dumps(data, indent=2))


def _print(data: dict) -> None:
    show.show_summary(data)
    show.show_tokens(data["tokens"], data["ids"])
    if "trace" in data:
        show.show_row(data)
    if "lens" in data:
        show.show_lens(data["lens"])
    if "attribution" in data:
        show.show_attribution(data)
    if "ablation" in data:
        show.show_ablation(data)
