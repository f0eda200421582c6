"""What every lab promises: the LABS table, JSON-ready results, tables, figures, light import."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import attnlab.labs
from attnlab.errors import AttnlabError
from attnlab.labs import LABS, timing
from attnlab.labs._common import jsonable
from attnlab.labs._plotly import lab_figure
from conftest import SMALL_LABS

# Small, fast arguments for each lab.


@pytest.fixture(scope="module")
def results():
    return {name: LABS[name](seed=0, **SMALL_LABS[name]) for name in LABS}


def test_labs_table_is_exactly_the_labs():
    functions = {name: spec.run for name, spec in LABS.items()}
    assert functions == {
        "variance": attnlab.labs.variance_scaling,
        "saturation": attnlab.labs.saturation,
        "sweep": attnlab.labs.width_sweep,
        "permutation": attnlab.labs.permutation,
        "cost": attnlab.labs.cost_timing,
        "proof": attnlab.labs.proof,
        "gradient": attnlab.labs.gradient,
        "train-induction": attnlab.labs.train_induction,
        "train-scaling": attnlab.labs.train_scaling,
        "train-positions": attnlab.labs.train_positions,
        "ablate-heads": attnlab.labs.ablate_heads,
    }
    assert all(spec.name == name for name, spec in LABS.items())


def test_public_names():
    assert set(attnlab.labs.__all__) >= {"LABS", "variance_scaling", "score_histogram", "timing"}
    assert all(hasattr(attnlab.labs, name) for name in attnlab.labs.__all__)


@pytest.mark.parametrize("name", list(LABS))
def test_results_are_frozen_json_ready_and_tabular(results, name):
    r = results[name]
    with pytest.raises(AttributeError):
        r.seed = 1  # frozen
    data = r.as_dict()
    assert data["lab"] == name and data["seed"] == 0
    assert json.loads(json.dumps(data, allow_nan=False)) == data  # plain JSON types only
    columns, rows = r.table()
    assert rows and all(len(row) == len(columns) for row in rows)
    assert len(set(columns)) == len(columns)
    assert all(isinstance(line, str) for line in r.summary())


@pytest.mark.parametrize("name", list(LABS))
def test_figures_are_valid_plotly_specs(results, name):
    go = pytest.importorskip("plotly.graph_objects")
    spec = lab_figure(results[name])
    json.dumps(spec, allow_nan=False)
    go.Figure(spec)  # raises on any property plotly does not know


def test_jsonable_cleans_numpy_and_non_finite_values():
    raw = {"a": np.float32(1.5), "b": (np.int64(2), math.nan), "c": np.array([math.inf, 1.0])}
    assert jsonable(raw) == {"a": 1.5, "b": [2, None], "c": [None, 1.0]}
    with pytest.raises(TypeError):
        jsonable({"x": object()})


def test_time_labs_reports_medians_and_the_target():
    r = timing.time_labs(repeats=2, labs=("permutation",))
    (row,) = r.rows
    assert row.lab == "permutation" and row.runs == 2
    assert 0 < row.min_s <= row.median_s <= row.max_s
    assert row.target_s is None and row.meets_target is None
    assert timing.TARGETS["variance"] == 2.0  # the default variance lab under 2 s
    json.dumps(r.as_dict(), allow_nan=False)
    with pytest.raises(AttnlabError, match="lab names"):
        timing.time_labs(labs=("cost",))


def test_import_stays_light():
    code = (
        "import sys, attnlab; assert 'attnlab.labs' not in sys.modules; "
        "import attnlab.labs, attnlab.exercises; "
        "heavy = {'plotly', 'rich', 'typer', 'torch'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)  # killed at 120 s
