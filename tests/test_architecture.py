"""The layout's rules, checked on the source: no import circle anywhere in src/attnlab (imports
inside functions included), no Python module over 400 lines, and the core never importing the
layers above it (docs/design.md, "Layers point down")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "attnlab"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every attnlab module ``name`` imports, at any depth of its code."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import mod` imports the submodule when there is one
            targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets.append(base)
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    # A module importing its own package's __init__ (to reach siblings) is not a circle.
    return {t for t in found if not name.startswith(t + ".")}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_scan_finds_a_circle_when_there_is_one():
    # The checker itself can fail: a two-module circle and a three-module one are found.
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_in_attnlab():
    assert _cycle(_graph()) is None, f"import circle: {' -> '.join(_cycle(_graph()))}"


def test_function_level_imports_are_seen():
    graph = _graph()
    # attnlab/__init__.py imports its lazy submodules inside __getattr__ via importlib, which
    # is not an import statement; the CLI imports the labs inside its commands.
    assert "attnlab.api.attention" in graph["attnlab"]
    assert any(t.startswith("attnlab.core") for t in graph["attnlab.api.multihead"])


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_over_400_lines(name):
    lines = len(_modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it along a seam"


def test_core_imports_nothing_above_it():
    above = ("attnlab.cli", "attnlab.web", "attnlab.labs", "attnlab.figures", "attnlab.bench")
    for name, targets in _graph().items():
        if name.startswith("attnlab.core"):
            bad = [t for t in targets if t.startswith(above)]
            assert not bad, f"{name} imports {bad}"


# The three floors: api/ dispatches, kernels/ computes fast, core/ is what a reader checks.
SPEED_MACHINERY = ("numba", "threading", "concurrent", "ctypes")


def _third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_core_holds_no_speed_machinery():
    graph = _graph()
    for name, path in _modules().items():
        if not name.startswith("attnlab.core"):
            continue
        upward = [t for t in graph[name] if t.startswith(("attnlab.kernels", "attnlab.api"))]
        assert not upward, f"{name} imports {upward}: core/ imports no kernel or dispatcher"
        machinery = _third_party_imports(path) & set(SPEED_MACHINERY)
        assert not machinery, f"{name} imports {sorted(machinery)}: speed lives in kernels/"


def test_the_floor_check_sees_a_kernel_import(tmp_path):
    # The checker can fail: a file importing threading and a kernel is caught by both scans.
    bad = tmp_path / "bad.py"
    bad.write_text("import threading\nfrom attnlab.kernels import blockwise\n")
    assert _third_party_imports(bad) & set(SPEED_MACHINERY) == {"threading"}
    assert "attnlab.kernels.blockwise" in _imports("attnlab.core.bad", bad, set(_modules()))


def test_kernels_never_import_the_dispatcher():
    graph = _graph()
    for name, targets in graph.items():
        if name.startswith("attnlab.kernels") or name.startswith("attnlab.core"):
            bad = [t for t in targets if t.startswith("attnlab.api")]
            assert not bad, f"{name} imports the dispatcher {bad}"
