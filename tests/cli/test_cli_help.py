"""``attnlab --help`` reads as prose: each command's help is reflowed by the terminal, so no line
breaks mid-sentence where the source's docstring was wrapped (``attention``'s "(and the
gradients' with" / "--backward)." did)."""

from __future__ import annotations

from typer.testing import CliRunner

from attnlab.cli import app

runner = CliRunner()


def _commands(typer_app):
    yield from typer_app.registered_commands
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance)


def test_every_commands_help_has_no_break_inside_a_paragraph():
    for info in _commands(app):
        for paragraph in (info.help or "").split("\n\n"):
            assert "\n" not in paragraph, (info.name, paragraph)


def test_a_wide_terminal_shows_a_commands_sentence_on_one_line():
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "160"}, terminal_width=160).stdout
    (row,) = [line for line in out.splitlines() if "Trace attention on any small case" in line]
    # Wide enough for the whole sentence: it is not cut where the source's docstring was.
    assert "(and the gradients' with --backward)." in row
