"""Files a lab writes besides its plot: ``lab train-induction --save`` and the temporary files
of every writer.

``--save`` takes the ``--plot`` rules: checked before training (an existing file needs
``--force``, a folder or an unwritable place is refused), written atomically, one line on
failure. Every writer's temporary file has a name ``mkstemp`` chose, so a symlink planted
under a predictable name is never followed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import AttnlabError
from attnlab.transformer import TinyTransformer

TRAIN = ["lab", "train-induction", "--steps", "2", "--batch", "2", "--vocab-size", "16",
         "--context", "16", "--layers", "1", "--heads", "1", "--d-model", "8", "--fresh", "4"]  # fmt: skip
VARIANCE = ["lab", "variance", "--width", "16", "--draws", "2000"]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if the lab starts training: every refusal must come before the work."""
    import attnlab.labs.induction as induction

    def ran(*args, **kwargs):
        raise AssertionError("the lab trained before refusing")

    monkeypatch.setattr(induction, "fit", ran)


def test_save_refuses_an_existing_file_before_training(tmp_path, no_training):
    target = tmp_path / "m.npz"
    target.write_bytes(b"KEEP")
    one_line_error(run(*TRAIN, "--save", str(target)), "--save", "already exists", "--force")
    assert target.read_bytes() == b"KEEP" and os.listdir(tmp_path) == ["m.npz"]


def test_save_with_force_replaces_the_file_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "m.npz"
    target.write_bytes(b"OLD")
    result = run(*TRAIN, "--save", str(target), "--force")
    assert result.exit_code == 0, result.output
    assert TinyTransformer.load(target).config["d_model"] == 8
    assert os.listdir(tmp_path) == ["m.npz"]


@pytest.mark.parametrize("where", ["folder", "no-folder", "proc", "suffix"])
def test_save_refuses_a_place_it_cannot_write_before_training(tmp_path, no_training, where):
    target = {
        "folder": tmp_path,  # wrote tmp_path.npz beside the folder before
        "no-folder": tmp_path / "missing" / "m.npz",
        "proc": "/proc/attnlab-test.npz",  # a traceback after training before
        "suffix": tmp_path / "m.txt",  # np.savez wrote m.txt.npz
    }[where]
    one_line_error(run(*TRAIN, "--save", str(target)), "--save")
    assert os.listdir(tmp_path) == [] and not os.path.exists(f"{tmp_path}.npz")


def test_snapshots_without_save_are_refused(no_training):
    one_line_error(run(*TRAIN, "--snapshots", "2"), "--snapshots", "--save")


def test_a_plot_in_a_folder_that_refuses_writes_is_one_line_before_the_lab(monkeypatch):
    import attnlab.cli.labs as labs_cli

    monkeypatch.setattr(labs_cli, "_progress", lambda label: pytest.fail("the lab ran"))
    one_line_error(run(*VARIANCE, "--plot", "/proc/attnlab-test.html"), "--plot")


def test_verify_plot_in_a_folder_that_refuses_writes_is_refused_before_reading(tmp_path):
    missing = tmp_path / "not-read.npz"  # verify would fail on it, but only after the check
    result = run("verify", str(missing), "--plot", "/proc/attnlab-test.html")
    one_line_error(result, "--plot")


def test_model_save_is_atomic_and_names_the_file_on_failure(tmp_path, monkeypatch):
    model = TinyTransformer(vocab_size=8, context=4, layers=1, heads=1, d_model=4)
    target = tmp_path / "m.npz"
    target.write_bytes(b"KEEP")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(AttnlabError, match=r"m\.npz"):
        model.save(target)
    assert target.read_bytes() == b"KEEP" and os.listdir(tmp_path) == ["m.npz"]


def test_model_save_writes_exactly_the_name_given(tmp_path):
    model = TinyTransformer(vocab_size=8, context=4, layers=1, heads=1, d_model=4)
    model.save(tmp_path / "model")  # np.savez would have written model.npz
    assert os.listdir(tmp_path) == ["model"]
    assert np.array_equal(TinyTransformer.load(tmp_path / "model").params["embed"],
                          model.params["embed"])  # fmt: skip


def _planted(tmp_path, name: str):
    """A victim file and symlinks to it under every name a writer could predict."""
    victim = tmp_path / "victim.txt"
    victim.write_text("VICTIM")
    for guess in (f".{name}.{os.getpid()}.tmp", f".{name}.tmp", f"{name}.tmp", f".{name}.part"):
        (tmp_path / guess).symlink_to(victim)
    return victim


def test_verify_plot_never_follows_a_planted_temporary_name(tmp_path):
    from attnlab.verifier import verify, write_plot
    from verify_reference import inputs, reference

    q, k, v = inputs(np.random.default_rng(0))
    report = verify(q, k, v, reference(q, k, v, causal=True)["out"], causal=True)
    victim = _planted(tmp_path, "p.html")
    write_plot(report, tmp_path / "p.html")
    assert victim.read_text() == "VICTIM"
    assert "plotly" in (tmp_path / "p.html").read_text()


def test_write_plot_in_a_folder_that_refuses_writes_is_an_attnlab_error():
    from attnlab.verifier import verify, write_plot
    from verify_reference import inputs, reference

    q, k, v = inputs(np.random.default_rng(0))
    report = verify(q, k, v, reference(q, k, v, causal=True)["out"], causal=True)
    with pytest.raises(AttnlabError, match=r"attnlab-test\.html"):
        write_plot(report, "/proc/attnlab-test.html")


@pytest.mark.parametrize("option", [["--plot", "x.html"], ["--save", "x.npz"]])
def test_lab_writers_never_follow_a_planted_temporary_name(tmp_path, monkeypatch, option):
    monkeypatch.chdir(tmp_path)
    victim = _planted(tmp_path, option[1])
    args = TRAIN if option[0] == "--save" else VARIANCE
    result = run(*args, *option)
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "VICTIM" and (tmp_path / option[1]).stat().st_size > 100
