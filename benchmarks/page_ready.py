"""How long the explorer's cold page takes to become usable: navigation start to the page's
``attnlab-ready`` mark (the first screen usable) and to its ``attnlab-charts`` mark (every chart
drawn), in Debian's Chromium driven by Playwright.

The explorer runs under uvicorn on a free 127.0.0.1 port in a background thread (warm: one load
first, not counted); each counted load opens a fresh browser context (nothing cached) at
1280 x 900 with every request outside the server blocked, as the browser tests load it. The
times are printed and written as JSON (default ``test-artifacts/ready.json``); docs/bench.md
records them. What makes the load fast (no lab request, modules preloaded, plotly.js after
ready) is asserted by the browser tests instead, never a time. Run:

    PYTHONPATH=src python benchmarks/page_ready.py [--rounds 5] [--out test-artifacts/ready.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from attnlab.web import create_app

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
OUT = Path(__file__).resolve().parent.parent / "test-artifacts" / "ready.json"
MARKS = "['ready', 'charts'].map(n => performance.getEntriesByName('attnlab-' + n)[0].startTime)"


def serve():
    """(the explorer's address, a function that stops it), uvicorn in a background thread."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # the OS picks a free port; uvicorn serves on this very socket
    host, port = sock.getsockname()
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not server.started:
        raise SystemExit("the explorer did not start within 20 s")

    def stop():
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()

    return f"http://{host}:{port}", stop


def cold_load(browser, origin: str) -> tuple[float, float]:
    """(ready ms, charts ms) of one load in a fresh context, outside requests blocked."""
    allowed = urlparse(origin)

    def offline(route):
        url = urlparse(route.request.url)
        if url.scheme in ("data", "blob") or (url.hostname, url.port) == (
            allowed.hostname,
            allowed.port,
        ):
            route.continue_()
        else:
            route.abort()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.route("**/*", offline)
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(origin + "/")
        page.wait_for_selector("body[data-charts='drawn']", state="attached")
        ready, charts = page.evaluate(MARKS)
    finally:
        context.close()
    return ready, charts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="cold loads counted (default 5)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON is written")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"expected --rounds to be at least 1, but got {args.rounds}")
    from playwright.sync_api import sync_playwright

    origin, stop = serve()
    times: dict[str, list[float]] = {"ready": [], "charts": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            cold_load(browser, origin)  # warms the server; not counted
            for _ in range(args.rounds):
                ready, charts = cold_load(browser, origin)
                times["ready"].append(ready)
                times["charts"].append(charts)
            browser.close()
    finally:
        stop()
    result = {f"{name}_ms": [round(t) for t in ts] for name, ts in times.items()}
    result |= {f"{name}_median_ms": round(statistics.median(ts)) for name, ts in times.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result) + "\n")
    print("cold page ready:", result)


if __name__ == "__main__":
    main()
