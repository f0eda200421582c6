"""`attnlab bench verify`: the command's report shape (no timing is asserted)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from attnlab.cli import app


def test_bench_verify_reports_attnlabs_side():
    result = CliRunner().invoke(
        app, ["bench", "verify", "--n", "32", "--heads", "1", "--d", "8", "--no-torch", "--json"]
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["case"]["N"] == 32 and got["attnlab"]["seconds"] > 0, got
    assert got["attnlab"]["peak_mib"] > 0 and "torch" not in got


def test_bench_verify_refuses_an_unknown_dtype():
    bad = CliRunner().invoke(app, ["bench", "verify", "--dtype", "int8"])
    assert bad.exit_code == 2 and "--dtype" in bad.stderr
