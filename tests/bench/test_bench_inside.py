"""The inside-a-model rows of ``attnlab bench model`` as printed (no timing here: the
measurements run only in the benchmark)."""

from __future__ import annotations

from attnlab.bench._model import ModelReport


def test_rows_print_their_ratio_against_each_target():
    rows = [
        {"what": "cache", "attnlab_s": 1.2, "other_s": 1.0, "ratio": 1.2, "attnlab_mib": 700.0,
         "other_mib": None, "agree": None},
        {"what": "patch", "attnlab_s": 10.0, "other_s": 12.0, "ratio": 1.2, "attnlab_mib": 800.0,
         "other_mib": 900.0, "agree": "max |Δ| 1.0e-06"},
        {"what": "generate", "attnlab_s": 2.0, "other_s": 3.0, "ratio": 1.5, "attnlab_mib": 500.0,
         "other_mib": 880.0, "agree": "64/64 tokens"},
    ]  # fmt: skip
    text = ModelReport(inside=rows).format()
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "PASS" in lines["cache"] and "at most 1.3" in lines["cache"]  # 1.2 <= 1.3
    assert "FAIL" in lines["patch"] and "at least 1.5" in lines["patch"]  # 1.2 < 1.5
    assert "PASS" in lines["generate"] and "64/64 tokens" in lines["generate"]
    assert "1200.0" in lines["cache"] and "1000.0" in lines["cache"]  # milliseconds
    assert ModelReport().format().count("\n") < text.count("\n")


def test_the_turns_alternate_and_time_each_call(monkeypatch):
    from attnlab.bench import _inside

    clock = iter(range(100))  # each perf_counter reading one second later
    monkeypatch.setattr(_inside.time, "perf_counter", lambda: float(next(clock)))
    order = []
    first, second = _inside._turns(lambda: order.append("a"), lambda: order.append("b"), 4)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]  # warm, then ABBA
    assert (first, second) == (1.0, 1.0)


def test_a_side_that_cannot_load_says_why():
    import pytest

    from attnlab.bench._model import _Side

    with pytest.raises(RuntimeError, match=r"(?s)attnlab forward process ended.*no-such-folder"):
        _Side("attnlab", "/no-such-folder", 8)
