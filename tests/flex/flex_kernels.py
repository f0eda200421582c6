"""The flex tests' kernel pin: which attention kernel the named mods' calls take. A module of
its own, imported by the tests that use it, not a conftest.py: a second conftest module would
take the name ``conftest`` that the other test files import their helpers from."""

from __future__ import annotations

import functools

from attnlab.api.attention import attention
from attnlab.api.backward import attention_backward
from attnlab.flex import attention as flex_module

METHODS = ["dense", "blockwise"]


def pin_method(method: str, monkeypatch) -> str:
    """Pin the kernel of the named mods' attention calls, forward and backward (at the tests'
    sizes "auto" would pick dense every time)."""
    monkeypatch.setattr(flex_module, "attention", functools.partial(attention, method=method))
    monkeypatch.setattr(
        flex_module, "attention_backward", functools.partial(attention_backward, method=method)
    )
    return method
