"""Shared fixtures: the PyTorch oracle, which skips without torch unless CI requires it."""

from __future__ import annotations

import importlib
import os

import pytest


def require_or_skip(module: str, env_var: str, why: str):
    """Import ``module``, or skip the test; when ``env_var`` is "1", fail instead of skipping."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get(env_var) == "1":
            pytest.fail(f"{module} is required ({env_var}=1) but cannot be imported: {why}")
        pytest.skip(f"{module} is not installed: {why}")


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the test-only oracle (install torch==2.13.0; ATTNLAB_REQUIRE_ORACLE=1 in CI)."""
    return require_or_skip("torch", "ATTNLAB_REQUIRE_ORACLE", "the PyTorch oracle tests need it")
