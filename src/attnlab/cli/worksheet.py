"""``attnlab worksheet``: the worked example with blanks and the exercises, as a printable
handout and its answer key (LaTeX, and PDF where pdflatex is installed)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from attnlab.cli._app import app, console, fail
from attnlab.cli._files import check_target, write_target

NAMES = {"worksheet": False, "answers": True}  # file stem -> with the answers
PDFLATEX_S = 60  # one compile of a two-page document takes about a second


def _pdf(tex: Path) -> Path:
    """Compile ``tex`` with pdflatex in a scratch folder; the PDF lands beside ``tex``."""
    with tempfile.TemporaryDirectory() as scratch:
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                              f"-output-directory={scratch}", str(tex)], capture_output=True,
                             text=True, timeout=PDFLATEX_S, check=False)  # fmt: skip
        made = Path(scratch) / (tex.stem + ".pdf")
        if run.returncode != 0 or not made.exists():
            last = next((line for line in run.stdout.splitlines()[::-1] if line.startswith("!")),
                        f"exit code {run.returncode}")  # fmt: skip
            raise fail(f"pdflatex: expected {tex.name} to compile, but it stopped with {last}")
        target = tex.with_suffix(".pdf")
        shutil.copyfile(made, target)
        return target


@app.command()
def worksheet(
    output: Annotated[Path, typer.Option("-o", "--output", help="the folder to write into")] = Path(
        "."
    ),
    pdf: Annotated[bool, typer.Option(help="also compile each with pdflatex")] = True,
    force: Annotated[bool, typer.Option(help="replace existing files")] = False,
) -> None:
    """Write worksheet.tex (the worked example's tables with blanks, then the exercises) and
    answers.tex (every table filled in, each exercise's answer and solution), and their PDFs."""
    from attnlab.figures.worksheet import worksheet_tex

    if not output.is_dir():
        raise fail(f"--output: expected an existing folder, but got {output}")
    if pdf and shutil.which("pdflatex") is None:
        raise fail("--pdf: expected pdflatex on the PATH (a TeX installation), but found none; "
                   "add --no-pdf to write the .tex files only")  # fmt: skip
    for stem in NAMES:
        check_target("--output", output / f"{stem}.tex", force)
        if pdf:
            check_target("--output", output / f"{stem}.pdf", force)
    for stem, answers in NAMES.items():
        tex = output / f"{stem}.tex"
        write_target("--output", tex, worksheet_tex(answers=answers), force)
        made = [tex] + ([_pdf(tex)] if pdf else [])
        console.print("wrote " + ", ".join(str(p) for p in made))
