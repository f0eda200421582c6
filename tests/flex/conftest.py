"""The flex tests' shared fixture: which attention kernel the named mods' calls take."""

from __future__ import annotations

import functools

import pytest

from attnlab.api.attention import attention
from attnlab.api.backward import attention_backward
from attnlab.flex import attention as flex_module


@pytest.fixture(params=["dense", "blockwise"])
def method(request, monkeypatch):
    """Pin the kernel of the named mods' attention calls, forward and backward (at these sizes
    "auto" would pick dense every time)."""
    monkeypatch.setattr(
        flex_module, "attention", functools.partial(attention, method=request.param)
    )
    monkeypatch.setattr(
        flex_module,
        "attention_backward",
        functools.partial(attention_backward, method=request.param),
    )
    return request.param
