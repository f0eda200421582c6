"""Shared fixtures: the PyTorch and JAX oracles, which skip without their framework unless CI
requires it, and one summary line saying how to install torch when its tests were skipped."""

from __future__ import annotations

import importlib
import os

import pytest

TORCH_INSTALL = ".venv/bin/pip install torch==2.13.0"
TORCH_SKIP = "torch is not installed"


def require_or_skip(module: str, env_var: str, why: str):
    """Import ``module``, or skip the test; when ``env_var`` is "1", fail instead of skipping."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get(env_var) == "1":
            pytest.fail(f"{module} is required ({env_var}=1) but cannot be imported: {why}")
        pytest.skip(f"{module} is not installed: {why}")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "jax: compares against JAX (skips without jax unless ATTNLAB_REQUIRE_JAX=1)"
    )


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the test-only oracle (install torch==2.13.0; ATTNLAB_REQUIRE_ORACLE=1 in CI)."""
    return require_or_skip("torch", "ATTNLAB_REQUIRE_ORACLE", "the PyTorch oracle tests need it")


@pytest.fixture(scope="session")
def jax():
    """JAX, the second oracle (in the dev extras; ATTNLAB_REQUIRE_JAX=1 in CI)."""
    return require_or_skip("jax", "ATTNLAB_REQUIRE_JAX", "the JAX oracle tests need it")


@pytest.fixture
def jax_x64(jax):
    """JAX with float64 enabled for this test only (a context, so it never leaks to others)."""
    with jax.enable_x64(True):
        yield jax


def torch_skip_summary(skip_reasons: list[str]) -> str | None:
    """The one line to print when torch's tests were skipped: how many, and how to install it.

    ``skip_reasons`` are the reasons of the skipped tests (pytest's "Skipped: ..." included).
    """
    count = sum(TORCH_SKIP in reason for reason in skip_reasons)
    if not count:
        return None
    return f"torch not installed: {count} tests skipped; install with {TORCH_INSTALL}"


def pytest_terminal_summary(terminalreporter):
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reasons.append(longrepr[2] if isinstance(longrepr, tuple) else str(longrepr))
    line = torch_skip_summary(reasons)
    if line:
        terminalreporter.write_line(line, yellow=True, bold=True)
