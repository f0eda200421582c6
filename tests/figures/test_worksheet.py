"""The worksheet and its answer key: the key's numbers are the worked example's, computed here
by hand in numpy; the worksheet leaves a blank for each of them and shows none; both compile
with pdflatex (where TeX is installed); the command refuses to overwrite."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.core.numbers import format_number
from attnlab.figures.worksheet import BLANK, FILLED, escape, worksheet_tex

Q = np.array([[3.0, -3.0], [1.0, 1.0]])
K = np.array([[-3.0, 3.0], [1.0, 1.0]])
V = np.array([[0.0, -1.0], [1.0, 2.0]])


def _by_hand() -> list[float]:
    """Every finite number the class works out, from the chapter's equation."""
    s = Q @ K.T
    scaled = s / np.sqrt(2)
    masked = np.where(np.tril(np.ones((2, 2))) > 0, scaled, -np.inf)
    e = np.exp(masked - masked.max(axis=1, keepdims=True))
    w = e / e.sum(axis=1, keepdims=True)
    return [x for t in (s, scaled, w, w @ V) for x in t.ravel()]


def test_the_key_holds_every_number_and_the_worksheet_none():
    key, sheet = worksheet_tex(answers=True), worksheet_tex()
    for x in _by_hand():
        assert f" {format_number(x)} " in key.replace(r"\\", " ")
    assert sheet.count(BLANK) == 4 * len(FILLED)  # every 2 x 2 table worked out, blank
    assert format_number(_by_hand()[-1]) not in sheet and "0.8044" not in sheet
    assert r"\textit{Solution.}" in key and r"\textit{Solution.}" not in sheet
    assert sheet.count(r"\item ") == key.count(r"\item ") == 7  # the seven exercises


def test_escape_keeps_latex_special_characters_literal():
    assert escape("d_k & 50% {x} #1 √d") == r"d\_k \& 50\% \{x\} \#1 \ensuremath{\surd}d"
    assert escape("日本") == "??"  # never a character pdflatex would stop on


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_the_command_writes_both_and_they_compile(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["worksheet", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    for stem in ("worksheet", "answers"):
        pdf = tmp_path / f"{stem}.pdf"
        assert pdf.read_bytes().startswith(b"%PDF") and (tmp_path / f"{stem}.tex").exists()
    text = subprocess.run(["pdftotext", str(tmp_path / "answers.pdf"), "-"], capture_output=True,
                          text=True, check=False).stdout if shutil.which("pdftotext") else ""  # fmt: skip
    assert not text or "answer key" in text
    again = runner.invoke(app, ["worksheet", "-o", str(tmp_path)])
    assert again.exit_code == 2 and "already exists" in again.output


def test_without_pdf_only_the_tex_files_and_a_bad_folder_is_named(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["worksheet", "-o", str(tmp_path), "--no-pdf"])
    assert r.exit_code == 0 and sorted(p.name for p in tmp_path.iterdir()) == [
        "answers.tex", "worksheet.tex"]  # fmt: skip
    bad = runner.invoke(app, ["worksheet", "-o", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "--output: expected an existing folder" in bad.output
