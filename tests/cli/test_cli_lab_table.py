"""`attnlab lab NAME`'s terminal table writes each number as the notebook and the page do:
``core/numbers.py``'s four significant digits, whole numbers as they are, no value as "—"."""

from __future__ import annotations

import math

from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.core.numbers import NO_VALUE, format_number
from attnlab.labs import saturation, variance_scaling


def _body(stdout: str) -> list[list[str]]:
    """The table's body rows, cell by cell (the lines between the box's side bars)."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in stdout.splitlines()
        if line.startswith("│")
    ]


def test_the_variance_table_writes_its_numbers_by_the_one_rule():
    args = ["lab", "variance", "--width", "16", "--width", "32", "--draws", "2000", "--seed", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    _, rows = variance_scaling(widths=(16, 32), draws=2000, seed=3).table()
    expected = [[format_number(x) if isinstance(x, float) else str(x) for x in row] for row in rows]
    assert _body(result.stdout) == expected
    assert expected[0][0] == "16"  # the width, a whole number, is not rounded


def test_a_cell_with_no_value_reads_as_the_page_writes_it():
    result = CliRunner().invoke(app, ["lab", "saturation", "--trials", "40", "--seed", "2"])
    assert result.exit_code == 0, result.output
    _, rows = saturation(trials=40, seed=2).table()
    missing = [
        j for j, x in enumerate(rows[0]) if x is None or (isinstance(x, float) and math.isnan(x))
    ]
    assert missing  # the unscaled row has a column that does not apply to it
    body = _body(result.stdout)
    assert all(body[0][j] == NO_VALUE for j in missing)
