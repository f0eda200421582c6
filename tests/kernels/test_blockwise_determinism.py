"""The blockwise backward pass gives the same bits on every call, whatever the threads' timing.

dK and dV gather every query block's share. Added as the threads reached them (under a lock),
their order, and so their last bits, followed the scheduler: a port of FlashAttention's
determinism test (``deterministic=True``, 1023 x 1024, causal, bfloat16, a 1 MiB budget) failed
once in three runs on a loaded machine. The shares now go in block order
(``kernels/_ordered.py``); these tests call the pass many times beside a CPU hog and compare
bit for bit. A hog makes the threads' timing vary; the result must not.
"""

from __future__ import annotations

import multiprocessing
import time

import ml_dtypes
import numpy as np
import pytest

import attnlab as al
from attnlab.flash import flash_attn_backward
from attnlab.kernels import blockwise
from attnlab.masks import Causal

CALLS = 20


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


@pytest.fixture
def cpu_hog():
    """One process spinning on a core for at most 60 s (stopped when the test ends)."""
    ctx = multiprocessing.get_context("spawn")
    hog = ctx.Process(target=_spin, args=(60.0,), daemon=True)
    hog.start()
    try:
        yield
    finally:
        hog.terminate()
        hog.join(5)


def _same_bits(calls: list[tuple[np.ndarray, ...]]) -> None:
    first = calls[0]
    for i, grads in enumerate(calls[1:], start=1):
        for name, a, b in zip(("dq", "dk", "dv"), first, grads, strict=True):
            assert a.tobytes() == b.tobytes(), f"{name} of call {i} differs from call 0"


def test_flash_backward_deterministic_under_a_cpu_hog(cpu_hog, monkeypatch):
    monkeypatch.setattr(blockwise, "DEFAULT_MEMORY_BUDGET", 2**20)  # blockwise, small tiles
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    q = rng.standard_normal((1, 1023, 2, 64)).astype(bf16)
    k, v = (rng.standard_normal((1, 1024, 2, 64)).astype(bf16) for _ in range(2))
    dout = rng.standard_normal((1, 1023, 2, 64)).astype(bf16)
    calls = [
        flash_attn_backward(dout, q, k, v, causal=True, deterministic=True) for _ in range(CALLS)
    ]
    _same_bits(calls)


@pytest.mark.parametrize("mask", [None, Causal()], ids=["none", "causal"])
def test_many_small_blocks_on_two_threads_add_in_one_order(cpu_hog, mask):
    """64-row blocks and 64-key tiles: 16 query blocks race for every key tile."""
    rng = np.random.default_rng(1)
    q, k, v, g = (rng.standard_normal((2, 1024, 32)).astype(np.float32) for _ in range(4))
    calls = [
        al.attention_backward(q, k, v, g, mask, method="blockwise", block_size=(64, 64), threads=2)
        for _ in range(CALLS)
    ]
    _same_bits(calls)


def test_sinks_gradient_is_summed_in_block_order_too(cpu_hog):
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal((2, 512, 16)).astype(np.float32) for _ in range(4))
    sinks = rng.standard_normal(2).astype(np.float32)
    calls = [
        al.attention_backward(
            q[:, None],
            k[:, None],
            v[:, None],
            g[:, None],
            Causal(),
            method="blockwise",
            block_size=(32, 64),
            threads=2,
            sinks=sinks[:, None],
            wrt=("q", "k", "v", "sinks"),
        )
        for _ in range(CALLS)
    ]
    first = calls[0]
    for grads in calls[1:]:
        for a, b in zip(first, grads, strict=True):
            assert a.tobytes() == b.tobytes()
