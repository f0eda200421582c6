"""Notebook 11's ablation table: each head, then each whole layer, knocked out of the shipped
induction model, computed live. The test runs the notebook (its cells up to the table; the whole
notebook runs in test_notebooks.py) and then, in the same kernel, a cell of its own that
measures every row again from ``model.logits(tokens, ablate=...)`` on the notebook's own
sequences, counting the second copy position by position from the sequences' lengths. The table
the notebook printed must give those numbers, and its intact row the accuracy printed above it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import attnlab as al

BOOK = Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "11-training.ipynb"
TABLE = "ablation-table"  # the id of the notebook's cell that prints the table
ROW = re.compile(r"^(none|L\d+H\d+|layer \d+)\s+(.*?)\s+(\d+\.\d)%\s+([+-]\d+\.\d) pts$")
CELL_S = 60  # seconds any one cell may take (the table's takes a few)

# Run in the notebook's kernel after its cells: every row again, by another route.
CHECK = """
import json
import numpy as np

def second_copy_accuracy(logits, tokens, lengths):
    hits = []
    for s, t in enumerate(lengths):  # the second copy is the last t tokens; the last has no next
        n = tokens.shape[1]
        for i in range(n - int(t), n - 1):
            hits.append(int(np.argmax(logits[s, i])) == int(tokens[s, i + 1]))
    return float(np.mean(hits))

again = {name: second_copy_accuracy(model.logits(tokens, ablate=off), tokens, lengths)
         for name, _, off in plan}
print(json.dumps({"again": again, "table": ablation_table, "measured": accuracy,
                  "heads": [[h.layer, h.head, h.pattern] for h in heads]}))
"""


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.read(str(BOOK), as_version=4)
    ids = [c.get("id") for c in book.cells]
    assert TABLE in ids, "notebook 11 has no ablation table cell"
    book.cells = book.cells[: ids.index(TABLE) + 1] + [nbformat.v4.new_code_cell(CHECK)]
    root = str(Path(al.__file__).resolve().parents[1])  # the kernel imports this checkout
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", path)
        client = nbclient.NotebookClient(book, timeout=CELL_S, kernel_name="python3",
                                         resources={"metadata": {"path": tmp_path_factory.mktemp("nb")}})  # fmt: skip
        client.execute()
    return book


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def test_the_table_shows_every_head_and_layer_with_the_apis_numbers(executed):
    book = executed
    table = next(c for c in book.cells if c.get("id") == TABLE)
    rows = [ROW.match(line) for line in _text(table).splitlines()[1:] if line.strip()]
    assert rows and all(rows), _text(table)
    check = json.loads(_text(book.cells[-1]))
    heads, again = check["heads"], check["again"]
    layers = 1 + max(layer for layer, _, _ in heads)
    names = ["none"] + [f"L{layer}H{head}" for layer, head, _ in heads]
    names += [f"layer {layer}" for layer in range(layers)]
    assert [r[1] for r in rows] == names  # each head, then each whole layer
    assert check["table"] == pytest.approx(again, abs=1e-12)  # what it computed, recomputed
    intact = again["none"]
    for r in rows:
        shown = float(r[3]) / 100
        assert shown == pytest.approx(again[r[1]], abs=0.0005), r[0]  # printed to 0.1 %
        assert float(r[4]) == pytest.approx(100 * (again[r[1]] - intact), abs=0.05), r[0]
    patterns = {f"L{layer}H{head}": pattern for layer, head, pattern in heads}
    assert all(r[2] == patterns[r[1]] for r in rows if r[1] in patterns)
    assert intact == pytest.approx(check["measured"], abs=1e-12)  # the accuracy printed above


def test_the_table_says_what_the_chapter_expects(executed):
    # A previous-token head of layer 0 is the costliest single head; either layer is fatal.
    book = executed
    check = json.loads(_text(book.cells[-1]))
    again, patterns = check["again"], {f"L{a}H{b}": p for a, b, p in check["heads"]}
    worst = min(patterns, key=again.get)
    assert worst.startswith("L0") and patterns[worst] == "previous-token"
    assert again[worst] < again["none"] - 0.3
    assert all(again[f"layer {i}"] < 0.2 for i in range(2))
    assert all(again[h] > again["none"] - 0.05 for h in patterns if patterns[h] == "other")
