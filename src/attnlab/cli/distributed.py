"""``attnlab bench distributed``: ``attnlab.distributed.attention`` on a LocalCluster of worker
processes, against the single-process blockwise path on the same cores.

The fair comparison on one machine: W worker processes of one thread each use W cores, so they
are timed against ``attnlab.attention(method="blockwise", threads=W)``, which uses the same W
cores as threads of one process (OpenBLAS pinned to one thread per core in both). What is left
is the cost of going through Dask: moving chunks between processes, scheduling, merging.
Against a running cluster (``--scheduler``) the baseline is blockwise with as many threads as
the cluster has worker threads, with the same verdict.

The default N = 16,384 is the smallest size the 25% target is set for: the work grows as N²
and the chunks moved as N, so at N = 4,096 moving q, k and v weighs four times as much
against the arithmetic (docs/bench.md).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from statistics import median
from typing import Annotated

import numpy as np
import typer

from attnlab.cli._app import clip, console, err_console, fail, friendly_errors
from attnlab.cli.bench import bench_app

TARGET = 0.25  # at most 25% over single-process blockwise with 2 workers
MAX_WORKERS = 64  # worker processes per run, the labs' cap on their own pools

#: Dask's housekeeping, slowed on the clusters this benchmark starts: the statistical profiler
#: samples every worker thread's stack each 10 ms, and the event loops' watchdog (20 ms) and
#: memory monitors (100 ms) wake as often. Idle, that cost each worker process about 5% of a
#: core and the client's process (scheduler, nannies) 5% more; during a call at N = 8,192 it
#: was 5-6 s of CPU beyond the tasks' own against 1.1-1.4 s slowed, on two cores that the
#: tasks need (docs/bench.md). The workers still pause, spill and restart as before, once a
#: second. Against --scheduler, the cluster runs as its owner started it (see QUIET_ENV).
QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}
#: The same settings as environment variables, for ``dask scheduler`` and ``dask worker``.
QUIET_ENV = " ".join(
    f"DASK_{key.upper().replace('.', '__').replace('-', '_')}={value}"
    for key, value in QUIET_DASK.items()
)


def _flops(heads: int, n: int, d: int) -> float:
    # q kᵀ and p v: 2 N² d multiply-adds each per head, counted as 2 FLOPs each (§6.7's count).
    return 4.0 * heads * n * n * d


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _time(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up: imports, first-touch pages, the workers' first tasks
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return median(times), out


def _blockwise(q, k, v, threads: int, repeats: int):
    import attnlab as al
    from attnlab.kernels._threads import pool_map

    # pool_map pins OpenBLAS to one thread while open, so threads=1 is one core, as one worker.
    with pool_map(2, 2):
        return _time(lambda: al.attention(q, k, v, method="blockwise", threads=threads), repeats)


def _run_on(client, q, k, v, repeats: int, q_chunks, kv_chunks):
    from attnlab.distributed import attention

    def call():
        return attention(q, k, v, client=client, q_chunks=q_chunks, kv_chunks=kv_chunks)

    seconds, out = _time(call, repeats)
    rss = client.run(_peak_rss)
    return seconds, out, rss


def _profiling() -> bool:
    """Whether this worker process samples its threads' stacks (Dask's profiler)."""
    import dask

    return bool(dask.config.get("distributed.worker.profile.enabled", True))


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def _worker_counts(text: str) -> list[int]:
    """'1,2' -> [1, 2]: ASCII whole numbers from 1 to MAX_WORKERS, or one line and exit 2."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts):
        raise fail(f"--workers: expected a comma list such as 1,2, but got {clip(text)}")
    counts = sorted({int(p) for p in parts})
    if counts[0] < 1 or counts[-1] > MAX_WORKERS:
        raise fail(
            f"--workers: expected worker counts from 1 to {MAX_WORKERS} (one process each), "
            f"but got {clip(text)}"
        )
    return counts


def _check_memory(heads: int, n: int, d: int) -> None:
    """Refuse, before allocating, inputs and output past half this machine's memory."""
    need = 4 * heads * n * d * 4  # q, k, v and the output, float32
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: a fixed 8 GiB
        have = 8 * 2**30
    if need > have // 2:
        raise fail(
            f"expected q, k, v and the output to fit half this machine's memory "
            f"({_mib(have // 2)}), but --heads {heads} --n {n:,} --d {d} needs {_mib(need)}"
        )


@bench_app.command("distributed")
@friendly_errors
def distributed_command(
    n: Annotated[int, typer.Option("--n", min=16, help="Sequence length N (= M).")] = 16384,
    heads: Annotated[int, typer.Option(min=1, help="Heads h (a batch axis).")] = 8,
    d: Annotated[int, typer.Option(min=1, help="Head width d_k = d_v.")] = 64,
    repeats: Annotated[int, typer.Option(min=1, max=50, help="Timed runs each (median).")] = 3,
    workers: Annotated[
        str, typer.Option(help="Worker process counts to try, a comma list (1 thread each).")
    ] = "1,2",
    q_chunks: Annotated[
        int | None, typer.Option(min=1, help="Query chunks (default: auto).")
    ] = None,
    kv_chunks: Annotated[
        int | None, typer.Option(min=1, help="Key chunks (default: auto).")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(help="Use the running cluster at this address (tcp://host:8786) instead."),
    ] = None,
) -> None:
    """Distributed attention on 1 and 2 local worker processes against single-process blockwise
    (float32; the default N = 16,384, the size the 25% target is set for, takes about 2 minutes
    on an idle 2-core machine; --n 4096 about 15 s)."""
    try:
        import distributed  # noqa: F401  (only to say it is missing before any work)
    except ImportError:
        raise fail(
            "the benchmark needs Dask, which is optional: pip install 'attnlab[dask]'"
        ) from None
    counts = _worker_counts(workers)
    _check_memory(heads, n, d)
    with ExitStack() as stack:
        client = None
        if scheduler is not None:  # connected (or one line) before any work or output
            from attnlab.cli.labs import _scheduler

            client = stack.enter_context(_scheduler(scheduler))
        rows = _rows(heads, n, d, repeats, counts, q_chunks, kv_chunks, scheduler, client)
    _report(rows, heads, n, d, cluster=scheduler is not None)


def _rows(heads, n, d, repeats, counts, q_chunks, kv_chunks, scheduler, client) -> list:
    """One row per run: on the --scheduler's ``client``, or on LocalClusters of each count."""
    import dask
    from distributed import Client, LocalCluster

    from attnlab.kernels._threads import blas_info

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, d), dtype=np.float32) for _ in range(3))
    info = blas_info()
    console.print(
        f"distributed attention, N = M = {n:,}, h = {heads}, d = {d}, float32, median of "
        f"{repeats}\nBLAS: {info.get('library')} {info.get('version') or ''}, kernel "
        f"{info.get('kernel')}, {info.get('threads')} thread(s) in this process",
        highlight=False,
        soft_wrap=True,
    )

    rows = []
    if client is not None:
        nthreads = sum(client.nthreads().values())
        err_console.print(f"[dim]  {scheduler}: {nthreads} worker thread(s)[/]")
        if any(client.run(_profiling).values()):
            err_console.print(
                "[dim]  its workers run Dask's profiler (a stack sample every 10 ms, CPU the "
                f"tasks could use); for the benchmark's settings start them with {QUIET_ENV}[/]",
                highlight=False,
                soft_wrap=True,
            )
        # The same comparison as the local runs: blockwise on as many threads, here.
        err_console.print(f"[dim]  blockwise, threads={nthreads} ...[/]")
        ref_s, ref = _blockwise(q, k, v, nthreads, repeats)
        seconds, out, rss = _run_on(client, q, k, v, repeats, q_chunks, kv_chunks)
        err = float(np.abs(out - ref).max())
        rows.append((f"cluster {scheduler}", nthreads, seconds, ref_s, err, rss))
    else:
        base = {}
        for w in counts:
            err_console.print(f"[dim]  blockwise, threads={w} ...[/]")
            base[w] = _blockwise(q, k, v, w, repeats)
        for w in counts:
            err_console.print(f"[dim]  LocalCluster, {w} worker process(es) ...[/]")
            with (
                dask.config.set(QUIET_DASK),  # the workers' processes inherit it
                LocalCluster(
                    n_workers=w,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=":0",  # a free port on 127.0.0.1: None still takes 8787
                ) as cluster,
                Client(cluster, set_as_default=False) as client,
            ):
                if w == counts[0]:
                    wi = next(iter(client.run(blas_info).values()))
                    console.print(
                        f"BLAS in a worker: kernel {wi.get('kernel')}, {wi.get('threads')} "
                        "thread(s)",
                        highlight=False,
                        soft_wrap=True,
                    )
                seconds, out, rss = _run_on(client, q, k, v, repeats, q_chunks, kv_chunks)
            ref_s, ref = base[w]
            err = float(np.abs(out - ref).max())
            rows.append((f"{w} worker(s) x 1 thread", w, seconds, ref_s, err, rss))
    return rows


def _report(rows: list, heads: int, n: int, d: int, *, cluster: bool = False) -> None:
    flops = _flops(heads, n, d)

    console.print(
        f"\n{'run':<26}{'time':>9}{'GFLOP/s':>9}{'blockwise':>11}{'overhead':>10}"
        f"{'max |diff|':>12}  peak RSS per worker",
        highlight=False,
        soft_wrap=True,
    )
    verdict, threads = None, 2
    for name, w, seconds, ref_s, err, rss in rows:
        over = "" if ref_s is None else f"{seconds / ref_s - 1:+.1%}"
        ref_text = "" if ref_s is None else f"{ref_s:.2f} s"
        err_text = "" if err is None else f"{err:.1e}"
        mem = ", ".join(_mib(b) for b in rss.values())
        console.print(
            f"{name:<26}{seconds:>7.2f} s{flops / seconds / 1e9:>9.1f}{ref_text:>11}"
            f"{over:>10}{err_text:>12}  {mem}",
            highlight=False,
            soft_wrap=True,
        )
        if (w == 2 or cluster) and ref_s is not None:
            verdict, threads = seconds / ref_s - 1, w
    if verdict is not None:
        ok = verdict <= TARGET
        mark = "[green]PASS[/]" if ok else "[red]FAIL[/]"
        console.print(
            f"\ntarget: {'the cluster' if cluster else '2 workers'} at most {TARGET:.0%} over "
            f"blockwise with threads={threads}: "
            f"{verdict:+.1%}  {mark}",
            highlight=False,
            soft_wrap=True,
        )
    # Extrapolate: the cost grows as N² (no mask); at the best measured rate, on these cores.
    best = max(flops / r[2] for r in rows)
    big = _flops(heads, 10**6, d) / best
    console.print(
        f"estimate for N = 10^6 (h = {heads}, d = {d}, no mask) at {best / 1e9:.0f} GFLOP/s: "
        f"{big / 3600:,.1f} h here; divide by the cores added",
        highlight=False,
        soft_wrap=True,
    )
