"""numpy on every core: a shared thread pool, and OpenBLAS kept to one thread while it runs.

numpy's matmul and ufuncs release the GIL, so Python threads run them on all cores at once.
OpenBLAS, which numpy's wheels bundle, runs its own thread per core inside every matmul; under a
pool that already keeps each core busy that doubles the threads. Measured here (N = 2048, h = 8,
blockwise): pool of 2 with OpenBLAS pinned to 1 thread 162 GFLOP/s; pool of 2 with OpenBLAS on
2 threads each 116; one pool thread with OpenBLAS on both cores 122. threadpoolctl would set the
OpenBLAS thread count; attnlab does not depend on it, so the library's own setter is called
through ctypes, and everything still runs (unpinned) where it cannot be found.

OpenBLAS also keeps its worker threads spinning for ~0.1 s after a threaded matmul returns
(measured: 118 ms of CPU burnt while the caller slept 300 ms), so a BLAS-threaded call just
before the pool starts competes with it for the cores.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

__all__ = ["POOL_CAP", "blas_info", "on_threads", "one_blas_thread", "pool_map"]


def on_threads(fn, items, threads: int) -> None:
    """Call fn on every item, ``threads`` at a time; errors re-raised here. numpy's errstate
    belongs to each thread, so the caller's is carried over to the workers."""
    state = np.geterr()

    def call(item):
        with np.errstate(**state):
            fn(item)

    with pool_map(threads, len(items)) as each:
        each(call, items)


#: The most threads the shared pool ever holds, whatever ``threads=`` asks: more than the
#: cores only adds switching, and every distinct request used to leave a pool of its own alive
#: (63 values of threads= left 607 threads). A call asking for more runs this many at a time.
POOL_CAP = max(32, 2 * (os.cpu_count() or 1))

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _shared_pool(threads: int) -> ThreadPoolExecutor:
    """The one pool, grown (never shrunk) to ``threads`` workers, up to POOL_CAP."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < threads:
            old = _pool
            _pool, _pool_size = ThreadPoolExecutor(threads, thread_name_prefix="attnlab"), threads
            if old is not None:
                old.shutdown(wait=False)  # its idle threads exit; queued work still runs
        return _pool


def _after_fork_in_child() -> None:
    # A forked child inherits the pool object but none of its threads: work submitted to it
    # would wait forever (a fork-method multiprocessing pool hung so). Start afresh, and drop
    # locks a parent thread may have held at the fork.
    global _pool, _pool_size, _pool_lock, _blas_lock, _blas_users
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()
    _blas_lock, _blas_users = threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def pool_map(threads: int, items: int) -> Iterator:
    """A function each(fn, items) -> list of results, running at most ``threads`` calls at once
    on the shared pool (inline for one thread or one item). The first error is re-raised once
    every running call has returned; no new item starts after it."""
    threads = min(threads, items, POOL_CAP)
    if threads <= 1:
        yield lambda fn, seq: [fn(item) for item in seq]
        return
    pool = _shared_pool(threads)

    def each(fn, seq) -> list:
        seq = list(seq)
        results: list = [None] * len(seq)
        todo = iter(range(len(seq)))
        lock = threading.Lock()
        failed: list[BaseException] = []

        def worker() -> None:
            while not failed:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    results[i] = fn(seq[i])
                except BaseException as exc:
                    failed.append(exc)

        for future in [pool.submit(worker) for _ in range(threads)]:
            future.result()
        if failed:
            raise failed[0]
        return results

    with _one_blas_thread():
        yield each


_BLAS_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)
_CONFIGS = ("scipy_openblas_get_config64_", "scipy_openblas_get_config", "openblas_get_config")
_CORENAMES = (
    "scipy_openblas_get_corename64_",
    "scipy_openblas_get_corename",
    "openblas_get_corename",
)
_blas_lock = threading.Lock()
_blas_users = 0
_blas_saved = 0
_blas_api = None


def _find_openblas():
    """(set, get, corename) for the OpenBLAS numpy uses, or None when it cannot be found."""
    global _blas_api
    if _blas_api is not None:
        return _blas_api or None
    here = os.path.dirname(np.__file__)
    paths = glob.glob(here + ".libs/*openblas*") + glob.glob(
        os.path.join(here, ".dylibs", "*openblas*")
    )
    try:  # Linux: whatever OpenBLAS is loaded into this process (system numpy, conda, ...)
        with open("/proc/self/maps") as maps:
            paths += sorted(
                {ln.split()[-1] for ln in maps if "openblas" in ln.lower() and "/" in ln}
            )
    except OSError:
        pass
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _BLAS_NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                corename = next((getattr(lib, c) for c in _CORENAMES if hasattr(lib, c)), None)
                if corename is not None:
                    corename.argtypes, corename.restype = [], ctypes.c_char_p
                _blas_api = (setter, getter, corename, path)
                return _blas_api
    _blas_api = ()
    return None


@contextmanager
def _one_blas_thread():
    """Pin OpenBLAS to one thread while any blockwise pool runs (reference-counted)."""
    global _blas_users, _blas_saved
    api = _find_openblas()
    if api is None:
        yield
        return
    setter, getter = api[0], api[1]
    with _blas_lock:
        if _blas_users == 0:
            _blas_saved = getter()
            setter(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                setter(_blas_saved)


#: The same pin for a caller that runs its matmuls on its own thread: many small matrices in one
#: batched matmul, where OpenBLAS would wake its threads for each (see ``kernels/_small.py``).
one_blas_thread = _one_blas_thread


def blas_info() -> dict:
    """Which BLAS numpy runs here: library, kernel (OpenBLAS core type) and thread count."""
    api = _find_openblas()
    if api is None:
        return {"library": "unknown (not OpenBLAS)", "kernel": None, "threads": None}
    _, getter, corename, path = api
    kernel = corename().decode() if corename is not None else None
    lib = ctypes.CDLL(path)
    config = next((getattr(lib, c) for c in _CONFIGS if hasattr(lib, c)), None)
    release = None
    if config is not None:
        config.argtypes, config.restype = [], ctypes.c_char_p
        release = " ".join(config().decode().split()[:2])  # "OpenBLAS 0.3.31..."
    return {
        "library": os.path.basename(path),
        "version": release,
        "kernel": kernel,
        "threads": getter(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    }
