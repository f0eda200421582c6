"""KV-cache cases: a kernel's flash_attn_with_kvcache output and its cache after the append.

The kernel here is an independent numpy decoder written from FlashAttention's docstring
(append the new rows at cache_seqlens, turn the new keys and the queries by rotary, attend each
query to the cache rows up to its sequence's new length, bottom-right aligned), using the dense
float64 reference of tests/verify_reference.py per sequence; it shares no code with attnlab.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import verify
from verify_reference import reference

B, N, N_NEW, H, H_KV, D, S, R = 2, 3, 3, 4, 2, 16, 24, 8


def _turn(x, cos, sin, pos):
    """Interleaved rotary on features 0..R-1 of x (B, L, h, d) at positions pos (B, L)."""
    out = x.copy()
    c, s = cos[pos][:, :, None, :], sin[pos][:, :, None, :]  # (B, L, 1, R/2)
    a, b = x[..., 0:R:2], x[..., 1:R:2]
    out[..., 0:R:2], out[..., 1:R:2] = a * c - b * s, b * c + a * s
    return out


def _case(seed=0, dtype=np.float32, rotary=True, seqlens=(5, 9), stale=0, shift=0):
    """A decoding step: entries by FlashAttention's names, the kernel's outputs included.
    ``stale`` attends to that many extra cache rows; ``shift`` appends that many rows late."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, N, H, D)).astype(dtype)
    k_cache = rng.standard_normal((B, S, H_KV, D)).astype(dtype)
    v_cache = rng.standard_normal((B, S, H_KV, D)).astype(dtype)
    k = rng.standard_normal((B, N_NEW, H_KV, D)).astype(dtype)
    v = rng.standard_normal((B, N_NEW, H_KV, D)).astype(dtype)
    lens = np.array(seqlens, np.int32)
    angles = np.arange(S)[:, None] * 0.1 ** (np.arange(R // 2)[None, :] / 2)  # (S, R/2)
    cos, sin = np.cos(angles), np.sin(angles)
    pos = lens[:, None] + np.arange(N_NEW)  # (B, N_NEW): the new rows' positions
    k_new = _turn(k.astype(np.float64), cos, sin, pos) if rotary else k.astype(np.float64)
    q_t = _turn(q.astype(np.float64), cos, sin, pos) if rotary else q.astype(np.float64)
    kc, vc = k_cache.copy(), v_cache.copy()
    out = np.zeros((B, N, H, D))
    lse = np.zeros((B, H, N))
    for b in range(B):
        at = lens[b] + shift
        kc[b, at : at + N_NEW], vc[b, at : at + N_NEW] = k_new[b].astype(dtype), v[b]
        m = lens[b] + N_NEW + stale
        got = reference(q_t[b : b + 1], kc[b : b + 1, :m], vc[b : b + 1, :m], causal=True)
        out[b], lse[b] = got["out"][0], got["lse"][0]
    entries = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "k": k, "v": v,
               "cache_seqlens": lens, "causal": np.array(True), "out": out.astype(dtype),
               "lse": lse.astype(np.float32), "k_cache_out": kc, "v_cache_out": vc}  # fmt: skip
    if rotary:
        entries.update(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=np.array(True))
    return entries


@pytest.mark.parametrize("rotary", [True, False])
def test_a_correct_decoding_step_passes(rotary):
    report = verify(**_case(rotary=rotary))
    assert report.passed, report.summary()
    assert set(report.tensors) == {"out", "lse", "k_cache_out", "v_cache_out"}
    assert report.layout == "kvcache" and report.shape["seqlen_k"] == [8, 12]


def test_a_late_append_fails_at_the_cache_row():
    report = verify(**_case(1, shift=1))
    assert not report.passed
    w = report.tensors["k_cache_out"].worst
    assert not report.tensors["k_cache_out"].passed and not report.tensors["v_cache_out"].passed
    start = (5, 9)[w["batch"]]
    assert start <= w["row"] <= start + N_NEW  # within the rows the append wrote or should have
    assert not report.tensors["out"].passed  # its attention read the rows misplaced


def test_attending_past_the_new_length_fails_in_the_output():
    case = _case(2, stale=1, seqlens=(5, 9))
    report = verify(**case)
    assert not report.passed and not report.tensors["out"].passed
    assert report.tensors["k_cache_out"].passed  # the append itself was right
    assert "out off by" in report.summary()


def test_a_wrong_seqlen_in_one_sequence_is_located():
    good = _case(3, seqlens=(5, 9))
    bad = _case(3, seqlens=(5, 10))  # the kernel used 10 for sequence 1
    good["out"][1], good["lse"][1] = bad["out"][1], bad["lse"][1]
    report = verify(**good)
    assert not report.tensors["out"].passed
    assert report.tensors["out"].worst["batch"] == 1


def test_paged_cache_passes(tmp_path):
    case = _case(4, rotary=False)
    page = 4
    table = np.array([[5, 0, 3, 1, 11, 9], [2, 7, 4, 10, 6, 8]], np.int32)  # (B, S / page)
    pages = {}
    for name in ("k_cache", "v_cache", "k_cache_out", "v_cache_out"):
        paged = np.zeros((12, page, H_KV, D), np.float32)
        for b in range(B):
            paged[table[b]] = case[name][b].reshape(-1, page, H_KV, D)
        pages[name] = paged
    case.update(pages, block_table=table)
    report = verify(**case)
    assert report.passed, report.summary()
    path = tmp_path / "paged.npz"
    np.savez(path, **case)
    assert CliRunner().invoke(app, ["verify", str(path)]).exit_code == 0


def test_a_kvcache_case_with_an_unknown_entry_is_refused():
    from attnlab.verifier import CaseError

    case = _case(5)
    case["dq"] = case["q"]
    with pytest.raises(CaseError, match="dq"):
        verify(**case)


def test_the_plot_draws_the_caches_over_their_own_rows():
    from attnlab.verifier import figure

    fig = figure(verify(**_case(6, shift=1)))
    ranges = [v["range"][1] for k, v in fig["layout"].items() if k.startswith("xaxis")]
    assert ranges[:2] == [B * N, B * N] and ranges[4:] == [B * S] * 4  # out; lse; caches
