"""FlashMLA cases: a kernel's dense paged decoding and sparse prefill, judged from dumps.

The kernels are written here in float32 numpy from FlashMLA's README (gather the keys through
the block table or the indices, V the first dv columns, softmax, natural lse, +inf for a row
with no key) and share no code with attnlab; wrong ones (a page off, V not a slice of K's
first columns, an index ignored) must fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier._api import _judged
from attnlab.verifier._options import CaseError

B, S_Q, H_Q, H_KV, D, DV, PAGE = 2, 2, 4, 1, 16, 8, 4


def _softmax_rows(s):
    """(weights, lse) of the last axis in float32; -inf entries are blocked."""
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    return e / e.sum(-1, keepdims=True), (top[..., 0] + np.log(e.sum(-1))).astype(np.float32)


def _dense(seed=0, causal=True, v_from=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, S_Q, H_Q, D)).astype(np.float32)
    cache = rng.standard_normal((8, PAGE, H_KV, D)).astype(np.float32)
    table = np.array([[6, 1, 4], [2, 7, 0]], np.int32)
    lens = np.array([5, 11], np.int32)
    out = np.zeros((B, S_Q, H_Q, DV), np.float32)
    lse = np.zeros((B, H_Q, S_Q), np.float32)
    for b in range(B):
        rows = np.arange(lens[b])
        k = cache[table[b, rows // PAGE], rows % PAGE, 0]  # (L, D)
        s = q[b] @ k.T / np.float32(np.sqrt(D))  # (S_Q, H_Q, L)
        if causal:
            blocked = np.arange(lens[b])[None, :] > np.arange(S_Q)[:, None] + lens[b] - S_Q
            s[np.broadcast_to(blocked[:, None, :], s.shape)] = -np.inf
        w, l_ = _softmax_rows(s)
        out[b], lse[b] = w @ k[:, v_from : v_from + DV], l_.T
    return {"q": q, "k_cache": cache, "block_table": table, "cache_seqlens": lens,
            "head_dim_v": np.array(DV), "causal": np.array(causal), "out": out, "lse": lse}  # fmt: skip


@pytest.mark.parametrize("causal", [False, True])
def test_dense_kernel_passes_and_a_wrong_value_slice_fails(causal):
    report = _judged(_dense(causal=causal), "bshd")
    assert report.passed, report.summary()
    assert report.options["mla"] == "dense"
    assert not _judged(_dense(causal=causal, v_from=1), "bshd").passed


def test_dense_kernel_reading_a_wrong_page_fails():
    # The kernel's output was made with the table [[6, 1, 4], [2, 7, 0]]; judged as if the
    # pages were in another order, it is wrong.
    wrong = _judged({**_dense(), "block_table": np.array([[6, 4, 1], [2, 0, 7]], np.int32)},
                    "bshd")  # fmt: skip
    assert not wrong.passed


def _sparse(seed=0, s_q=4, s_kv=12, h_q=4, h_kv=2, topk=5, ignore_first=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((s_q, h_q, D)).astype(np.float32)
    kv = rng.standard_normal((s_kv, h_kv, D)).astype(np.float32)
    idx = rng.integers(0, s_kv, (s_q, h_kv, topk)).astype(np.int32)
    idx[0, 1, :2] = -1
    idx[1, 0, :] = -1  # a row with no key
    out = np.zeros((s_q, h_q, DV), np.float32)
    lse = np.full((s_q, h_q), np.inf, np.float32)
    top = np.full((s_q, h_q), -np.inf, np.float32)
    g = h_q // h_kv
    for i in range(s_q):
        for h in range(h_q):
            sel = [j for j in idx[i, h // g] if 0 <= j < s_kv][1 if ignore_first else 0 :]
            if not sel:
                continue
            k = kv[sel, h // g]  # (n, D)
            s = k @ q[i, h] * np.float32(0.25)
            w, l_ = _softmax_rows(s)
            out[i, h], lse[i, h], top[i, h] = w @ k[:, :DV], l_, s.max()
    return {"q": q, "kv": kv, "indices": idx, "sm_scale": np.array(0.25), "d_v": np.array(DV),
            "out": out, "lse": lse, "max_logits": top}  # fmt: skip


def test_sparse_kernel_passes_from_a_file_and_one_ignoring_an_index_fails(tmp_path):
    np.savez(tmp_path / "sparse.npz", **_sparse())
    result = CliRunner().invoke(app, ["verify", str(tmp_path / "sparse.npz")])
    assert result.exit_code == 0, result.output
    report = _judged(_sparse(ignore_first=True), "bshd")
    assert not report.passed and report.options["rows_without_key"] == 1


def test_sparse_rows_with_no_key_must_be_zero():
    entries = _sparse()
    entries["out"][1, 0] = 0.5  # the row has no valid index: FlashMLA returns 0
    assert not _judged(entries, "bshd").tensors["out"].passed


@pytest.mark.parametrize(
    ("make", "change", "words"),
    [
        (_sparse, {"indices": np.full((4, 2, 5), -3, np.int32)}, "expected indices from 0"),
        (_dense, {"block_table": np.array([[6, 1, 4], [2, 9, 0]])}, r"block_table\[1\]"),
        (_dense, {"head_dim_v": np.array(2.5)}, "head_dim_v: expected one integer"),
        (_dense, {"cache_seqlens": np.array([0, 11])}, "cache_seqlens: expected every"),
        (_sparse, {"sm_scale": np.array("x")}, "sm_scale: expected one number"),
        (_sparse, {"out": np.zeros((4, 4, 3), np.float32)}, r"out: expected shape \(4, 4, 8\)"),
    ],
)
def test_bad_mla_dumps_are_refused_naming_the_entry(make, change, words):
    with pytest.raises(ValueError, match=words):
        _judged({**make(), **change}, "bshd")


def test_mla_refuses_another_layout():
    with pytest.raises(CaseError, match="layout"):
        _judged(_dense(), "bhsd")
