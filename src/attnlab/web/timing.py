"""Measure the server-side time of each interaction at the page's default sizes.

    python -m attnlab.web.timing [repeats]

Reads the ``Server-Timing`` header the app sets (time from request to response start, in
process), so client and transport overhead are left out. A report, not a test: the numbers
depend on the machine and its load.
"""

from __future__ import annotations

import statistics
import sys
import warnings

from attnlab.web.app import create_app

__all__ = ["INTERACTIONS", "measure"]

# What one click, toggle or slider step on the page asks for, at the page's defaults.
INTERACTIONS = (
    ("stepper: load or toggle", "POST", "/api/trace", {}),
    ("stepper: causal mask off", "POST", "/api/trace", {"causal": False}),
    ("equation explainer", "GET", "/api/equation", None),
    ("histogram: d_k = 64 (first time)", "GET", "/api/histogram?d_k=64&seed=1", None),
    ("histogram: d_k = 256 (first time)", "GET", "/api/histogram?d_k=256&seed=1", None),
    ("histogram: d_k = 64 (again)", "GET", "/api/histogram?d_k=64&seed=1", None),
    ("histogram: toggle scaling", "GET", "/api/histogram?d_k=64&scaled=true&seed=1", None),
    ("permutation: shuffle", "POST", "/api/permutation", {"order": [3, 1, 4, 0, 2]}),
    (
        "permutation: positions on",
        "POST",
        "/api/permutation",
        {"order": [3, 1, 4, 0, 2], "positions": True},
    ),
    ("multi-head: pick a word", "GET", "/api/multihead?query=7", None),
    ("exercise: check", "POST", "/api/exercises/2/check", {"answer": 1.96}),
)


def _client(app):
    # starlette prefers httpx2 for its TestClient and warns when only httpx is installed.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient
    return TestClient(app, base_url="http://127.0.0.1")  # the app serves loopback names only


def measure(repeats: int = 5) -> list[tuple[str, float, float, int]]:
    """(interaction, first ms, median ms of the rest, status) for each interaction.

    The first call of a histogram width runs both labs; later calls are served from memory.
    """
    rows = []
    with _client(create_app()) as client:
        for label, method, url, body in INTERACTIONS:
            times, status = [], 0
            for _ in range(1 + repeats):
                response = client.request(method, url, json=body)
                status = response.status_code
                times.append(float(response.headers["server-timing"].split("dur=")[1]))
            rows.append((label, times[0], statistics.median(times[1:]), status))
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    repeats = int(argv[0]) if argv else 5
    print(f"{'interaction':<38} {'first ms':>9} {'median ms':>10}  status")
    for label, first, median, status in measure(repeats):
        print(f"{label:<38} {first:>9.1f} {median:>10.1f}  {status}")


if __name__ == "__main__":
    main()
