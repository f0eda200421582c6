"""The loader's limits: config.json values out of range, JSON that breaks a parser, files too
large to read, checkpoints past half of this machine's memory, layer counts past the tensors a
checkpoint holds. Each is one AttnlabError naming config.json (or the file) and the key, raised
before any table is built or any tensor read."""

from __future__ import annotations

import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.models import load
from attnlab.models._checkpoint import Checkpoint
from attnlab.web.realmodels import check_folder
from model_folders import BASE, hostile_safetensors, write_family


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: write_family(root / name, config) for name, config in BASE.items()}


def _with(tmp_path: Path, source: Path, change: dict | None = None, text: str | None = None):
    """A copy of folder ``source`` whose config.json has ``change`` applied (or is ``text``)."""
    folder = tmp_path / "m"
    shutil.copytree(source, folder)
    if text is None:
        config = json.loads((source / "config.json").read_text()) | (change or {})
        text = json.dumps(config)  # allow_nan: writes NaN and Infinity, as Python's json reads
    (folder / "config.json").write_text(text)
    return folder


def _refused(folder, *words, seconds: float = 5.0):
    start = time.monotonic()
    with pytest.raises(AttnlabError) as info:
        load(folder)
    assert time.monotonic() - start < seconds
    message = str(info.value)
    assert "\n" not in message and len(message) < 600, message
    for word in words:
        assert word in message, message
    return message


def test_every_base_family_loads_and_answers_finite_logits(folders):
    for name, folder in folders.items():
        run = load(folder).run([1, 2, 3, 4])
        width = 8 if run.output == "last hidden state" else 12  # BERT without its head: d_model
        assert run.logits.shape == (1, 4, width), name
        assert np.isfinite(run.logits).all(), name


@pytest.mark.parametrize(("family", "change", "key"), [
    ("gpt2", {"n_layer": 10**30}, "n_layer"),  # once built a name table of 10^30 entries first
    ("llama", {"num_hidden_layers": 10**30}, "num_hidden_layers"),
    ("llama", {"head_dim": 10**30}, "head_dim"),
    ("llama", {"vocab_size": 2**40}, "vocab_size"),
    ("gpt2", {"n_layer": 10**6}, "n_layer"),  # under 2^31, but past the tensors the file holds
    ("qwen2", {"num_hidden_layers": 2**31 - 1}, "num_hidden_layers"),
    ("gpt2", {"layer_norm_epsilon": float("nan")}, "layer_norm_epsilon"),
    ("llama", {"rms_norm_eps": float("inf")}, "rms_norm_eps"),
    ("gemma2", {"final_logit_softcapping": float("nan")}, "final_logit_softcapping"),
    ("gemma2", {"final_logit_softcapping": float("inf")}, "final_logit_softcapping"),
    ("gemma2", {"final_logit_softcapping": 1e-300}, "final_logit_softcapping"),
    ("gemma2", {"attn_logit_softcapping": -1.0}, "attn_logit_softcapping"),
    ("gemma2", {"query_pre_attn_scalar": 1e-300}, "query_pre_attn_scalar"),
    ("gpt2", {"activation_function": ["gelu_new"]}, "activation_function"),
    ("llama", {"hidden_act": {"silu": 1}}, "hidden_act"),
    ("qwen2", {"max_window_layers": "1"}, "max_window_layers"),
    ("qwen2", {"max_window_layers": 1.5}, "max_window_layers"),
    ("llama", {"rope_scaling": "yarn"}, "rope_scaling"),
    ("llama", {"rope_scaling": ["yarn", 2.0]}, "rope_scaling"),
    ("llama", {"rope_theta": float("nan")}, "rope_theta"),
    ("llama", {"rope_scaling": {"rope_type": ["yarn"]}}, "rope_type"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": float("inf"),
                                "original_max_position_embeddings": 8}}, "beta_fast"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": float("nan"),
                                "original_max_position_embeddings": 8}}, "factor"),
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
     "high_freq_factor"),
    ("gpt_oss", {"swiglu_limit": float("inf")}, "swiglu_limit"),
    ("gpt_oss", {"layer_types": [["sliding_attention"], "full_attention"]}, "layer_types"),
    ("gpt2", {"model_type": ["gpt2"]}, "model_type"),
    ("gpt_neox", {"rope_scaling": "linear"}, "rope_scaling"),
    ("gpt_neox", {"rotary_pct": float("nan")}, "partial_rotary_factor"),
    ("gemma3_text", {"rope_parameters": ["full_attention"]}, "rope_parameters"),
    ("phi3", {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.0],
                               "long_factor": [1.0, float("inf")], "factor": 2.0,
                               "original_max_position_embeddings": 8}}, "long_factor"),
    ("phi3", {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.0],
                               "long_factor": [1.0, 1.0], "attention_factor": float("nan"),
                               "original_max_position_embeddings": 8}}, "attention_factor"),
    ("llama4_text", {"attn_scale": float("nan")}, "attn_scale"),
])  # fmt: skip
def test_config_value_out_of_range_names_config_and_key(tmp_path, folders, family, change, key):
    _refused(_with(tmp_path, folders[family], change), "config.json", repr(key)[1:-1])


@pytest.mark.parametrize(("text", "words"), [
    ("[" * 200_000 + "]" * 200_000, ["config.json", "nests too deep"]),
    ('{"model_type": "gpt2", "n_layer": ' + "9" * 4400 + "}", ["config.json", "JSON"]),
    ('{"model_type": "gpt2",', ["config.json", "JSON"]),
])  # fmt: skip
def test_config_json_that_breaks_the_parser_is_one_error(tmp_path, folders, text, words):
    _refused(_with(tmp_path, folders["gpt2"], text=text), *words)


def test_huge_config_is_refused_without_reading_it(tmp_path, folders):
    folder = _with(tmp_path, folders["gpt2"])
    with open(folder / "config.json", "r+b") as f:
        f.truncate(300 * 2**20)  # 300 MB on paper, a hole on disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _refused(folder, "config.json", "MB", seconds=1.0)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100


def test_shard_index_that_breaks_the_parser_is_one_error(tmp_path, folders):
    folder = _with(tmp_path, folders["gpt2"])
    (folder / "model.safetensors.index.json").write_text("{" * 200_000)
    _refused(folder, "model.safetensors.index.json")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"wte.weight": "../elsewhere.safetensors"}})
    )
    _refused(folder, "model.safetensors.index.json", "inside")


def _physical_memory() -> int:
    """Total memory from /proc/meminfo: an oracle apart from the loader's os.sysconf."""
    meminfo = Path("/proc/meminfo")
    if not meminfo.is_file():
        pytest.skip("no /proc/meminfo to size the checkpoint against")
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no MemTotal in /proc/meminfo")


def _bomb(tmp_path, folders, dtype="F32") -> Path:
    """The GPT-2 folder plus a shard whose header declares a tensor as large as this machine's
    memory (with the file's bytes a hole): at float32, twice what the loader may take."""
    folder = _with(tmp_path, folders["gpt2"])
    rows = _physical_memory() // (4 * 1024) + 1
    hostile_safetensors(folder / "extra.safetensors", "extra.weight", (rows, 1024), dtype)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "extra.weight": "extra.safetensors",
        **{k: "model.safetensors" for k in _keys(folders["gpt2"])}}}))  # fmt: skip
    return folder


def _keys(folder: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", framework="numpy") as f:
        return list(f.keys())


def test_checkpoint_past_half_the_memory_is_refused_before_any_read(tmp_path, folders):
    folder = _bomb(tmp_path, folders, dtype="BF16")  # stored at 2 bytes, computed at 4
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message = _refused(folder, "'extra.weight'", "memory", "float32", seconds=2.0)
    assert "largest" in message
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 200  # MB
    with pytest.raises(AttnlabError, match=r"extra\.weight"):  # serve --model's check, too
        check_folder(folder)


def test_checkpoint_under_the_bound_is_not_refused(tmp_path, folders):
    # The same shard with a small declared tensor loads: the bound counts bytes, not files.
    folder = _with(tmp_path, folders["gpt2"])
    hostile_safetensors(folder / "extra.safetensors", "extra.weight", (1000, 1000))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "extra.weight": "extra.safetensors",
        **{k: "model.safetensors" for k in _keys(folders["gpt2"])}}}))  # fmt: skip
    ck = Checkpoint(folder, np.float32)  # the headers and the bound; no family involved
    assert ck.sizes["extra.weight"] == (1000, 1000) and "wte.weight" in ck
    check_folder(folder)


def test_serve_refuses_the_bomb_before_the_server_starts(tmp_path, folders, monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from attnlab.cli import app

    started = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: started.append(1))
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    folder = _bomb(tmp_path, folders)
    result = CliRunner().invoke(app, ["serve", "--model", str(folder), "--port", "1"])
    assert result.exit_code == 2, result.output
    assert "memory" in result.output and "extra.weight" in " ".join(result.output.split())
    assert started == []


def test_config_number_takes_signed_values_only_when_asked(tmp_path):
    from attnlab.models._config import Config

    cfg = Config({"shift": -0.5, "zero": 0, "nan": float("nan"), "big": 10**400}, tmp_path / "c")
    assert cfg.number("shift", positive=False) == -0.5 and cfg.number("zero", positive=False) == 0
    for key, positive in (("shift", True), ("zero", True), ("nan", False), ("big", False)):
        with pytest.raises(AttnlabError, match=key):
            cfg.number(key, positive=positive)
