"""``attnlab.bench`` refuses bad arguments as attnlab does everywhere: an ``AttnlabError`` that
names the argument, raised before anything is measured."""

from __future__ import annotations

import pytest

from attnlab import bench
from attnlab.bench import _suite
from attnlab.errors import AttnlabError


@pytest.fixture
def nothing_measured(monkeypatch):
    """Fails the test if a configuration is measured (the refusal must come first)."""

    def measured(cfg):
        raise AssertionError(f"{cfg} was measured before the bad argument was refused")

    monkeypatch.setattr(_suite, "measure", measured)
    monkeypatch.setattr(_suite, "gemm_ceiling", lambda: 100.0)


TINY = {"heads": 1, "d": 4, "repeats": 1, "use_torch": False, "isolate": False}


@pytest.mark.parametrize(
    ("run", "masks", "named"),
    [
        (bench.attention, ("none", "diagonal"), "'diagonal'"),
        (bench.backward, ("window",), "'window'"),
        (bench.backward, ("causal", "Causal"), "'Causal'"),
    ],
)
def test_an_unknown_mask_is_an_attnlab_error(run, masks, named, nothing_measured):
    with pytest.raises(AttnlabError, match=rf"expected masks among .* but got {named}"):
        run([16], masks=masks, **TINY)


@pytest.mark.parametrize("run", [bench.attention, bench.backward])
@pytest.mark.parametrize("rounds", [0, 1.5])
def test_bad_rounds_are_an_attnlab_error(run, rounds, nothing_measured):
    with pytest.raises(AttnlabError, match=r"expected rounds to be a whole number"):
        run([16], rounds=rounds, **TINY)


def test_torch_beside_a_window_mask_is_reported_as_an_attnlab_error():
    # measure() reports a failed configuration in its Result instead of raising: the refusal
    # of a window mask for torch's backward is an AttnlabError there too (torch is not needed:
    # the mask is refused before torch runs, but after it is imported).
    pytest.importorskip("torch")
    cfg = bench.Config("torch", 16, heads=1, d=4, mask="window", backward=True, repeats=1)
    result = bench.measure(cfg)
    assert result.error is not None and result.error.startswith("AttnlabError: expected mask")
