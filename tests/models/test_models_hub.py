"""Hub ids through a hand-made Hugging Face cache (no network is ever touched: HF_HUB_OFFLINE=1
and HF_HUB_CACHE at a temporary folder), hostile ids, and GPT-2's vocab.json + merges.txt
tokenizer against transformers' GPT2Tokenizer on the same files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.errors import AttnlabError
from attnlab.models import load
from conftest import require_or_skip
from model_folders import BASE, write_family

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hugging Face cache holding org/tiny at COMMIT (refs/main points at it), offline.
    The layout is the hub's: models--{org}--{name}/{refs/main, snapshots/{commit}/files}."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    write_family(repo / "snapshots" / COMMIT, BASE["llama"])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # so no folder named like the id is found by accident
    return repo


def test_hub_id_answers_from_the_cache_offline(hub):
    model = load("org/tiny")
    assert model.path == hub / "snapshots" / COMMIT
    by_folder = load(hub / "snapshots" / COMMIT)
    np.testing.assert_array_equal(model.run([1, 2, 3]).logits, by_folder.run([1, 2, 3]).logits)
    assert load("org/tiny", revision=COMMIT).path == model.path


def test_hub_id_not_in_the_cache_offline_is_one_error_saying_how(hub):
    with pytest.raises(AttnlabError) as info:
        load("org/absent")
    message = str(info.value)
    assert "'org/absent'" in message and "HF_HUB_OFFLINE" in message
    assert "hf download org/absent" in message and "\n" not in message
    with pytest.raises(AttnlabError, match="revision 'v9'"):
        load("org/tiny", revision="v9")


def test_a_folder_that_exists_wins_over_the_hub_id(hub, tmp_path):
    (tmp_path / "org").mkdir()
    shutil.copytree(hub / "snapshots" / COMMIT, tmp_path / "org" / "tiny")
    config = json.loads((tmp_path / "org" / "tiny" / "config.json").read_text())
    (tmp_path / "org" / "tiny" / "config.json").write_text(json.dumps(config | {"vocab_size": 7}))
    with pytest.raises(AttnlabError, match="embed_tokens"):  # the local folder was read
        load("org/tiny")


@pytest.mark.parametrize("bad", [
    "", "../x", "org/../x", "/abs/path/none", "a/b/c", "org//name", "-org/name", "org/name.",
    "org--x/name", "ｏｒｇ/name", "org/na me", "a" * 97, "~/nothing-here",
])  # fmt: skip
def test_hostile_hub_ids_are_one_error(hub, bad):
    with pytest.raises(AttnlabError) as info:
        load(bad)
    assert "\n" not in str(info.value)


ID_PARTS = st.sampled_from(["org", "tiny", "..", ".", "", "/", "//", "~", "-", "--", "a" * 97,
                            "\\", "C:", "ｏ", " ", "\x00", "%2e%2e", "org/tiny", "tiny/", "x"])  # fmt: skip


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.lists(ID_PARTS, max_size=5), revision=st.sampled_from([None, "main", "..", "", COMMIT])
)
def test_any_string_is_a_model_or_one_error_offline(hub, parts, revision):
    # Offline and in a folder of our own: a string is the cached org/tiny, or one AttnlabError.
    path = "".join(parts)
    try:
        model = load(path, revision=revision)
    except AttnlabError as exc:
        assert "\n" not in str(exc)
        return
    assert model.path == hub / "snapshots" / COMMIT


def test_hostile_revision_and_revision_with_a_folder(hub):
    for bad in ("", "../main", "main branch", 7):
        with pytest.raises(AttnlabError, match="revision"):
            load("org/tiny", revision=bad)
    with pytest.raises(AttnlabError, match="revision only with a hub id"):
        load(hub / "snapshots" / COMMIT, revision="main")


def test_hub_download_asks_only_for_what_load_reads(hub, monkeypatch):
    import huggingface_hub

    seen = {}

    def fake(repo, **kwargs):
        seen.update(kwargs, repo=repo)
        return str(hub / "snapshots" / COMMIT)

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    load("org/tiny", revision="main")
    assert seen["repo"] == "org/tiny" and seen["revision"] == "main"
    assert not seen["local_files_only"]
    patterns = seen["allow_patterns"]
    assert "config.json" in patterns and "*.safetensors" in patterns
    assert not any(
        p.endswith((".bin", ".pt", ".pth", ".pkl", "*")) for p in patterns if p != "*.safetensors"
    )


# ---- GPT-2's vocab.json + merges.txt ---------------------------------------------------------

TEXTS = [
    "Hello world, the cat sat on the mat.",
    "  two leading spaces and\ttabs\nand newlines  ",
    "naïve café – déjà vu 😀 ünïcödé",
    "numbers 12345 and 3.14159, it's they're we'll",
    "<|endoftext|>after the end token",
]


@pytest.fixture(scope="module")
def gpt2_bpe(tmp_path_factory):
    """A GPT-2 folder with a byte-level BPE trained on a few sentences, saved as GPT-2 ships it
    (vocab.json + merges.txt, no tokenizer.json)."""
    from tokenizers import ByteLevelBPETokenizer

    folder = write_family(tmp_path_factory.mktemp("bpe") / "gpt2", BASE["gpt2"])
    trainer = ByteLevelBPETokenizer()
    corpus = [t * 3 for t in TEXTS] + ["the quick brown fox jumps over the lazy dog"] * 5
    trainer.train_from_iterator(corpus, vocab_size=400, special_tokens=["<|endoftext|>"])
    trainer.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    # The model's vocabulary must hold the tokenizer's ids; the weights are rewritten to match.
    return write_family(folder, config | {"vocab_size": len(vocab)})


def test_vocab_and_merges_tokenize_as_transformers_gpt2_tokenizer(gpt2_bpe):
    transformers = require_or_skip(
        "transformers", "ATTNLAB_REQUIRE_ORACLE", "the tokenizer oracle needs it"
    )
    # transformers builds GPT-2's pipeline (byte-level split, regex, decoder) on its own
    # from the same two files; only the BPE merge loop is the shared tokenizers library.
    oracle = transformers.GPT2Tokenizer.from_pretrained(str(gpt2_bpe))
    model = load(gpt2_bpe)
    assert model.tokenizer_path.name == "vocab.json"
    for text in TEXTS:
        ids = model.tokenize(text)
        assert ids.tolist() == oracle.encode(text), text
        assert model.detokenize(ids) == oracle.decode(oracle.encode(text)), text


def test_run_takes_text(gpt2_bpe):
    model = load(gpt2_bpe)
    text = "the quick brown fox"
    np.testing.assert_array_equal(model.run(text).logits, model.run(model.tokenize(text)).logits)
    assert model.as_ids(text).shape == (1, len(model.tokenize(text)))


def test_merges_without_vocab_is_no_tokenizer(tmp_path, gpt2_bpe):
    folder = tmp_path / "m"
    shutil.copytree(gpt2_bpe, folder)
    (folder / "vocab.json").unlink()
    model = load(folder)
    assert model.tokenizer_path is None
    with pytest.raises(AttnlabError, match=r"vocab\.json"):
        model.tokenize("the cat")


def test_serve_takes_a_hub_id_from_the_cache(hub, monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from attnlab.cli import app

    apps = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self, sockets=None: apps.append(self.config.app)
    )
    monkeypatch.setattr("attnlab.cli.serve._check_port", lambda host, port: None)
    monkeypatch.setattr("attnlab.figures.histogram.warm", lambda: None)
    result = CliRunner().invoke(app, ["serve", "--model", "org/tiny"])
    assert result.exit_code == 0, result.output
    (entry,) = apps[0].state.models.entries.values()
    assert entry.name == "tiny" and entry.path == hub / "snapshots" / COMMIT  # not the commit
    apps[0].state.models.wait()
    assert entry.status == "ready"
    missing = CliRunner().invoke(app, ["serve", "--model", "org/absent"])
    assert missing.exit_code == 2 and "hf download org/absent" in " ".join(missing.output.split())
