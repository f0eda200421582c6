"""Split-K cases: each partial state judged over its own key range, and the merged output.

The kernel is written here: a float32 softmax by hand over each key range (bottom-right causal
over the whole key axis), its partial outputs and natural-log lses, merged by the closed form
out = Σ exp(l_s - lse) o_s; it shares no code with attnlab.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnlab.verifier._api import _judged
from attnlab.verifier._options import CaseError

B, N, M, H, D = 2, 4, 10, 2, 8


def _partial(q, k, v, causal, start, stop, left=None):
    """(out (B, N, H, D), lse (B, H, N)) over keys start..stop-1, float32, rows with none: 0, -inf."""
    s = np.einsum("bnhd,bmhd->bhnm", q, k) / np.float32(np.sqrt(D))
    allowed = np.zeros((N, M), bool)
    allowed[:, start:stop] = True
    if causal:
        allowed &= np.arange(M)[None, :] <= np.arange(N)[:, None] + M - N
    if left is not None:  # FlashAttention's window_size=(left, 0): bottom-right
        allowed &= np.arange(M)[None, :] >= np.arange(N)[:, None] + M - N - left
    s = np.where(allowed, s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = e.sum(axis=-1, keepdims=True)
    w = e / np.where(total > 0, total, 1)
    out = np.einsum("bhnm,bmhd->bnhd", w, v)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, top[..., 0] + np.log(total[..., 0]), -np.inf)
    return out.astype(np.float32), lse.astype(np.float32)


def _entries(causal, bounds, seed=0, left=None):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, n, H, D)).astype(np.float32) for n in (N, M, M))
    parts = [_partial(q, k, v, causal, a, b, left) for a, b in itertools.pairwise(bounds)]
    outs, lses = np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
    top = lses.max(axis=0)
    w = np.exp(lses - top)  # (S, B, H, N)
    merged = (np.moveaxis(w, -1, -2)[..., None] * outs).sum(0) / np.moveaxis(w.sum(0), -1, -2)[
        ..., None
    ]
    return {"q": q, "k": k, "v": v, "out": merged.astype(np.float32),
            "lse": (top + np.log(w.sum(0))).astype(np.float32), "out_partials": outs,
            "lse_partials": lses, "kv_splits": np.array(bounds), "causal": np.array(causal),
            "window_size": np.array([-1 if left is None else left, -1])}  # fmt: skip


@pytest.mark.parametrize("causal", [False, True])
def test_correct_partials_and_merge_pass(causal):
    entries = _entries(causal, [0, 3, 7, 10])
    if causal:  # the last range is past the diagonal of the first rows: empty there
        assert np.isneginf(entries["lse_partials"][2][:, :, 0]).all()
    report = _judged(entries, "bshd")
    assert report.passed, report.summary()
    assert {"out", "lse", "out_partials[0]", "lse_partials[2]"} <= set(report.tensors)
    assert report.options["kv_splits"] == [0, 3, 7, 10]


def test_a_causal_window_is_carried_onto_each_slice():
    # window (5, 0) over N = 4, M = 10: rows see keys i + 1 .. i + 6; the split [0, 7) ends
    # 3 keys before M, so on the slice the window is (5 - 3, 3).
    entries = _entries(True, [0, 7, 10], left=5)
    assert np.isneginf(entries["lse_partials"][1][:, :, 0]).all()  # row 0 ends at key 6
    report = _judged(entries, "bshd")
    assert report.passed, report.summary()
    moved = _entries(True, [0, 7, 10], left=4)  # a kernel whose window is one key short
    moved["window_size"] = np.array([5, -1])
    assert not _judged(moved, "bshd").tensors["out_partials[0]"].passed


def test_a_partial_over_the_wrong_keys_fails_and_is_named():
    entries = _entries(True, [0, 3, 7, 10])
    q, k, v = entries["q"], entries["k"], entries["v"]
    wrong, _ = _partial(q, k, v, True, 3, 8)  # one key too many
    entries["out_partials"][1] = wrong
    report = _judged(entries, "bshd")
    assert not report.passed
    assert not report.tensors["out_partials[1]"].passed
    assert report.tensors["out_partials[0]"].passed and report.tensors["out"].passed


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"kv_splits": np.array([0, 5, 4, 10])}, "kv_splits: expected S \\+ 1 integer"),
        ({"kv_splits": np.array([0, 5, 9])}, "rising from 0 to M = 10"),
        ({"kv_splits": np.array([0, 5, 10])}, "out_partials: expected 2 partial states"),
        ({"alibi_slopes": np.ones(H)}, "alibi_slopes: not taken with kv_splits"),
    ],
)
def test_bad_split_entries_raise_one_case_error(change, words):
    entries = _entries(False, [0, 3, 7, 10])
    with pytest.raises(CaseError, match=words):
        _judged({**entries, **change}, "bshd")
