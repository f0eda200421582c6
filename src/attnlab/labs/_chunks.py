"""A lab's chunks, run inline, on threads or on a Dask cluster, and combined in chunk order.

A sampling lab splits its work into chunks whose random numbers are keyed by the chunk (see
``_scores``) or, for the saturation lab's single stream, handed from one chunk to the next.
Each chunk returns a small *partial* (power sums, counts), and the lab folds the partials with
one ``combine`` in chunk order, whoever computed them. Floating-point addition is not
associative, so the order is the whole guarantee: the local path and the cluster path add the
same partials in the same order, and a seed gives bitwise the same result locally, on one
worker or on many (on workers with the same numpy build, as numpy's sums are deterministic for
the same build and data).

A ``client`` is a ``dask.distributed.Client``; dask is imported only when one is given, so
``import attnlab.labs`` stays light. At most ``WINDOW`` chunks per worker thread are in flight,
so neither memory nor the scheduler's task count grows with the number of draws, and a stopped
run (Ctrl-C, an abandoned generator) cancels the chunks not yet done.

    CLIENT          the spec parameter: ``client`` in the library, ``--scheduler ADDRESS`` in the
                    CLI, never on the web
    check_client    None or a Client with workers, else an AttnlabError (and never with
                    ``workers``); a cluster's chunks wait at most ``WORKERLESS_S`` for a worker
    in_order        fn(j) for each chunk j, yielded in order (inline, threads or cluster)
    chained         step(j, state) -> (partial, state): chunks one after another
    combine         the one reduction: a left fold in chunk order
    reporting       the partials passed on in order, calling progress(done, total) after each
    cluster_threads the cluster's worker threads, for estimates
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import reduce

from attnlab.errors import AttnlabError
from attnlab.labs._common import Progress
from attnlab.labs._spec import Param

__all__ = [
    "CLIENT",
    "chained",
    "check_client",
    "cluster_threads",
    "combine",
    "in_order",
    "reporting",
]

WINDOW = 4  # chunks in flight per worker thread of a cluster

#: Declared by every lab that takes ``client``: the CLI offers it as ``--scheduler ADDRESS``
#: (``attnlab.cli.labs`` connects a Client), the web never (``web=False``).
CLIENT = Param(
    "client",
    "A Dask scheduler's address (tcp://HOST:PORT): run the chunks there, same numbers.",
    web=False,
    kind=str,
    flag="--scheduler",
)


def check_client(client, workers: int | None = None):
    """``client`` itself when it is None or a ``dask.distributed.Client``.

    A lab with threads of its own passes its ``workers`` too: threads here and a cluster's
    workers exclude each other, so a client with ``workers`` given is refused.
    """
    if client is None:
        return None
    try:
        from distributed import Client
    except ImportError:  # then it cannot be a Client either
        Client = ()
    if not isinstance(client, Client):
        raise AttnlabError(
            f"expected client to be a dask.distributed Client or None, but got {client!r} instead"
        )
    if workers is not None:
        raise AttnlabError(f"expected workers or client, but got both (workers={workers})")
    if not client.nthreads():  # a scheduler alone would keep every chunk queued for ever
        address = getattr(client.scheduler, "address", None) or "the client's scheduler"
        raise AttnlabError(
            f"expected a client whose cluster has workers, but the Dask scheduler at {address} "
            "reports no worker; start workers (dask worker ADDRESS) or pass another client"
        )
    return client


def cluster_threads(client) -> int:
    """Worker threads of the cluster behind ``client`` (at least 1)."""
    return max(1, sum(client.nthreads().values()))


def combine(partials: Iterable, merge: Callable, start):
    """Fold ``partials`` into ``start`` with ``merge``, in the order given (chunk order)."""
    return reduce(merge, partials, start)


def reporting(parts: Iterable, per: int, total: int, progress: Progress | None) -> Iterator:
    """``parts`` passed on in order, with progress(done, total) after each, where chunk j
    holds ``per`` of the ``total`` items (the last one fewer)."""
    for j, part in enumerate(parts):
        yield part
        if progress is not None:
            progress(min((j + 1) * per, total), total)


def in_order(fn: Callable, count: int, *, workers: int = 1, client=None) -> Iterator:
    """Yield fn(0), ..., fn(count - 1) in this order, computed inline (``workers`` 1), on
    ``workers`` threads, or as tasks on ``client``'s cluster. ``fn`` must be picklable for a
    client (a module-level function, or a ``functools.partial`` of one)."""
    if client is not None:
        window = WINDOW * cluster_threads(client)
        submit = lambda j: client.submit(fn, j, pure=False)  # noqa: E731
        yield from _windowed(submit, count, window, cancel=client.cancel, wait=_waiter(client))
    elif workers == 1 or count == 1:
        yield from map(fn, range(count))
    else:
        pool = ThreadPoolExecutor(workers)
        try:
            yield from _windowed(lambda j: pool.submit(fn, j), count, 2 * workers)
        finally:
            # Ctrl-C or an abandoned generator: drop the queued chunks, finish only running ones.
            pool.shutdown(wait=True, cancel_futures=True)


def chained(step: Callable, state, count: int, *, client=None) -> Iterator:
    """Yield the partials of step(j, state) -> (partial, next state), j = 0 .. count - 1.

    Each chunk starts from the state the one before left (a random stream drawn in order), so
    on a cluster the chunks are a chain of tasks: the work leaves this machine, but the chunks
    run one after another. ``state`` must never be mutated by ``step`` (a worker may hand the
    same object to the next task), and must be picklable for a client.
    """
    if client is None:
        for j in range(count):
            partial, state = step(j, state)
            yield partial
        return
    previous = [(None, state)]  # the last task's output (a future after the first submit)

    def submit(j: int):
        previous[0] = client.submit(_after, step, j, previous[0], pure=False)
        return previous[0]

    for partial, _ in _windowed(submit, count, WINDOW, cancel=client.cancel, wait=_waiter(client)):
        yield partial


def _after(step: Callable, j: int, before: tuple):
    """Chunk j of a chain, from the state that chunk j - 1 left in ``before``."""
    return step(j, before[1])


def _waiter(client) -> Callable:
    """A cluster chunk's wait, bounded as ``attnlab.distributed.attention``'s: an AttnlabError
    once the scheduler has had no worker for ``WORKERLESS_S`` (all killed, scaled to 0)."""
    from attnlab.distributed._graph import wait_for_workers  # dask is there: a client is

    return lambda future: wait_for_workers(client, [future])


def _windowed(submit: Callable, count: int, window: int, cancel=None, wait=None) -> Iterator:
    """Submit chunks ahead, at most ``window`` waiting, and yield their results in order
    (``wait(future)`` first, when given: a bound on how long a cluster may leave it queued)."""
    pending: deque = deque()

    def result():
        if wait is not None:
            wait(pending[0])  # still pending: a refusal here cancels it with the rest
        return pending.popleft().result()

    try:
        for j in range(count):
            pending.append(submit(j))
            if len(pending) >= window:
                yield result()
        while pending:
            yield result()
    finally:
        if cancel is not None and pending:
            cancel(list(pending))
