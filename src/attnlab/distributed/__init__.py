"""Exact attention beyond one machine: keys and values cut into chunks across Dask workers.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows
    d_k  query and key width   d_v  value width

Softmax needs every key of a row before it can normalise (§6.2), but it can be computed in
pieces. Each task takes a chunk of query rows and a chunk of keys and returns a partial:
(lse, o), the log of the row's sum of exponentials over those keys and the output over those
keys alone. Two partials merge exactly, and in any order (``_partial.merge``), so the partials
of a query chunk meet in a balanced tree of merges and the root is the attention output, equal
to ``attnlab.attention`` up to rounding (float64 within 1e-12). Chunk pairs that the mask
blocks whole (for every batch element) are never scheduled.

Dask is optional (``pip install 'attnlab[dask]'``) and loads only when ``attention`` is called;
``import attnlab`` never imports it.
"""

from __future__ import annotations

import math
import os

import numpy as np

from attnlab.core._validate import (
    as_real,
    check_scores_in_bands,
    compute_dtype,
    may_overflow,
    validate,
)
from attnlab.distributed import _partial
from attnlab.distributed._plan import make_plan, worker_budget
from attnlab.errors import AttnlabError, ShapeError

__all__ = ["attention"]


def attention(
    q, k, v, mask=None, *, scale=None, client=None, kv_chunks=None, q_chunks=None, compute=True
):
    """Exact attention, softmax(q kᵀ · scale + mask) v, computed in chunks by Dask.

    Args:
        q: queries (..., N, d_k); k: keys (..., M, d_k); v: values (..., M, d_v). numpy arrays
            or ``dask.array`` arrays (not loaded until the tasks run); leading axes broadcast.
        mask: as for ``attnlab.attention``: None, an ``attnlab.masks`` spec, or a bool/float
            array broadcastable to (..., N, M).
        scale: None for 1/sqrt(d_k).
        client: a ``dask.distributed.Client``; None uses the current client if there is one,
            else the local threaded scheduler (one thread per core).
        kv_chunks: how many chunks to cut the M keys into (1 to M); default: one per worker
            thread.
        q_chunks: how many chunks to cut the N query rows into (1 to N); default: enough for
            two tasks per worker thread. Either default grows if one task would not fit a
            worker's memory; counts you give are kept, and refused if a task cannot fit,
            except that more than 16 tasks of under 65,536 scores each are merged into fewer
            (``_plan.MIN_TASK_SCORES``): scheduling such a task costs more than computing it.
        compute: True returns a numpy array; False returns a ``dask.array`` (..., N, d_v),
            one block per query chunk, to compute later.

    Returns:
        output (..., N, d_v) in q's compute dtype (float32 stays float32).

    Raises:
        ShapeError, NonFiniteInputError, FullyMaskedRowError as ``attnlab.attention`` does
        (with dask inputs the finite checks run inside the tasks); AttnlabError for a bad
        chunk count or client, or a task too big for the smallest worker's memory (refused
        before anything is scheduled); ImportError without Dask.

    >>> import numpy as np, attnlab as al
    >>> q, k, v = np.random.default_rng(0).normal(size=(3, 2, 6, 4))  # (B, N, d) each
    >>> out = attention(q, k, v, al.masks.Causal(), kv_chunks=3)  # local threads
    >>> bool(np.abs(out - al.attention(q, k, v, al.masks.Causal())).max() < 1e-12)
    True
    """
    _require_dask()
    from attnlab.distributed import _graph

    if not isinstance(compute, bool):
        raise AttnlabError(f"expected compute to be True or False, but got {compute!r} instead")
    client = _client(client)
    lazy = any(_is_dask(a) for a in (q, k, v))
    if lazy:
        x = _validate_shapes(q, k, v, mask, scale)
        sources = tuple(
            a if _is_dask(a) else b for a, b in zip((q, k, v), (x.q, x.k, x.v), strict=True)
        )
    else:
        with _partial.own_advice():
            x = validate(q, k, v, mask, scale=scale)
        if may_overflow(x):  # rare: huge q or k; refuse as attention does, before any task
            check_scores_in_bands(x)
        sources = (x.q, x.k, x.v)
    threads = _threads(client)
    # 1) plan: chunks, the pairs to run, and a refusal if a task cannot fit a worker
    plan = make_plan(x, q_chunks, kv_chunks, threads, worker_budget(client))
    for i, rows in enumerate(plan.q_spans):
        if not plan.pairs[i]:  # the mask blocks every key chunk for these rows
            every = [idx + (r,) for idx in np.ndindex(x.table_lead()) for r in range(*rows)]
            _partial.raise_empty(x.mask, x.n, x.m, every)
    # 2) numpy inputs on a cluster: each chunk sent straight to the worker that reads it
    parts = None
    if compute and client is not None and not lazy:
        from attnlab.distributed import _placed

        parts = _placed.run(x, plan, sources, client)  # None: no worker yet, or one died
    if parts is None:
        # 3) else the graph: a partial per scheduled pair, a tree of merges per query chunk
        token, roots = _graph.build(x, plan, sources, lazy)
        if not compute:
            return _graph.as_array(x, plan, token, roots)
        graph_bytes = 0 if lazy else sum(a.nbytes for a in sources) + _mask_bytes(x.mask)
        parts = _graph.compute(roots, client, threads, graph_bytes)
    return _assemble(x, plan, parts)  # 4) the query chunks put together


def _assemble(x, plan, parts) -> np.ndarray:
    """The output (..., N, d_v) from each query chunk's (lse, output); a row that allowed no
    key, in any chunk, is refused by name."""
    out = np.empty(x.lead + (x.n, x.v.shape[-1]), x.q.dtype)  # (..., N, d_v)
    empty: list[tuple] = []
    for (lse, o), rows in zip(parts, plan.q_spans, strict=True):
        out[..., rows[0] : rows[1], :] = o  # (..., n, d_v)
        empty += _partial.empty_rows(lse, rows[0], x.table_lead())
    if empty:
        _partial.raise_empty(x.mask, x.n, x.m, sorted(empty))
    return out


def _require_dask() -> None:
    try:
        import dask
        import dask.array  # noqa: F401
    except ImportError:
        raise ImportError(
            "attnlab.distributed needs Dask, which is optional: pip install 'attnlab[dask]'"
        ) from None


def _is_dask(a) -> bool:
    import dask.array as da

    return isinstance(a, da.Array)


def _client(client):
    """The client to run on: the one given, the current one, or None (local threads)."""
    try:
        from distributed import Client, get_client
    except ImportError:
        if client is not None:
            raise ImportError(
                "a client needs dask.distributed: pip install 'attnlab[dask]'"
            ) from None
        return None
    if client is not None:
        if not isinstance(client, Client):
            raise AttnlabError(
                f"expected client to be a dask.distributed Client or None, but got {client!r}"
            )
        return client
    try:
        return get_client()
    except ValueError:  # no client in this process: the local threaded scheduler
        return None


def _threads(client) -> int:
    if client is None:
        return os.cpu_count() or 1
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return max(1, sum(w.get("nthreads", 1) for w in workers.values()))


def _validate_shapes(q, k, v, mask, scale):
    """``validate`` for inputs that are (partly) dask arrays: shapes, dtypes, mask and scale,
    without loading anything. Each dask array stands in as a zero-strided view of its shape."""
    stand = []
    for name, a in (("q", q), ("k", k), ("v", v)):
        if _is_dask(a):
            if any(math.isnan(s) for s in a.shape):
                raise ShapeError(
                    f"expected {name} to have a known shape, but got {name}.shape={a.shape}; "
                    f"call {name}.compute_chunk_sizes() first"
                )
            stand.append(as_real(name, np.broadcast_to(np.zeros((), a.dtype), a.shape)))
        else:
            stand.append(as_real(name, a))
    dtype = compute_dtype(*stand)
    # In the compute dtype already: validate's cast of a view would allocate the whole array.
    stand = [
        np.broadcast_to(np.zeros((), dtype), s.shape) if _is_dask(a) else s
        for a, s in zip((q, k, v), stand, strict=True)
    ]
    return validate(*stand, mask, scale=scale, check_finite=False)


def _mask_bytes(mask) -> int:
    if mask is None:
        return 0
    return sum(np.asarray(getattr(p, "array", 0)).nbytes for p in mask.parts())
