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
    (["--ablate", "9.0"], "--ablate"),
    (["--ablate", "1-0"], "LAYER.HEAD"),
    (["--ablate", "1.0", "--position", 99], "--position"),
    (["--attribute", "cat sat"], "--attribute"),
    (["--generate", 0], "--generate"),
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


def _argmax_greedy(model, ids, n):
    """Greedy decoding by hand: the whole sequence run again for each new token (no cache)."""
    ids = list(ids)
    for _ in range(n):
        ids.append(int(np.argmax(model.run(ids).logits[0, -1])))
    return ids


def test_tokens_row_and_trace_are_readable_at_80_columns(tmp_path, monkeypatch):
    from attnlab.cli._app import console

    monkeypatch.setattr(console, "width", 80)  # an 80-column terminal, whatever COLUMNS says
    wide = write_tiny_gpt2(tmp_path / "wide", layers=1, d_model=64, heads=2)
    text = " ".join(["the cat sat on the mat ."] * 5)  # 35 tokens: a 35-column row once
    result = invoke(wide, "--text", text, "--layer", 0, "--head", 1, "--query", 30)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.output  # no cell folded away
    assert "0:the" in result.output and "34:." in result.output
    weights = load(wide).run(text).attention[0][0, 1, 30]
    key_lines = [
        line for line in lines if line.startswith("│") and line.split("│")[1].strip().isdigit()
    ]
    assert len(key_lines) == 35
    for j, line in enumerate(key_lines):
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert (
            cells[0] == str(j) and cells[1] == load(wide).tokens([load(wide).tokenize(text)[j]])[0]
        )
        assert float(cells[-1]) == pytest.approx(weights[j], abs=1e-3)


def test_lens_attribute_ablate_and_generate_in_json(folder):
    ids = "1, 2, 3, 1, 2"
    result = invoke(folder, "--ids", ids, "--lens", "--attribute", "cat", "--ablate", "1.0",
                    "--generate", 4, "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    model = load(folder)
    values = [1, 2, 3, 1, 2]
    logits = model.run(values).logits[0, -1].astype(np.float64)
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    last = data["lens"]["layers"][-1]
    assert last["id"] == int(np.argmax(logits)) and last["p"] == pytest.approx(p.max(), rel=1e-5)
    cat = int(model.tokenize("cat")[0])
    a = data["attribution"]
    assert a["id"] == cat and a["logit"] == pytest.approx(float(logits[cat]), rel=1e-5)
    assert sum(a["all"].values()) == pytest.approx(a["logit"], rel=1e-4, abs=1e-6)

    def zero_head(z, name):  # (B, N, h, d): head 0 of layer 1 set to zero by hand
        z = z.copy()
        z[:, :, 0] = 0
        return z

    after = model.run(values, hooks={"blocks.1.attn.hook_z": zero_head}).logits[0, -1]
    q = np.exp(after - after.max()) / np.exp(after - after.max()).sum()
    assert [row[2] for row in data["ablation"]["after"]] == np.argsort(-q)[:5].tolist()
    assert data["generated"] == _argmax_greedy(model, values, 4)[5:]


def test_generate_streams_the_text(folder):
    result = invoke(folder, "--text", "the cat sat on", "--generate", 3)
    assert result.exit_code == 0, result.output
    model = load(folder)
    new = _argmax_greedy(model, model.tokenize("the cat sat on"), 3)[-3:]
    assert model.detokenize(new) in result.output.split("Generated (greedy):")[1]


def test_hub_id_offline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = invoke("org/absent")
    assert result.exit_code == 2
    assert "hf download org/absent" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_download_draws_rich_bars(folder, tmp_path, monkeypatch):
    import huggingface_hub
    from rich.console import Console

    from attnlab.cli import _app, model

    seen = {}

    def fake(repo, **kwargs):  # what snapshot_download does with its tqdm_class
        bar = kwargs["tqdm_class"](total=0, desc="Downloading bytes", unit="B")
        bar.total = 1000
        bar.update(400)
        bar.update(600)
        bar.close()
        seen["bar"] = bar
        return str(folder)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setattr(_app, "err_console", Console(file=__import__("io").StringIO()))
    monkeypatch.setattr(model, "err_console", _app.err_console)
    loaded = model._load("org/tiny", None, "float32", quiet=False)
    assert loaded.path == folder and seen["bar"].n == 1000
    assert isinstance(seen["bar"], __import__("tqdm").tqdm)
    assert seen["bar"].fp.getvalue().strip() == ""  # tqdm itself drew no bar: Rich did
