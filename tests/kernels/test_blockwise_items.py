"""How the blockwise kernels cut a call into work items for their threads (``_tiles.work_items``).

Every (query block, lead element) pair is one item's work exactly once, the longest items go
first, every thread gets at least the number of items asked where the pairs allow it, and the
cut never changes a bit of the result. The forward asks for finer items than the backward,
which renders its masks once per item.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.core.masks import Causal
from attnlab.kernels import _tiles, blockwise, blockwise_backward


def _plans(n: int, bq: int, mask):
    blocks = [(r0, min(n, r0 + bq)) for r0 in range(0, n, bq)]
    return blocks, {rows: _tiles.plan(mask, rows, n, n, bq) for rows in blocks}


@pytest.mark.parametrize("per_thread", [1, 4, 16, 64])
@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_items_cover_every_pair_once_longest_first(per_thread, lead):
    blocks, plans = _plans(1000, 128, Causal())
    items = _tiles.work_items(blocks, plans, lead, threads=2, per_thread=per_thread)
    pairs = [(rows, idx) for rows, group in items for idx in group]
    lead_idx = list(np.ndindex(lead)) if lead else [()]
    assert sorted(pairs) == sorted((rows, idx) for rows in blocks for idx in lead_idx)
    cost = [sum((b - a) * (c1 - c0) for a, b, (c0, c1), _ in plans[rows]) for rows, _ in items]
    work = [c * len(group) for c, (_, group) in zip(cost, items, strict=True)]
    assert work == sorted(work, reverse=True)
    assert len(items) >= min(len(pairs), per_thread * 2)


def _spy(monkeypatch, module) -> list:
    seen: list = []
    real = module.work_items

    def spy(*args, **kwargs):
        items = real(*args, **kwargs)
        seen.append(len(items))
        return items

    monkeypatch.setattr(module, "work_items", spy)
    return seen


def test_the_forward_cuts_finer_than_the_backward(monkeypatch):
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((1, 8, 1024, 16)).astype(np.float32) for _ in range(4))
    fwd, bwd = _spy(monkeypatch, blockwise), _spy(monkeypatch, blockwise_backward)
    options = {"method": "blockwise", "block_size": 512, "threads": 2}
    al.attention(q, k, v, Causal(), **options)
    al.attention_backward(q, k, v, g, Causal(), **options)
    # 2 query blocks x 8 heads = 16 pairs: one pair an item forward, two an item backward
    assert fwd == [16] and bwd == [8]


def test_the_cut_changes_no_bit(monkeypatch):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 700, 16)).astype(np.float32) for _ in range(3))
    outs = []
    for per_thread in (1, 4, 64):
        monkeypatch.setattr(blockwise, "_ITEMS_PER_THREAD", per_thread)
        outs.append(al.attention(q, k, v, Causal(), method="blockwise", block_size=128, threads=2))
    assert all(np.array_equal(outs[0], out) for out in outs[1:])
