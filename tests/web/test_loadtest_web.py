"""The load test runs end to end on a tiny load: a real ``attnlab serve`` on loopback, stopped after."""

from __future__ import annotations

import math

from attnlab.web import loadtest


def test_a_tiny_load_is_answered_and_reported(capsys):
    result = loadtest.run(requests=40, concurrency=4, queued=3, warm=False)
    tallies = result["tallies"]
    assert sum(len(t.times) for t in tallies.values()) >= 40 + 3 + 50
    assert all(not t.errors and t.count(500, 599) == 0 for t in tallies.values())
    assert tallies["figure"].count(200, 299) == 36 and tallies["lab"].count(200, 299) == 4
    assert all(math.isfinite(p) for p in tallies["figure"].percentiles())
    assert 0 < result["rss"]["start"] and 0 < result["rss"]["middle"] <= 4 * result["rss"]["end"]
    loadtest.report(result, 40, 4, 3)
    printed = capsys.readouterr().out
    for words in ("figure routes p99", "< 250 ms", "GET / p99 while 3 labs queued", "RSS start"):
        assert words in printed


def test_percentiles_and_rss_reading():
    tally = loadtest.Tally()
    for ms in range(1, 101):
        tally.add(200 if ms < 100 else 503, float(ms))
    assert tally.percentiles() == (50.5, 95.05, 99.01)
    assert tally.count(500, 599) == 1
    import os

    assert loadtest.rss_mib(os.getpid()) > 1
