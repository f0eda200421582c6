"""attnlab.distributed: chunks of keys on Dask workers, merged exactly in a tree.

Most checks run on one LocalCluster per module (two worker processes, one thread each, on
127.0.0.1), so every task, mask and partial really crosses a process boundary; the rest run on
the local threaded scheduler. The reference is ``attnlab.attention`` itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import attnlab as al
from attnlab.errors import AttnlabError, FullyMaskedRowError, NonFiniteInputError, ShapeError
from attnlab.masks import Causal, Dense, Padding, SlidingWindow
from tolerances import BLOCKWISE_F32, BLOCKWISE_F64

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dist = pytest.importorskip("attnlab.distributed")
from attnlab.distributed._partial import merge  # noqa: E402

B, H, N, M, DK, DV = 2, 3, 31, 38, 8, 6  # N < M: no window leaves a row empty


@pytest.fixture(scope="module")
def client():
    import cloudpickle

    # The slow loader below is defined here; workers cannot import this file, so ship it.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",  # a free port on 127.0.0.1: None still takes 8787
        memory_limit="2GiB",
    )
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _qkv(dtype=np.float64, q_lead=(B, H), k_lead=(B, H), n=N, m=M, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(q_lead + (n, DK)).astype(dtype)
    k = rng.standard_normal(k_lead + (m, DK)).astype(dtype)
    v = rng.standard_normal(k_lead + (m, DV)).astype(dtype)
    return q, k, v


def _masks():
    rng = np.random.default_rng(1)
    allowed = rng.random((N, M)) > 0.3
    allowed[:, 0] = True  # every row keeps a key
    bias = np.where(rng.random((H, N, M)) > 0.3, rng.normal(size=(H, N, M)), -np.inf)
    bias[..., 5] = 0.0
    return {
        "none": None,
        "causal": Causal(),
        "causal-bottom-right": Causal(align="bottom_right") + Padding([M, M]),
        "window": SlidingWindow(7),
        "padding": Padding([30, 11]),
        "dense-bool": Dense(allowed),
        "dense-additive": Dense(bias),
        "causal+padding": Causal() + Padding([40, 17]),
        "window+dense": SlidingWindow(12) + Dense(allowed),
    }


MASKS = _masks()
CHUNKS = [(1, 1), (5, 7), (N, 2), (2, M)]  # uneven, and one row or one key per chunk


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize(("q_chunks", "kv_chunks"), CHUNKS)
def test_equals_attention_on_threads(name, q_chunks, kv_chunks):
    mask = MASKS[name]
    q, k, v = _qkv()
    ref = al.attention(q, k, v, mask)
    out = dist.attention(q, k, v, mask, q_chunks=min(q_chunks, N), kv_chunks=kv_chunks)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, **BLOCKWISE_F64)


@pytest.mark.parametrize("name", sorted(MASKS))
def test_equals_attention_on_the_cluster(client, name):
    mask = MASKS[name]
    q, k, v = _qkv()
    out = dist.attention(q, k, v, mask, client=client, q_chunks=3, kv_chunks=4)
    np.testing.assert_allclose(out, al.attention(q, k, v, mask), **BLOCKWISE_F64)


def test_float32_batch_axes_that_broadcast_and_a_scale(client):
    q, k, v = _qkv(np.float32, q_lead=(B, 1), k_lead=(H,), n=70, m=90)
    ref = al.attention(q, k, v, Causal(align="bottom_right"), scale=0.3)
    out = dist.attention(
        q, k, v, Causal(align="bottom_right"), scale=0.3, client=client, q_chunks=2, kv_chunks=5
    )
    assert out.dtype == np.float32 and out.shape == (B, H, 70, DV)
    np.testing.assert_allclose(out, ref, **BLOCKWISE_F32)


def test_only_v_carries_the_batch_axis():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(20, 4)), rng.normal(size=(30, 4)), rng.normal(size=(B, 30, 3))
    out = dist.attention(q, k, v, Causal(), kv_chunks=4)
    np.testing.assert_allclose(out, al.attention(q, k, v, Causal()), **BLOCKWISE_F64)


def test_huge_scores_take_the_exact_path():
    q, k, v = _qkv()
    q = q * 40.0  # scores of several hundred: exp2 overflows from a base of 0
    out = dist.attention(q, k, v, Padding([30, 11]), kv_chunks=3)
    np.testing.assert_allclose(out, al.attention(q, k, v, Padding([30, 11])), **BLOCKWISE_F64)


# -- which tasks run -----------------------------------------------------------------------------


def _partials(arr) -> list:
    return [key for key in arr.__dask_graph__() if str(key).startswith("attnlab-partial-")]


def test_blocked_chunks_are_never_scheduled():
    q, k, v = _qkv(n=64, m=64)
    assert len(_partials(dist.attention(q, k, v, q_chunks=4, kv_chunks=4, compute=False))) == 16
    causal = dist.attention(q, k, v, Causal(), q_chunks=4, kv_chunks=4, compute=False)
    assert len(_partials(causal)) == 10  # the lower triangle of 4 x 4, diagonal included
    window = dist.attention(q, k, v, SlidingWindow(4), q_chunks=4, kv_chunks=4, compute=False)
    assert len(_partials(window)) == 7  # the diagonal and the chunk left of it
    padded = dist.attention(q, k, v, Padding([20, 10]), q_chunks=2, kv_chunks=4, compute=False)
    assert len(_partials(padded)) == 2 * 2  # keys 32.. are past every length
    np.testing.assert_allclose(
        causal.compute(scheduler="threads"), al.attention(q, k, v, Causal()), **BLOCKWISE_F64
    )


def test_the_cluster_runs_only_the_planned_tasks(client):
    q, k, v = _qkv(n=64, m=64)
    with distributed.get_task_stream(client) as stream:
        out = dist.attention(q, k, v, Causal(), client=client, q_chunks=4, kv_chunks=4)
    ran = [t["key"] for t in stream.data if str(t["key"]).startswith("attnlab-partial-")]
    assert len(ran) == 10
    np.testing.assert_allclose(out, al.attention(q, k, v, Causal()), **BLOCKWISE_F64)


def test_the_current_client_is_used(client):
    q, k, v = _qkv()
    with client.as_current(), distributed.get_task_stream(client) as stream:
        out = dist.attention(q, k, v, kv_chunks=2, q_chunks=1)
    assert sum(str(t["key"]).startswith("attnlab-partial-") for t in stream.data) == 2
    np.testing.assert_allclose(out, al.attention(q, k, v), **BLOCKWISE_F64)


def test_the_local_threaded_scheduler_without_a_client():
    with pytest.raises(ValueError):
        distributed.get_client()  # no client here: the call below runs on local threads
    q, k, v = _qkv()
    np.testing.assert_allclose(dist.attention(q, k, v), al.attention(q, k, v), **BLOCKWISE_F64)


# -- fully masked rows -----------------------------------------------------------------------------


def test_a_row_no_key_allows_raises_like_attention(client):
    q, k, v = _qkv()
    mask = Padding([0, 20])  # batch element 0 has no key at all; every chunk is scheduled
    with pytest.raises(FullyMaskedRowError) as expected:
        al.attention(q, k, v, mask)
    with pytest.raises(FullyMaskedRowError) as got:
        dist.attention(q, k, v, mask, client=client, q_chunks=2, kv_chunks=3)
    assert str(got.value) == str(expected.value)
    assert got.value.rows == expected.value.rows


def test_a_query_chunk_no_key_chunk_serves_is_refused_before_scheduling():
    q, k, v = _qkv(n=40, m=10)
    mask = Causal(align="bottom_right")  # rows 0..29 see no key
    with pytest.raises(FullyMaskedRowError, match=r"blocked by Causal\(align='bottom_right'\)"):
        dist.attention(q, k, v, mask, q_chunks=4, kv_chunks=2, compute=False)


def test_compute_false_raises_when_computed():
    q, k, v = _qkv()
    lazy = dist.attention(q, k, v, Padding([0, 20]), kv_chunks=2, compute=False)
    with pytest.raises(FullyMaskedRowError, match="batch element 0 has length 0"):
        lazy.compute(scheduler="threads")


# -- dask arrays in, dask arrays out --------------------------------------------------------------


def test_dask_inputs_and_compute_false(client):
    q, k, v = _qkv()
    lq, lk = da.from_array(q, chunks=(1, H, 10, DK)), da.from_array(k, chunks=(B, 1, 19, DK))
    out = dist.attention(lq, lk, v, Causal(), client=client, kv_chunks=3, compute=False)
    assert isinstance(out, da.Array) and out.shape == (B, H, N, DV) and out.dtype == np.float64
    got = client.compute(out).result()
    np.testing.assert_allclose(got, al.attention(q, k, v, Causal()), **BLOCKWISE_F64)
    eager = dist.attention(lq, lk, v, Causal(), client=client, kv_chunks=3)
    np.testing.assert_allclose(eager, got, rtol=0, atol=0)


def test_dask_inputs_are_checked_for_shape_without_loading_and_for_nan_in_the_tasks():
    q, k, v = _qkv()
    with pytest.raises(ShapeError, match="share d_k"):
        dist.attention(da.zeros((B, N, DK + 1)), k, v)
    bad = q.copy()
    bad[1, 2, 20, 3] = np.nan
    with pytest.raises(NonFiniteInputError, match=r"q\[\.\.\., 16:31, :\]"):
        dist.attention(da.from_array(bad), k, v, q_chunks=2)


def test_numpy_inputs_are_validated_as_attention_validates():
    q, k, v = _qkv()
    bad = q.copy()
    bad[0, 0, 0, 0] = np.inf
    for args in [(bad, k, v), (q, k, v[..., :5, :]), (q * 1e200, k * 1e200, v)]:
        with pytest.raises(AttnlabError) as expected:
            al.attention(*args)
        with pytest.raises(type(expected.value), match="expected"):
            dist.attention(*args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kv_chunks": 0}, "kv_chunks to be None or an integer from 1 to 38"),
        ({"kv_chunks": M + 1}, "kv_chunks"),
        ({"q_chunks": True}, "q_chunks to be None or an integer from 1 to 31"),
        ({"q_chunks": 2.0}, "q_chunks"),
        ({"client": "tcp://127.0.0.1:8786"}, "client to be a dask.distributed Client"),
        ({"compute": "yes"}, "compute to be True or False"),
    ],
)
def test_bad_options_are_named(kwargs, match):
    q, k, v = _qkv()
    with pytest.raises(AttnlabError, match=match):
        dist.attention(q, k, v, **kwargs)


# -- faults ----------------------------------------------------------------------------------------


def test_a_chunk_too_big_for_a_worker_is_refused_before_scheduling(client):
    q = da.zeros((1, 2**16, 2**10), dtype=np.float32)  # 256 MiB each, never loaded
    before = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
    with pytest.raises(AttnlabError, match=r"needs about [\d,.]+ MiB per task.*memory_limit 2,048"):
        dist.attention(q, q, q, client=client, q_chunks=1, kv_chunks=1)
    assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == before
    # Left to itself, the plan cuts finer chunks until a task fits.
    lazy = dist.attention(q, q, q, client=client, kv_chunks=1, compute=False)
    assert len(lazy.chunks[-2]) > 1


def _slow_keys(seed: int, shape: tuple) -> np.ndarray:
    time.sleep(0.3)  # long enough that the run is still going when a worker is killed
    return np.random.default_rng(seed).standard_normal(shape)


def test_a_killed_worker_loses_nothing(client):
    from dask import delayed

    q, _, v = _qkv(n=64, m=96)
    parts = [delayed(_slow_keys)(s, (B, H, 12, DK)) for s in range(8)]
    k = da.concatenate([da.from_delayed(p, (B, H, 12, DK), np.float64) for p in parts], axis=-2)
    ref = al.attention(q, k.compute(scheduler="sync"), v, Causal())
    arr = dist.attention(q, k, v, Causal(), client=client, q_chunks=2, kv_chunks=8, compute=False)
    future = client.compute(arr)
    deadline = time.monotonic() + 30
    victim = None
    while victim is None and time.monotonic() < deadline:
        held = client.has_what()
        victim = next(
            (w for w, keys in held.items() if any("attnlab-partial" in str(x) for x in keys)),
            None,
        )
        time.sleep(0.01)
    assert victim is not None and not future.done()  # killed mid-run, holding results
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    out = future.result(timeout=60)
    np.testing.assert_allclose(out, ref, **BLOCKWISE_F64)
    client.wait_for_workers(2, timeout=60)
    assert victim not in client.scheduler_info(n_workers=-1)["workers"]


# -- the merge, and the light import -------------------------------------------------------------


def test_merge_is_associative_commutative_and_never_nan():
    rng = np.random.default_rng(4)
    parts = []
    for _ in range(3):
        lse = rng.normal(size=5) * 50
        lse[0] = -np.inf  # a row no key of this chunk allows
        parts.append((lse, np.where(np.isneginf(lse)[:, None], 0.0, rng.normal(size=(5, 2)))))
    a, b, c = parts
    left, right = merge(merge(a, b), c), merge(a, merge(c, b))
    np.testing.assert_allclose(left[0], right[0], **BLOCKWISE_F64)
    np.testing.assert_allclose(left[1], right[1], **BLOCKWISE_F64)
    assert np.isneginf(left[0][0]) and not np.isnan(left[1]).any() and (left[1][0] == 0).all()


def test_import_attnlab_loads_no_dask_and_a_missing_dask_is_named():
    code = (
        "import sys, attnlab\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]\n"
        "sys.modules['dask'] = None\n"
        "import attnlab.distributed as d\n"
        "try:\n"
        "    d.attention([[1.0]], [[1.0]], [[1.0]])\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'attnlab[dask]'" in done.stdout
