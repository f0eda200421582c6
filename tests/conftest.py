"""Shared fixtures: the PyTorch and JAX oracles, which skip without their framework unless CI
requires it, and one summary line saying how to install torch when its tests were skipped."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import settings

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


# Hypothesis: CI runs the examples each test names. ATTNLAB_HYPOTHESIS_PROFILE=fuzz (what
# `make fuzz` sets) selects the "fuzz" profile: every property test runs ATTNLAB_HYPOTHESIS_SCALE
# (default 10) times its CI examples, its own settings(max_examples=...) included.
HYPOTHESIS_PROFILE = os.environ.get("ATTNLAB_HYPOTHESIS_PROFILE", "default")
HYPOTHESIS_SCALE = int(os.environ.get("ATTNLAB_HYPOTHESIS_SCALE", "10"))
settings.register_profile("fuzz", max_examples=100 * HYPOTHESIS_SCALE, deadline=None)
if HYPOTHESIS_PROFILE == "fuzz":
    settings.load_profile("fuzz")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "jax: compares against JAX (skips without jax unless ATTNLAB_REQUIRE_JAX=1)"
    )


def pytest_collection_modifyitems(items):
    """Under the fuzz profile, scale each property test's own max_examples (once per test)."""
    if HYPOTHESIS_PROFILE != "fuzz":
        return
    done = set()
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is None or id(test) in done:
            continue
        done.add(id(test))
        test._hypothesis_internal_use_settings = settings(
            own, max_examples=own.max_examples * HYPOTHESIS_SCALE, deadline=None
        )


@pytest.fixture(scope="module")
def client():
    """The web app under a TestClient on the loopback name it serves, one per test module (a
    module that needs other options, raise_server_exceptions=False say, defines its own)."""
    import warnings

    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


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


# The training labs at sizes that run in well under a second: the one table the lab tests share.
TRAINING_SMALL = {
    "train-induction": {
        "steps": 3,
        "batch": 4,
        "context": 8,
        "d_model": 8,
        "heads": 2,
        "vocab_size": 8,
        "fresh": 8,
    },
    "train-scaling": {
        "widths": (8,),
        "steps": 3,
        "batch": 4,
        "runs": 1,
        "context": 8,
        "vocab_size": 8,
    },
    "train-positions": {
        "steps": 3,
        "batch": 4,
        "context": 4,
        "d_model": 8,
        "vocab_size": 8,
        "fresh": 8,
    },
    "ablate-heads": {"fresh": 8},
}

# Every lab at sizes that run in well under a second, keyword arguments of its function (the web
# API and the CLI take the same names): the one table the lab tests share.
SMALL_LABS = {
    "variance": {"widths": (8, 16), "draws": 2_000},
    "saturation": {"trials": 40, "d_k": 32},
    "sweep": {"widths": (8, 32), "trials": 20, "draws": 500, "bins": 6},
    "permutation": {"d_model": 4},
    "cost": {"d_model": 16, "lengths": (8, 16), "repeats": 1},
    "proof": {"d_k": 16, "draws": 2_000},
    "gradient": {"widths": (8, 32), "keys": 8, "trials": 20, "d_v": 4},
    **TRAINING_SMALL,
}
