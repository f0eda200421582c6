"""A plot declared as data (RowPlot and its Lines) draws each row's own fields, its title and
names formatted from the result: checked on a hand-made result, and on a lab beside its rows."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.labs import LABS
from attnlab.labs._spec import Line, RowPlot


@dataclass(frozen=True)
class _Row:
    width: int
    a: float
    a_se: float
    b: float


@dataclass(frozen=True)
class _Result:
    trials: int
    heads: int
    rows: tuple[_Row, ...]


def test_a_row_plot_draws_the_named_fields_of_each_row():
    r = _Result(1234, 3, (_Row(16, 0.5, 0.01, 2.0), _Row(64, 0.25, 0.02, 4.0)))
    plot = RowPlot(
        "{trials:,} trials",
        "share",
        (Line("a", "a", "a_se"), Line("{heads} heads", "b"), Line("theory", 1.0, dash=True)),
        log_x=True,
    )(r)
    assert (plot.title, plot.kind, plot.x, plot.x_label) == (
        "1,234 trials",
        "line",
        [16, 64],
        "d_k",
    )
    assert (plot.y_label, plot.log_x, plot.log_y) == ("share", True, False)
    a, b, theory = plot.series
    assert (a.name, a.y, a.error, a.dash) == ("a", [0.5, 0.25], [0.01, 0.02], False)
    assert (b.name, b.y, b.error) == ("3 heads", [2.0, 4.0], None)
    assert (theory.y, theory.dash) == ([1.0, 1.0], True)


def test_the_gradient_labs_plot_is_its_rows_columns():
    spec = LABS["gradient"]
    r = spec(widths=(16, 32), trials=20, keys=8)
    plot = spec.figure(r)
    assert plot.x == [16, 32]
    assert plot.title == "Median gradient per query row, 20 trials of 8 keys per width"
    by_name = {s.name: s.y for s in plot.series}
    assert by_name["‖dS‖ unscaled"] == [row.ds_unscaled for row in r.rows]
    assert by_name["‖dQ‖ scaled by 1/√d_k"] == [row.dq_scaled for row in r.rows]


def test_a_spec_names_its_budget_parameter_once_on_the_parameter():
    import dataclasses

    import pytest

    spec = LABS["variance"]
    assert spec.budget_field == "draws" and spec.param("draws").budget
    unmarked = tuple(dataclasses.replace(p, budget=False) for p in spec.params)
    with pytest.raises(TypeError, match="one parameter of lab 'variance' marked budget=True"):
        dataclasses.replace(spec, params=unmarked)
