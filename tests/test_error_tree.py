"""The drawing of attnlab's errors in ``errors.py``'s docstring stays complete: every subclass
of ``AttnlabError``, in errors.py or anywhere else in the package, is drawn in its tree, and
the tree draws no class that does not exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from attnlab import errors

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnlab"


def _drawn() -> set[str]:
    """The class names on the tree's branches (``├── Name`` or ``└── Name``)."""
    return set(re.findall(r"[├└]── (\w+)", errors.__doc__))


def _subclasses_in_source() -> set[str]:
    """Every class in src/attnlab that derives, at any depth, from AttnlabError, read from the
    source (so that the web, notebook and verifier modules need not be imported)."""
    bases: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                bases.setdefault(node.name, set()).update(names)
    found = {"AttnlabError"}
    grown = True
    while grown:
        more = {name for name, of in bases.items() if of & found} - found
        found |= more
        grown = bool(more)
    return found - {"AttnlabError"}


def test_every_error_defined_in_errors_py_is_drawn():
    defined = {
        name
        for name, obj in vars(errors).items()
        if isinstance(obj, type)
        and issubclass(obj, errors.AttnlabError)
        and obj.__module__ == errors.__name__
    }
    assert "ShapeError" in defined
    assert defined <= _drawn() | {"AttnlabError"}


def test_the_tree_draws_exactly_the_package_s_attnlab_errors():
    drawn = _drawn() - {"AttnlabError"}
    found = _subclasses_in_source()
    assert found - drawn == set(), "subclasses of AttnlabError missing from errors.py's tree"
    assert drawn - found == set(), "classes in errors.py's tree that are not AttnlabErrors"
