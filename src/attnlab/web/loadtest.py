"""A bounded load test of ``attnlab serve`` on this machine (``make loadtest``).

    python -m attnlab.web.loadtest [--requests 2000] [--concurrency 32] [--queued 60]

Starts ``attnlab serve`` on a free 127.0.0.1 port in a subprocess, then, over loopback only:

1. sends ``--requests`` requests, ``--concurrency`` at a time, over the figure routes (the page's
   own interactions at its defaults) and the lab routes (small labs);
2. queues ``--queued`` lab requests at once and, while they are pending, times ``GET /``;
3. reads the server's resident memory (VmRSS of /proc/PID/status) at start, middle and end,

prints errors, 5xx, 429s, p50/p95/p99 per route group beside the targets, stops the server and
exits (status 1 when a target is missed). A 429 from a lab route is the lab queue refusing more
work: it is counted on its own, not as an error.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TARGETS", "Tally", "main", "run", "stop"]

TARGETS = {
    "figure_p99_ms": 250.0,  # figure routes, at concurrency 32
    "page_p99_ms": 100.0,  # GET / while the labs are queued
    "rss_growth": 0.10,  # RSS from the middle to the end grows by at most 10%: it levels off
}
HOST = "127.0.0.1"

# What the page asks for (at its defaults; the histogram at its slider's widths, seed 0).
FIGURES = [
    ("POST", "/api/trace", {}),
    ("POST", "/api/trace", {"causal": False}),
    ("POST", "/api/trace", {"q": [[1, 0, 2], [0, 1, 1], [2, 1, 0], [1, 1, 1]], "k": [[1, 2, 0],
     [0, 1, 1], [1, 0, 1], [2, 2, 2]], "v": [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]}),
    *[("GET", f"/api/histogram?d_k={d}&scaled={s}", None) for d in (16, 64, 128, 256)
      for s in ("false", "true")],
    ("POST", "/api/permutation", {"order": [3, 1, 4, 0, 2]}),
    ("POST", "/api/permutation", {"order": [0, 4, 2, 3, 1], "positions": True}),
    ("GET", "/api/multihead?query=7", None),
    ("GET", "/api/equation", None),
    ("GET", "/api/config", None),
]  # fmt: skip
LABS = [
    ("GET", "/api/labs/saturation?trials=20&keys=16&d_k=16", None),
    ("GET", "/api/labs/variance?draws=2000&widths=16", None),
    ("GET", "/api/labs/permutation", None),
]
QUEUED_LAB = ("GET", "/api/labs/saturation?trials=500&keys=64&d_k=128", None)  # ~0.3 s each
LAB_SHARE = 10  # one request in ten is a lab


@dataclass
class Tally:
    times: list[float] = field(default_factory=list)  # ms of the answered requests
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # no answer: refused, reset, timed out

    def add(self, status: int, ms: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.times.append(ms)

    def count(self, low: int, high: int) -> int:
        return sum(n for s, n in self.statuses.items() if low <= s <= high)

    def percentiles(self) -> tuple[float, float, float]:
        if len(self.times) < 2:
            only = self.times[0] if self.times else float("nan")
            return only, only, only
        cuts = statistics.quantiles(self.times, n=100, method="inclusive")
        return cuts[49], cuts[94], cuts[98]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"expected a VmRSS line in /proc/{pid}/status, but found none")


async def _one(client, method: str, url: str, body, tally: Tally) -> None:
    start = time.perf_counter()
    try:
        response = await client.request(method, url, json=body)
    except Exception as exc:  # a load test reports every failure to answer, whatever its kind
        tally.errors.append(f"{method} {url}: {type(exc).__name__}: {exc}"[:200])
        return
    tally.add(response.status_code, (time.perf_counter() - start) * 1000)


async def _mixed(client, total: int, concurrency: int, tallies: dict[str, Tally], on_half):
    plan = []
    figures, labs = itertools.cycle(FIGURES), itertools.cycle(LABS)
    for i in range(total):
        group = "lab" if i % LAB_SHARE == LAB_SHARE - 1 else "figure"
        plan.append((group, *(next(labs) if group == "lab" else next(figures))))
    jobs = iter(enumerate(plan))

    async def worker():
        for i, (group, method, url, body) in jobs:
            if i == total // 2:
                on_half()
            await _one(client, method, url, body, tallies[group])

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _page_while_queued(client, queued: int, page: Tally, labs: Tally) -> None:
    method, url, body = QUEUED_LAB
    pending = [asyncio.create_task(_one(client, method, url, body, labs)) for _ in range(queued)]
    await asyncio.sleep(0.2)  # let the lab requests reach the server first
    while not all(task.done() for task in pending) or len(page.times) < 50:
        await _one(client, "GET", "/", None, page)
        await asyncio.sleep(0.02)
        if len(page.times) >= 500:
            break
    await asyncio.gather(*pending)


async def _warm_up(client) -> float:
    """Ask once, in turn, for what the page can ask (every slider width): seconds taken.

    ``attnlab serve`` computes the √d_k figure at every width in the background on start; this
    waits for that, so the measurement is of a server a learner has been using, not one
    still starting."""
    started = time.perf_counter()
    h = (await client.get("/api/config")).json()["histogram"]
    for d_k in range(h["d_k_min"], h["d_k_max"] + 1, h["d_k_step"]):
        for scaled in ("false", "true"):
            await client.get(f"/api/histogram?d_k={d_k}&scaled={scaled}")
    for method, url, body in [*FIGURES, *LABS]:
        await client.request(method, url, json=body)
    return time.perf_counter() - started


async def _load(base: str, pid: int, requests: int, concurrency: int, queued: int, warm: bool):
    import httpx

    tallies = {g: Tally() for g in ("figure", "lab", "page", "queued lab")}
    limits = httpx.Limits(max_connections=concurrency + queued + 4)
    async with httpx.AsyncClient(base_url=base, timeout=60.0, limits=limits) as client:
        warm_s = await _warm_up(client) if warm else 0.0
        rss = {"start": rss_mib(pid)}
        started = time.perf_counter()
        await _mixed(
            client, requests, concurrency, tallies, lambda: rss.setdefault("middle", rss_mib(pid))
        )
        seconds = time.perf_counter() - started
        await _page_while_queued(client, queued, tallies["page"], tallies["queued lab"])
    rss["end"] = rss_mib(pid)
    return {"tallies": tallies, "rss": rss, "seconds": seconds, "warm": warm_s}


def _start_server(port: int) -> subprocess.Popen:
    command = [sys.executable, "-c", "from attnlab.cli import main; main()", "serve"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [*command, "--host", HOST, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )


def _wait_until_up(base: str, server: subprocess.Popen, seconds: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"attnlab serve exited: {server.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(base + "/api/config", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"expected attnlab serve to answer within {seconds:.0f} s, but it did not")


def run(requests: int = 2000, concurrency: int = 32, queued: int = 60, warm: bool = True) -> dict:
    """Start a server, load it, stop it; the measurements as a dict."""
    port = _free_port()
    base = f"http://{HOST}:{port}"
    server = _start_server(port)
    try:
        _wait_until_up(base, server)
        return asyncio.run(_load(base, server.pid, requests, concurrency, queued, warm))
    finally:
        stop(server)
        server.stderr.close()


def stop(server: subprocess.Popen, grace: float = 20.0) -> None:
    """Stop a server process: SIGTERM, then SIGKILL if it has not exited within ``grace`` s."""
    server.terminate()
    try:
        server.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(result: dict, requests: int, concurrency: int, queued: int) -> bool:
    """Print the results beside the targets; True when every target is met."""
    tallies, rss = result["tallies"], result["rss"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"warm-up {result['warm']:.1f} s; {requests} requests at concurrency {concurrency} in "
          f"{result['seconds']:.1f} s, then {queued} labs queued at once while GET / is timed "
          f"({os.cpu_count()} CPUs, load average {load})")  # fmt: skip
    print(f"{'group':<11} {'sent':>5} {'2xx':>5} {'429':>4} {'5xx':>4} {'other':>5} {'errors':>6}"
          f" {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")  # fmt: skip
    for name, t in tallies.items():
        sent = len(t.times) + len(t.errors)
        other = len(t.times) - t.count(200, 299) - t.count(429, 429) - t.count(500, 599)
        p50, p95, p99 = t.percentiles()
        print(f"{name:<11} {sent:>5} {t.count(200, 299):>5} {t.count(429, 429):>4} "
              f"{t.count(500, 599):>4} {other:>5} {len(t.errors):>6} "
              f"{p50:>8.1f} {p95:>8.1f} {p99:>8.1f}")  # fmt: skip
    errors = sum(len(t.errors) for t in tallies.values())
    server_errors = sum(t.count(500, 599) for t in tallies.values())
    unexpected = sum(
        len(t.times) - t.count(200, 299) - t.count(429, 429) - t.count(500, 599)
        for t in tallies.values()
    )
    growth = (rss["end"] - rss["middle"]) / rss["middle"]
    checks = [
        ("errors (no answer)", f"{errors}", "0", errors == 0),
        ("5xx answers", f"{server_errors}", "0", server_errors == 0),
        ("other non-2xx (not 429)", f"{unexpected}", "0", unexpected == 0),
        ("figure routes p99", f"{tallies['figure'].percentiles()[2]:.1f} ms",
         f"< {TARGETS['figure_p99_ms']:.0f} ms",
         tallies["figure"].percentiles()[2] < TARGETS["figure_p99_ms"]),
        (f"GET / p99 while {queued} labs queued", f"{tallies['page'].percentiles()[2]:.1f} ms",
         f"< {TARGETS['page_p99_ms']:.0f} ms",
         tallies["page"].percentiles()[2] < TARGETS["page_p99_ms"]),
        ("RSS start / middle / end",
         f"{rss['start']:.0f} / {rss['middle']:.0f} / {rss['end']:.0f} MiB ({growth:+.1%})",
         f"levels off (≤ {TARGETS['rss_growth']:+.0%} middle→end)",
         growth <= TARGETS["rss_growth"]),
    ]  # fmt: skip
    print()
    print(f"{'measure':<34} {'result':<34} {'target':<30} verdict")
    for name, got, target, ok in checks:
        print(f"{name:<34} {got:<34} {target:<30} {_verdict(ok)}")
    for t in tallies.values():
        for line in t.errors[:5]:
            print("  error:", line)
    return all(ok for *_, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--queued", type=int, default=60)
    args = parser.parse_args(argv)
    result = run(args.requests, args.concurrency, args.queued)
    return 0 if report(result, args.requests, args.concurrency, args.queued) else 1


if __name__ == "__main__":
    sys.exit(main())
