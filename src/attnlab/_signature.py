"""A public signature declared once as data, for parameter groups several functions share.

FlashAttention's eight options, a benchmark's run controls and ``attention``'s run options each
stand in several public signatures, and ``verify`` takes one argument per name a case already
declares. Written out in each, a default changed in one place would silently differ in another;
declared once, each function's signature is built from the same table and ``inspect.signature``,
``help`` and calls see exactly the parameters, order and defaults they saw before.

    group(kind, pairs)   the inspect.Parameter list for (name, default[, annotation]) tuples
    declared(*groups)    decorator: the function's signature is the groups in order; a call binds
                         its arguments to it (Python's own TypeError for a wrong one) and passes
                         them all to the body by keyword
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["KEYWORD", "POSITIONAL", "declared", "group", "required"]

POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def group(kind, pairs: Iterable[tuple]) -> list[inspect.Parameter]:
    """(name, default) or (name, default, annotation) tuples as parameters of ``kind``
    (POSITIONAL or KEYWORD); an annotation is a string, as ``from __future__ import
    annotations`` leaves one written in a ``def``."""
    return [
        inspect.Parameter(entry[0], kind, default=entry[1], annotation=_annotation(entry))
        for entry in pairs
    ]


def _annotation(entry: tuple) -> Any:
    return entry[2] if len(entry) > 2 else inspect.Parameter.empty


def required(*names: str) -> list[inspect.Parameter]:
    """Positional-or-keyword parameters without a default (the arrays a function takes)."""
    return [inspect.Parameter(name, POSITIONAL) for name in names]


def declared(
    *groups: list[inspect.Parameter], returns: Any = inspect.Signature.empty
) -> Callable[[Callable], Callable]:
    """Give the decorated body the signature ``groups`` declare, in order (``returns``: its
    return annotation).

    The body receives every parameter by keyword, defaults filled in, so it may take the
    shared ones as ``**options``; its docstring and name are kept.
    """
    signature = inspect.Signature([p for g in groups for p in g], return_annotation=returns)

    def decorate(body: Callable) -> Callable:
        @functools.wraps(body)
        def public(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as err:  # name the function, as Python's own message does
                raise TypeError(f"{body.__name__}() {err}") from None
            bound.apply_defaults()
            return body(**bound.arguments)

        public.__signature__ = signature
        return public

    return decorate
