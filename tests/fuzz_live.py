"""`make fuzz`: the long fuzz, not run in CI (docs/reliability.md records a run).

Two parts, one summary (test-artifacts/fuzz-summary.json and .md):

1. schemathesis against a live `attnlab serve` on 127.0.0.1 (uvicorn, the guarded protocol,
   the real lab queue): about ``--requests`` requests from the OpenAPI document, at most
   ``--rate`` a second so the lab queue keeps up (labs are not mostly 429). From its HAR log:
   the requests, the 5xx, and each route's p99 time.
2. the hypothesis suites (every test hypothesis marks) under the "fuzz" profile of
   tests/conftest.py: ``--scale`` times their CI examples. From --hypothesis-show-statistics:
   the cases run and the failing ones (mismatches against the oracles or properties).

    python tests/fuzz_live.py [--requests 20000] [--rate 40/s] [--scale 10] [--tests tests]
    python tests/fuzz_live.py --parts api --label api-labs --paths '^/api/labs/' --requests 1000

``--paths`` keeps the operations whose path matches a regex (``--exclude-paths`` drops them),
and ``--label`` names the part in the summary, so the quick routes can take most requests and
the lab routes (up to 2 s each) fewer, in two runs that record side by side.

Every child process is killed at its timeout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

from attnlab.web.loadtest import Tally, stop

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-artifacts"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(port: int, log) -> subprocess.Popen:
    command = [sys.executable, "-c", "from attnlab.cli import main; main()", "serve"]
    server = subprocess.Popen(
        [*command, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=5) as r:
                return server, json.load(r)
        except OSError:
            if server.poll() is not None:
                raise SystemExit("attnlab serve exited before answering") from None
            time.sleep(0.3)
    server.kill()
    raise SystemExit("attnlab serve did not answer within 120 s")


def _route_of(templates: list[tuple[str, re.Pattern]], method: str, url: str) -> str:
    path = urllib.parse.urlsplit(url).path
    for template, pattern in templates:
        if pattern.fullmatch(path):
            return f"{method} {template}"
    return f"{method} {path}"


def _pattern(template: str) -> re.Pattern:
    """'/api/exercises/{n}/check' -> a regex matching its paths."""
    parts = re.split(r"(\{[^/]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


def _operations(document: dict, paths: str | None, exclude: str | None) -> list[dict]:
    """The operations schemathesis will run, after the path filters."""
    return [
        op
        for path, methods in document["paths"].items()
        if (paths is None or re.search(paths, path)) and not (exclude and re.search(exclude, path))
        for op in methods.values()
    ]


def fuzz_api(requests: int, rate: str, timeout: float, request_timeout: float = 60.0,
             paths: str | None = None, exclude: str | None = None, label: str = "api") -> dict:  # fmt: skip
    port = _free_port()
    OUT.mkdir(exist_ok=True)
    har = OUT / f"fuzz-{label}.har"
    with open(OUT / f"fuzz-{label}-server.log", "w") as log:
        server, document = _serve(port, log)
        try:
            operations = _operations(document, paths, exclude)
            # An operation that takes nothing sends one request, whatever max-examples says.
            inputs = [op for op in operations if op.get("parameters") or "requestBody" in op]
            fixed = len(operations) - len(inputs)
            examples = max(1, math.ceil((requests - fixed) / max(1, len(inputs))))
            filters = [*(["--include-path-regex", paths] if paths else []),
                       *(["--exclude-path-regex", exclude] if exclude else [])]  # fmt: skip
            command = [
                str(Path(sys.executable).parent / "schemathesis"), "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--phases", "fuzzing", "--max-examples", str(examples), "--seed", "1",
                "--rate-limit", rate, "--workers", "1", "--no-shrink",
                "--request-timeout", str(request_timeout),
                "--exclude-checks", "positive_data_acceptance",
                "--report", "har", "--report-har-path", str(har), *filters,
            ]  # fmt: skip
            started = time.monotonic()
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
                tail, code = done.stdout[-4000:], done.returncode
            except subprocess.TimeoutExpired as exc:  # run() killed it; the HAR may be partial
                out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
                tail, code = out[-4000:] + f"\n(killed at its {timeout:g} s timeout)", None
            seconds = time.monotonic() - started
        finally:
            stop(server)
    return {
        **summarize_har(har, document),
        "asked": requests,
        "paths": paths,
        "exclude_paths": exclude,
        "examples_per_operation": examples,
        "rate": rate,
        "request_timeout_s": request_timeout,
        "seconds": round(seconds, 1),
        "schemathesis_exit": code,
        "schemathesis_tail": tail,
    }


def _har_entries(har: Path) -> list[tuple[str, str, int, float]]:
    """(method, url, status, ms) of each HAR entry; a log cut short by a timeout still reads."""
    if not har.exists():
        return []
    text = har.read_text()
    try:
        entries = json.loads(text)["log"]["entries"]
    except ValueError:  # written as the run went, and cut off mid-entry: read entry by entry
        found = []
        for chunk in text.split('"startedDateTime"')[1:]:
            fields = [
                re.search(p, chunk)
                for p in (
                    r'"method":\s*"(\w+)"',
                    r'"url":\s*"([^"]+)"',
                    r'"status":\s*(\d+)',
                    r'"time":\s*([\d.]+)',
                )
            ]
            if all(fields):
                m, u, st, ms = (f.group(1) for f in fields)
                found.append((m, u, int(st), float(ms)))
        return found
    return [(e["request"]["method"], e["request"]["url"], e["response"]["status"], e["time"])
            for e in entries]  # fmt: skip


def summarize_har(har: Path, document: dict) -> dict:
    """Requests, status counts, 5xx and each documented route's p99 time, from the HAR log."""
    templates = [(t, _pattern(t)) for t in document["paths"]]
    by_route: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, int] = defaultdict(int)
    entries = _har_entries(har)
    for method, url, status, ms in entries:
        by_route[_route_of(templates, method, url)].append(ms / 1000)
        statuses[str(status)] += 1
    return {
        "requests": len(entries),
        "status_counts": dict(sorted(statuses.items())),
        "server_errors": sum(n for s, n in statuses.items() if s.startswith("5")),
        "p99_s": {
            r: round(Tally(times=t).percentiles()[2], 4) for r, t in sorted(by_route.items())
        },
        "requests_per_route": {r: len(t) for r, t in sorted(by_route.items())},
    }


def fuzz_properties(scale: int, tests: list[str], timeout: float) -> dict:
    env = {
        **os.environ,
        "ATTNLAB_HYPOTHESIS_PROFILE": "fuzz",
        "ATTNLAB_HYPOTHESIS_SCALE": str(scale),
    }
    command = [
        sys.executable, "-m", "pytest", *tests, "-m", "hypothesis", "-q", "-p", "no:cacheprovider",
        "--hypothesis-show-statistics", "-o", "addopts=",
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        code = None
    (OUT / "fuzz-hypothesis.log").write_text(text)
    counts = re.findall(r"(\d+) passing, (\d+) failing", text)
    summary = re.findall(r"^=*\s*(\d+ (?:passed|failed).*) in [\d.]+s", text, re.M)
    return {
        "scale": scale,
        "tests": tests,
        "seconds": round(time.monotonic() - started, 1),
        "cases": sum(int(p) + int(f) for p, f in counts),
        "failing_cases": sum(int(f) for _, f in counts),
        "failed_tests": len(re.findall(r"^FAILED ", text, re.M)),
        "pytest_summary": summary[-1] if summary else text[-300:],
        "pytest_exit": code,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rate", default="40/s")
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--tests", nargs="*", default=["tests"])
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per part")
    parser.add_argument("--parts", default="api,hypothesis", help="run only some parts")
    parser.add_argument("--paths", help="fuzz only the paths matching this regex")
    parser.add_argument("--exclude-paths", help="leave out the paths matching this regex")
    parser.add_argument("--label", default="api", help="the API part's name in the summary")
    parser.add_argument(
        "--request-timeout", type=float, default=60.0, help="seconds one request may take"
    )
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    file = OUT / "fuzz-summary.json"

    def record(part: str, value: dict) -> dict:  # re-read: a part may run alone, or at once
        result = json.loads(file.read_text()) if file.exists() else {}
        result[part] = value
        file.write_text(json.dumps(result, indent=2) + "\n")
        return result

    if "api" in args.parts:
        api = fuzz_api(args.requests, args.rate, args.timeout, args.request_timeout,
                       args.paths, args.exclude_paths, args.label)  # fmt: skip
        result = record(args.label, api)
    if "hypothesis" in args.parts:
        result = record("hypothesis", fuzz_properties(args.scale, args.tests, args.timeout))
    apis = {name: part for name, part in result.items() if name.startswith("api")}
    if not apis or "hypothesis" not in result:
        return 0
    props, lines = result["hypothesis"], []
    for name, api in apis.items():
        lines += [
            f"{name}: {api['requests']:,} requests ({api['rate']}), {api['server_errors']} 5xx, "
            f"statuses {api['status_counts']}, {api['seconds']} s",
            *[f"  p99 {route}: {s * 1000:.0f} ms" for route, s in api["p99_s"].items()],
        ]
    lines.append(
        f"hypothesis x{props['scale']}: {props['cases']:,} cases, {props['failing_cases']} "
        f"failing, {props['failed_tests']} failed tests ({props['pytest_summary']})"
    )
    (OUT / "fuzz-summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    errors = sum(api["server_errors"] for api in apis.values())
    ok = errors == 0 and props["failing_cases"] == 0 and props["failed_tests"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
