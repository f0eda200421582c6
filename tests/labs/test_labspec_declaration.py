"""One declaration per lab: the CLI options, the web fields and the outputs follow the spec.

Each test reads the generated thing back (Typer's click command, the pydantic model, the JSON a
command prints) and compares it with ``attnlab.labs.LABS[name]``, so a default or a bound
changed in one place and not the other fails here.
"""

from __future__ import annotations

import inspect
import json
import warnings
from typing import get_args

import pytest
import typer
from typer.testing import CliRunner

from attnlab import labs
from attnlab.cli import app
from attnlab.labs import LABS
from attnlab.labs._spec import _UNSET
from attnlab.web import create_app
from attnlab.web.labs import request_model
from conftest import SMALL_LABS

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

runner = CliRunner()
LOCAL = "http://127.0.0.1"  # the explorer serves loopback names only


def _command(name: str):
    group = typer.main.get_command(app).commands["lab"]
    return group.commands[name]


@pytest.mark.parametrize("name", list(LABS))
def test_every_argument_of_the_lab_function_is_declared(name):
    spec = LABS[name]
    arguments = set(inspect.signature(spec.run).parameters) - {"progress"}
    assert {p.name for p in spec.params} == arguments
    for p in spec.params:  # the defaults are the function's own
        assert p.default == inspect.signature(spec.run).parameters[p.name].default


@pytest.mark.parametrize("name", list(LABS))
def test_cli_options_carry_the_spec_defaults_and_bounds(name):
    spec = LABS[name]
    options = {o.name: o for o in _command(name).params}
    for p in spec.params:
        option = options[p.name]
        assert p.option in option.opts
        expected = list(p.default) if p.many else p.default
        default = option.default if not p.many else list(option.default)
        assert default == expected, p.name
        assert option.multiple is p.many
        low, high = p.bounds()
        assert (option.min, option.max) == ((None, None) if p.choices else (low, high)), p.name
        if p.choices:
            assert get_args(option.type_descriptor.annotation) == p.choices
    assert {"as_json", "as_csv", "plot", "yes"} <= set(options)


@pytest.mark.parametrize("name", list(LABS))
def test_web_fields_carry_the_spec_web_defaults_and_bounds(name):
    spec = LABS[name]
    schema = request_model(spec).model_json_schema()
    web = [p for p in spec.params if p.web]
    assert set(schema["properties"]) == {p.name for p in web} | {"download"}
    for p in web:
        prop = schema["properties"][p.name]
        assert prop["default"] == p.default_for(web=True), p.name
        bounds = prop.get("items", prop) if p.many else prop
        low, high = p.bounds(web=True)
        lo_key, hi_key = ("exclusiveMinimum", "exclusiveMaximum") if p.open_bounds else (
            "minimum", "maximum")  # fmt: skip
        assert bounds.get(lo_key) == low and bounds.get(hi_key) == high, p.name
        web_low, web_high, cli_low, cli_high = *p.bounds(web=True), *p.bounds()
        # The web never allows what the CLI (and the library) refuse.
        assert cli_low is None or (web_low is not None and web_low >= cli_low)
        assert cli_high is None or (web_high is not None and web_high <= cli_high)


def test_the_cli_default_run_is_the_spec_default():
    # Run with no options at all and read back what the lab says it ran.
    data = json.loads(runner.invoke(app, ["lab", "variance", "--json"]).stdout)
    spec = LABS["variance"]
    assert data["widths"] == list(spec.param("widths").default)
    assert data["draws"] == spec.param("draws").default and data["seed"] == 0
    perm = json.loads(runner.invoke(app, ["lab", "permutation", "--json"]).stdout)
    spec = LABS["permutation"]
    assert perm["d_model"] == spec.param("d_model").default
    assert " ".join(perm["tokens"]) == spec.param("sentence").default
    assert perm["word"] == spec.param("word").default


def _listed_edges():
    """(lab, param, value just outside a listed bound) for every bound /api/labs lists."""
    with TestClient(create_app(), base_url=LOCAL) as client:
        listing = client.get("/api/labs").json()
    for lab in listing:
        for p in lab["params"]:
            if p["type"] not in ("integer", "number", "list"):
                continue
            if p["max"] is not None:
                yield lab["name"], p["name"], p["max"] + 1
            if p["min"] is not None and not (p["type"] == "number" and p["min"] == 0):
                yield lab["name"], p["name"], p["min"] - 1


def test_the_web_listing_names_every_lab_and_its_signature_defaults():
    with TestClient(create_app(), base_url=LOCAL) as client:
        listing = client.get("/api/labs").json()
    assert [lab["name"] for lab in listing] == list(LABS)
    for lab in listing:
        signature = inspect.signature(LABS[lab["name"]].run).parameters
        for p in lab["params"]:
            web_default = LABS[lab["name"]].param(p["name"]).web_default
            if web_default is _UNSET:  # the web runs the library's own default
                default = signature[p["name"]].default
                assert p["default"] == (list(default) if isinstance(default, tuple) else default)


@pytest.mark.parametrize(("lab", "name", "value"), list(_listed_edges()))
def test_the_web_refuses_just_past_each_listed_bound(lab, name, value):
    # What the page is told (min/max in /api/labs) is what the route enforces: one past a
    # listed bound is a 422 naming the parameter, before any work starts.
    with TestClient(create_app(), base_url=LOCAL) as client:
        answer = client.get(f"/api/labs/{lab}", params={name: value})
    assert answer.status_code == 422, answer.text
    assert name in answer.text


def test_the_web_default_run_uses_the_web_defaults():
    with TestClient(create_app(), base_url=LOCAL) as client:
        answer = client.get("/api/labs/permutation")
    assert answer.status_code == 200
    assert answer.json()["params"] == LABS["permutation"].defaults(web=True)


@pytest.mark.parametrize("name", list(LABS))
def test_spec_columns_are_the_result_columns(name):
    result = LABS[name](**SMALL_LABS[name])
    columns, _ = result.table()
    assert [key for key, _ in LABS[name].columns] == columns
    plot = LABS[name].figure(result)
    assert plot.words == result.summary() and all(len(s.y) == len(plot.x) for s in plot.series)


@pytest.mark.parametrize("name", ["variance", "permutation", "proof", "gradient"])
def test_cli_and_web_write_the_same_csv_and_json(name):
    spec = LABS[name]
    args = []
    for key, value in SMALL_LABS[name].items():
        for v in value if isinstance(value, tuple) else (value,):
            args += [spec.param(key).option, str(v)]
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in SMALL_LABS[name].items()}
    with TestClient(create_app(), base_url=LOCAL) as client:
        for fmt in ("csv", "json"):
            cli = runner.invoke(app, ["lab", name, *args, "--seed", "4", f"--{fmt}"])
            assert cli.exit_code == 0, cli.output
            web = client.get(f"/api/labs/{name}", params={**params, "seed": 4, "download": fmt})
            assert web.status_code == 200, web.text
            assert cli.stdout.rstrip("\n") == web.text.rstrip("\n")  # one writer each


def test_column_titles_stay_public_and_agree_with_the_specs():
    for spec in LABS.values():
        for key, title in spec.columns:
            assert labs.COLUMN_TITLES[key] == title, key  # one title per key across the labs
