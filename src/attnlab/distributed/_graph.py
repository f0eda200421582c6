"""The Dask graph of a distributed call: chunks of q, k and v, a partial per scheduled chunk
pair, and a tree of merges per query chunk (see ``_partial``). Imports Dask; ``__init__``
loads this module only when it is called.

Task names, so a graph can be read (and counted): ``attnlab-q-<token>-<i>`` (and ``k``, ``v``)
hold chunks, ``attnlab-partial-<token>-<i>-<j>`` pair query chunk i with key chunk j,
``attnlab-merge-<token>-<i>-<level>-<a>`` merge two of them, ``attnlab-out-<token>-<i>`` end a
query chunk.
"""

from __future__ import annotations

import time
import uuid

import dask
import dask.array as da
from dask import delayed

from attnlab.core._validate import Inputs
from attnlab.distributed import _partial
from attnlab.distributed._plan import Plan
from attnlab.errors import AttnlabError


def chunks(arr, spans, name: str, token: str, dtype) -> list:
    """One Delayed per span of ``arr``'s rows (axis -2): (..., rows, width) each.

    A numpy chunk becomes a task of its own that holds the data, not an argument copied into
    every task that reads it; the scheduler keeps it, so a worker that dies loses nothing that
    cannot be sent again (data scattered to workers would be lost with them). Numpy inputs
    on a client take ``_placed.run`` first, which scatters them and comes back here only when
    a worker holding chunks is lost.
    """
    if isinstance(arr, da.Array):
        sizes = tuple(b - a for a, b in spans)
        lazy = arr.astype(dtype).rechunk({**{i: -1 for i in range(arr.ndim)}, arr.ndim - 2: sizes})
        blocks = lazy.to_delayed()  # (1, ..., chunks, 1)
        return [blocks[(0,) * (arr.ndim - 2) + (i, 0)] for i in range(len(spans))]
    return [
        delayed(arr[..., a:b, :], name=f"attnlab-{name}-{token}-{i}")  # (..., rows, width)
        for i, (a, b) in enumerate(spans)
    ]


def _task(q, k, v, mask, scale, names):
    if names is not None:  # dask inputs: the finite check of validate, on the loaded chunks
        _partial.check_inputs(names, q, k, v)
    return _partial.partial(q, k, v, mask, scale)


def build(x: Inputs, plan: Plan, sources, lazy: bool) -> tuple[str, list]:
    """(token, the root partial (lse, o) of each query chunk, as a Delayed)."""
    token = uuid.uuid4().hex[:12]
    q, k, v = sources
    qd = chunks(q, plan.q_spans, "q", token, x.q.dtype)
    kd = chunks(k, plan.kv_spans, "k", token, x.q.dtype)
    vd = chunks(v, plan.kv_spans, "v", token, x.q.dtype)
    roots = []
    for i, rows in enumerate(plan.q_spans):
        level = []
        for j in plan.pairs[i]:
            cols = plan.kv_spans[j]
            names = None
            if lazy:
                names = (
                    f"q[..., {rows[0]}:{rows[1]}, :]",
                    f"k[..., {cols[0]}:{cols[1]}, :]",
                    f"v[..., {cols[0]}:{cols[1]}, :]",
                )
            level.append(
                delayed(_task, pure=True)(
                    qd[i],
                    kd[j],
                    vd[j],
                    _partial.chunk_mask(x.mask, rows, cols, x.n, x.m),
                    x.scale,
                    names,
                    dask_key_name=f"attnlab-partial-{token}-{i}-{j}",
                )
            )
        depth = 0
        while len(level) > 1:  # a balanced tree: about log2(chunks) merges deep
            merged = [
                delayed(_partial.merge, pure=True)(
                    level[a], level[a + 1], dask_key_name=f"attnlab-merge-{token}-{i}-{depth}-{a}"
                )
                for a in range(0, len(level) - 1, 2)
            ]
            level = merged + level[len(merged) * 2 :]
            depth += 1
        roots.append(level[0] if level else None)
    return token, roots


def as_array(x: Inputs, plan: Plan, token: str, roots: list) -> da.Array:
    """The output as a dask array (..., N, d_v), one block per query chunk."""
    blocks = []
    table_lead = x.table_lead()
    for i, (root, rows) in enumerate(zip(roots, plan.q_spans, strict=True)):
        out = delayed(_partial.finish, pure=True)(
            root, rows[0], x.mask, x.n, x.m, table_lead, dask_key_name=f"attnlab-out-{token}-{i}"
        )
        shape = x.lead + (rows[1] - rows[0], x.v.shape[-1])
        blocks.append(da.from_delayed(out, shape=shape, dtype=x.q.dtype))
    return da.concatenate(blocks, axis=-2)


def compute(roots: list, client, threads: int, graph_bytes: int) -> list:
    """Run the trees on ``client`` (or the local threaded scheduler); their roots' values."""
    if client is not None:
        # The data travels in the graph on purpose (see ``chunks``): no warning for its size.
        limit = f"{max(graph_bytes * 2, 10 * 2**20)}B"
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": limit}):
            futures = client.compute(roots)
        try:
            wait_for_workers(client, futures)
        except BaseException:
            client.cancel(futures)  # nothing left queued on the scheduler for a dead run
            raise
        return client.gather(futures)
    from attnlab.kernels._threads import pool_map

    # pool_map pins OpenBLAS to one thread while it is open: each of the scheduler's threads
    # runs its own matmuls, and two BLAS threads under each would oversubscribe the cores.
    with pool_map(threads, threads):
        return list(dask.compute(*roots, scheduler="threads", num_workers=threads))


#: Seconds a run waits with no worker connected before it gives up (workers killed, a
#: cluster scaled to 0): the scheduler would keep the tasks queued for ever.
WORKERLESS_S = 30.0
_POLL_S = 0.5


def _settled(future, seconds: float) -> bool:
    """Whether ``future`` is done within ``seconds``. Polled, not ``result(timeout=)``: the
    TimeoutError that raises keeps the future in a reference cycle until the garbage collector
    runs, so an abandoned run's task stayed on the cluster."""
    end = time.monotonic() + seconds
    while not future.done():
        if time.monotonic() >= end:
            return False
        time.sleep(0.005)
    return True


def wait_for_workers(client, futures) -> None:
    """Wait for ``futures``; raise AttnlabError naming the scheduler once it has had no worker
    for WORKERLESS_S seconds, or has stopped answering for as long."""
    alone_since, pending = None, list(futures)
    while pending:
        if _settled(pending[0], _POLL_S):
            pending.pop(0).result()  # a task's own error is raised here, as gather would
            continue
        try:
            workers = client.scheduler_info(n_workers=-1).get("workers", {})
        except Exception:
            workers = {}
        if workers:
            alone_since = None
            continue
        alone_since = alone_since or time.monotonic()
        if time.monotonic() - alone_since >= WORKERLESS_S:
            address = getattr(client.scheduler, "address", None) or "the client's scheduler"
            raise AttnlabError(
                f"expected workers to run the {len(futures)} tasks, but the Dask scheduler at "
                f"{address} has had no worker for {WORKERLESS_S:g} s (killed, or scaled to 0); "
                "start workers or pass another client"
            )
