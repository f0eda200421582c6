"""docs/teaching.md names only what exists: each notebook it maps is in docs/notebooks/, each lab
is one of attnlab.labs, every exercise appears, and the 50-minute plan adds up to 50 minutes."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from attnlab import exercises
from attnlab.labs import LABS

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "teaching.md").read_text()


def _table() -> list[list[str]]:
    rows = [line for line in PAGE.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def test_every_notebook_and_lab_named_exists():
    books = {p.stem for p in (ROOT / "docs" / "notebooks").glob("*.ipynb")}
    for _part, _figure, notebooks, _exercise, labs, _time in _table():
        for name in re.findall(r"\d\d-[\w-]+", notebooks):
            assert name in books, name
        for name in re.findall(r"`([\w-]+)`", labs):
            assert name in LABS or name == "attnlab", name


def test_every_exercise_is_placed_and_the_class_is_fifty_minutes():
    placed = set()
    for row in _table()[:-1]:  # the wrap-up row names them all; the parts must, between them
        for a, b in re.findall(r"(\d)(?:–(\d))?", row[3]):
            placed |= set(range(int(a), int(b or a) + 1))
    assert placed == {e.number for e in exercises.EXERCISES}
    assert sum(int(re.match(r"\d+", row[5]).group()) for row in _table()) == 50
    spans = re.findall(r"\*\*(\d+)–(\d+):", PAGE)
    assert spans[0][0] == "0" and spans[-1][1] == "50"
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(spans))
