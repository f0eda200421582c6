"""``attnlab model PATH`` on a tiny random GPT-2 folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.models import load, write_tiny_gpt2


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("tiny"), layers=2, d_model=16, heads=2)


def invoke(*args):
    return CliRunner().invoke(app, ["model", *map(str, args)])


def test_summary_names_shape_layers_and_heads(folder):
    result = invoke(folder, "--text", "the cat sat on the mat . the cat sat")
    assert result.exit_code == 0, result.output
    assert "2 layers, d_model 16, 2 heads" in " ".join(result.output.split())
    assert "0: full; 1: full" in result.output
    for kind in ("previous_token", "induction", "duplicate_token", "first_token"):
        assert kind in result.output


def test_json_row_is_the_runs_row(folder):
    result = invoke(
        folder, "--ids", "1, 2, 3, 1, 2", "--layer", 1, "--head", 1, "--query", 3, "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    run = load(folder).run([1, 2, 3, 1, 2])
    np.testing.assert_allclose(data["trace"]["weights"][0], run.attention[1][0, 1, 3], atol=1e-6)
    assert data["trace"]["masked"][0][4] == "-inf"
    assert data["layers"] == ["full", "full"]
    top = data["strongest_heads"]["previous_token"][0]
    assert top["attnlab"] == pytest.approx(
        run.head_scores().scores["previous_token"][top["layer"], top["head"]]
    )


@pytest.mark.parametrize(("args", "match"), [
    (["--layer", 0], "together"),
    (["--ids", "1, x"], "--ids"),
    (["--ids", "1 2", "--layer", 5, "--head", 0, "--query", 0], "layer"),
    (["--ids", "999"], "token ids"),
])  # fmt: skip
def test_bad_options_are_one_line(folder, args, match):
    result = invoke(folder, *args)
    assert result.exit_code == 2
    assert match in result.output and len(result.output.strip().splitlines()) == 1


def test_bad_folder_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    result = invoke(tmp_path)
    assert result.exit_code == 2
    assert "gpt2, llama" in result.output and "Traceback" not in result.output
