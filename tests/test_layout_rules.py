"""Rules about the source as text and names: short functions, names that do not hide, and
references a newcomer can open (docs/style.md, "Modules and names").

- No function body in src/attnlab is over 80 lines (the signature's lines not counted).
- No function of ``attnlab.labs`` has the name of one of its submodules.
- No "issue" followed by a number in src/ or in a test's file name, and no reference to design
  or style files the repository does not hold.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"
MAX_FUNCTION_LINES = 80


# (file, function) of the blockwise kernel allowed over the limit for now: cut it, then
# delete its entry here.
def _long_functions(root: Path) -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                # From the first statement of the body (its docstring included): a signature
                # written out parameter by parameter, as FlashAttention's are, is not logic.
                lines = node.end_lineno - node.body[0].lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((path.relative_to(root).as_posix(), node.name, lines))
    return found


def test_no_function_over_80_lines():
    over = _long_functions(PACKAGE)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_the_function_scan_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    params = "".join(f"    p{i}=None,\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(
        f"def short():\n    pass\n\n\ndef long():\n{body}\n\n\n"
        f"def written_out(\n{params}):\n    pass\n"
    )
    # The long body is found; a long written-out signature over a short body is not.
    assert _long_functions(tmp_path) == [("m.py", "long", MAX_FUNCTION_LINES + 1)]


def test_no_lab_function_hides_a_submodule():
    labs = importlib.import_module("attnlab.labs")
    modules = {m.name for m in pkgutil.iter_modules(labs.__path__)}
    for name in modules:
        importlib.import_module(f"attnlab.labs.{name}")
    hidden = sorted(n for n in modules if callable(getattr(labs, n, None)))
    assert not hidden, f"attnlab.labs functions named like a submodule: {hidden}"


def test_the_lab_functions_keep_their_public_names():
    import attnlab as al

    for name in ("saturation", "permutation", "proof", "gradient", "variance_scaling"):
        assert callable(getattr(al.labs, name)), name


ISSUE = re.compile(r"issue\s*#?\d", re.IGNORECASE)
UNOPENABLE = re.compile(r"DESIGN\.md|STYLE\.md|\.\./shared")


def _texts(*folders: str):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".js", ".html", ".css", ".ipynb"}:
                yield path, path.read_text(encoding="utf-8")


def test_no_issue_number_in_the_source_or_test_names():
    bad = [str(p.relative_to(ROOT)) for p, text in _texts("src") if ISSUE.search(text)]
    bad += [p.name for p in (ROOT / "tests").rglob("*.py") if re.search(r"issue_?\d", p.name)]
    assert not bad


@pytest.mark.parametrize("folder", ["src", "tests", "docs"])
def test_every_cited_design_or_style_file_is_in_the_repository(folder):
    me = Path(__file__).name
    bad = [
        str(p.relative_to(ROOT))
        for p, text in _texts(folder)
        if p.name != me and UNOPENABLE.search(text)
    ]
    assert not bad
    assert (ROOT / "docs" / "design.md").exists() and (ROOT / "docs" / "style.md").exists()
