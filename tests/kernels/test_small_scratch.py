"""The fast path's scratch tables (kernels/_small_exp.py's ``scratch``): tables that never leave a
call are kept per thread and reused by the next call of the same shape. Nothing a call returns
may be one of them: every answer must survive the next call, on this thread and on others.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import attnlab as al
from attnlab.kernels import _small_exp
from attnlab.masks import Causal

SHAPES = [(64, 4, 32, 16), (1, 2, 40, 8), (3, 100, 12)]


def _inputs(shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]


@pytest.mark.parametrize("shape", SHAPES)
def test_answers_survive_the_next_call_of_the_same_shape(shape):
    q, k, v, g = _inputs(shape, 0)
    out, weights, lse = al.attention(q, k, v, Causal(), return_weights=True, return_lse=True)
    grads = al.attention_backward(q, k, v, g, Causal())
    plain = al.attention(q, k, v, Causal())
    kept = [a.copy() for a in (out, weights, lse, *grads, plain)]
    q2, k2, v2, g2 = _inputs(shape, 1)
    al.attention(q2, k2, v2, Causal(), return_weights=True)  # same shapes, other numbers
    al.attention_backward(q2, k2, v2, g2, Causal())
    al.attention(q2, k2, v2, Causal())
    for before, now in zip(kept, (out, weights, lse, *grads, plain), strict=True):
        np.testing.assert_array_equal(now, before)


def test_each_thread_has_its_own_tables():
    shape = (8, 2, 64, 16)
    inputs = [_inputs(shape, seed) for seed in range(4)]
    want = [al.attention_backward(q, k, v, g, Causal()) for q, k, v, g in inputs]
    got: list = [None] * 4
    start = threading.Barrier(4)

    def run(i):
        start.wait()
        for _ in range(20):  # many calls at once, each thread on its own numbers
            got[i] = al.attention_backward(*inputs[i], Causal())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(got, want, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_only_tables_between_the_two_sizes_are_kept(monkeypatch):
    monkeypatch.setattr(_small_exp, "KEEP_FROM", 512)
    monkeypatch.setattr(_small_exp, "SCRATCH_BYTES", 1024)
    a = _small_exp.scratch("test", (16, 16), np.float32)  # 1 KiB: kept
    assert _small_exp.scratch("test", (16, 16), np.float32) is a
    big = _small_exp.scratch("test", (16, 17), np.float32)  # past the cap: fresh each time
    assert big is not _small_exp.scratch("test", (16, 17), np.float32)
    small = _small_exp.scratch("test", (8, 8), np.float32)  # 256 bytes: not worth a lookup
    assert small is not _small_exp.scratch("test", (8, 8), np.float32)
