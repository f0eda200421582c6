"""The yardstick: attention computed plainly in the kernel's own dtype, forward and backward.

Shape legend: as ``_case.py``; a block of R query rows at a time, C the keys it may see.

FlashAttention's tests judge a kernel by how far a plain implementation in the same dtype
lands from the exact answer (its ``attention_ref(..., upcast=False, reorder_ops=True)``, with
torch's autograd through it for the gradients). This module computes that plain answer the
way PyTorch on a GPU would, every operation's result rounded to the kernel's dtype:

    scores   round(q @ round(k * scale)ᵀ)            (the scale on k: reorder_ops=True)
    softcap  round(round(tanh(round(s / c))) * c)
    masks    -inf where blocked; ALiBi's float32 bias added (float32 slopes promote, as in torch)
    weights  round(softmax(s))                       (sums in float32, one rounding at the end)
    output   round(weights @ v)
and the chain rule back through the same steps (dV = Pᵀ dO, dP = dO Vᵀ, the softmax's
dS = P (dP - rowsum(P dP)), softcap's 1 - tanh², dQ = dS k·scale, dK = dSᵀ q · scale), each
product rounded once; a key/value head's gradient is its group's sum, rounded once.

Products accumulate in float32 (float64 for a float64 kernel), as GPU matrix units do, and
rounding to float16 or bfloat16 is numpy's or ml_dtypes' round-to-nearest-even. A sink's
logit joins each row's softmax denominator. Rows are taken R at a time, R chosen so that the
few (h, R, M) tables alive at once fit ``memory_budget``: no N x M table is ever held. Each
block computes only the keys its mask lets it see (``_key_span``), so a 65,536-row case with
a 256-key window costs about 257 keys per row, as the kernel does.
"""

from __future__ import annotations

import dataclasses
import itertools
import os

import numpy as np

from attnlab.core.masks import TileState
from attnlab.kernels._threads import on_threads, pool_map
from attnlab.verifier._case import Case
from attnlab.verifier._rounding import NUMPY, passes, round_in_place

__all__ = ["baseline", "score_pairs"]

# (h, R, M) float32 tables alive at once at the backward's peak: the weights, dP, softcap's
# tanh, and the copies that rounding to the kernel's dtype makes; measured with tracemalloc.
_LIVE_TABLES = 8


class _Precision:
    """The kernel's dtype: values cast to it, computed in float32 (float64), rounded back."""

    def __init__(self, dtype: np.dtype, fast=NUMPY):
        self.dtype = dtype
        self.compute = np.dtype(np.float64 if dtype == np.float64 else np.float32)
        self.emulated = dtype.itemsize < self.compute.itemsize  # float16 and bfloat16
        self.fast = fast  # the rounding passes: numpy's, or the same compiled (_rounding.py)

    def cast(self, x: np.ndarray) -> np.ndarray:
        """``x`` as the kernel holds it (rounded to its dtype), in the compute dtype (a copy
        only where the dtype changes: the inputs are read, never written)."""
        with np.errstate(over="ignore"):
            return np.asarray(x).astype(self.dtype, copy=False).astype(self.compute)

    def divide_round(self, e: np.ndarray, total: np.ndarray) -> np.ndarray:
        """round(e / total), in place on the contiguous (..., R, C) ``e``; total (..., R, 1)."""
        if not self.emulated:
            e /= total
            return e
        self.fast.divide_round(e, total, self.dtype)
        return e

    def grad_round(self, dp: np.ndarray, w: np.ndarray, d: np.ndarray) -> np.ndarray:
        """round((dp - d) * w), in place on the contiguous (..., R, C) ``dp``; d (..., R, 1)."""
        if not self.emulated:
            dp -= d
            dp *= w
            return dp
        self.fast.grad_round(dp, w, d, self.dtype)
        return dp

    def round(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded to the kernel's dtype, in place when it is a float32 temporary (every
        caller's is: a product, a quotient, a function's result)."""
        if not self.emulated:
            return x
        if x.dtype == np.float32 and x.flags.c_contiguous and x.flags.writeable:
            return self.fast.round(x, self.dtype)
        with np.errstate(over="ignore"):  # past float16's range is inf, as on the GPU
            return x.astype(self.dtype).astype(self.compute)


def baseline_dtype(case: Case, name: str) -> np.dtype:
    """The dtype tensor ``name``'s plain answer is computed in: the wider of the kernel's and
    the one the tensor is stored in. A bfloat16 kernel's float32 lse is held to a float32 plain
    attention (on the same bfloat16 inputs); a float32 kernel's float16 output to float32 work
    rounded to float16 once."""
    stored, kernel = case.arrays[name].dtype, case.dtype
    return stored if stored.itemsize > kernel.itemsize else kernel


def baseline(
    case: Case,
    memory_budget: float,
    dtype=None,
    want=None,
    stored=True,
    threads=None,
    share=None,
) -> dict[str, np.ndarray]:
    """float64 arrays, packed as the case's, of the plain answer computed in ``dtype`` (default
    the kernel's) for each tensor of ``want`` (default all the case holds), each rounded to the
    dtype the kernel stored that tensor in (unless ``stored`` is False: float64 work kept
    whole, the exact answer of a case with a dropout mask). The key/value heads are shared
    among ``threads`` (default: the cores), each thread all the row blocks of its heads, so
    every number is the one a single thread computes. ``share``: the key/value heads the budget
    is shared among (default the case's), so a part of a case sizes its blocks as the whole."""
    a = case.arrays
    dtype = np.dtype(case.dtype if dtype is None else dtype)
    p = _Precision(dtype, passes(score_pairs(case)) if dtype.itemsize == 2 else NUMPY)
    names = ("out", "lse", "dq", "dk", "dv") if want is None else want
    want = [name for name in ("out", "lse", "dq", "dk", "dv") if name in a and name in names]
    plain = {name: np.zeros(a[name].shape, dtype=p.compute) for name in want}
    # A plain float16 attention overflows (scores past 65,504 are inf, inf - inf is NaN) as it
    # would on the GPU; the report bounds the kernel only where it stayed finite.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        h_kv = case.kv_heads
        threads = min(h_kv, threads or os.cpu_count() or 1)
        cuts = np.linspace(0, h_kv, threads + 1).round().astype(int)
        parts = [(int(x), int(y)) for x, y in itertools.pairwise(cuts) if y > x]
        for b, qs, ks in case.sequences():

            def heads(kv, b=b, qs=qs, ks=ks):
                _sequence(case, p, b, qs, ks, memory_budget, plain, kv, share or h_kv)

            on_threads(heads, parts, threads)
    if not stored:
        return {name: plain[name].astype(np.float64) for name in want}
    # each tensor rounded to its stored dtype on its own thread (numpy releases the GIL)
    with pool_map(min(threads, len(want)), len(want)) as each:
        done = each(lambda name: _stored(plain[name], a[name].dtype), want)
    return dict(zip(want, done, strict=True))


def score_pairs(case: Case) -> int:
    """Heads x query rows x keys over the case's sequences, masks ignored: its tables' size."""
    return case.heads * int(np.diff(case.cu_q) @ np.diff(case.cu_k))


def _stored(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 ``x`` as rounded to the dtype its tensor is stored in."""
    if x.dtype == np.float32 and dtype.itemsize == 2:  # float16, bfloat16: on the bits
        return round_in_place(x, dtype).astype(np.float64)
    with np.errstate(over="ignore"):
        return x.astype(dtype).astype(np.float64)


def _heads_of(opt, h0: int, h1: int):
    """The options of query heads h0:h1 alone (their ALiBi slopes and sinks)."""
    return dataclasses.replace(
        opt,
        alibi_slopes=None if opt.alibi_slopes is None else opt.alibi_slopes[:, h0:h1],
        sinks=None if opt.sinks is None else opt.sinks[h0:h1],
    )


def _sequence(case, p: _Precision, b, qs, ks, budget, plain, kv, share) -> None:
    """Sequence b's plain answer for key/value heads kv[0]:kv[1] (their query heads' rows)."""
    a = case.arrays
    g = case.group[1]
    h_kv, hq = kv[1] - kv[0], slice(kv[0] * g, kv[1] * g)  # this part's heads
    opt = _heads_of(case.options, hq.start, hq.stop)
    n, m = qs[1] - qs[0], ks[1] - ks[0]
    scale = opt.softmax_scale or 1.0 / np.sqrt(a["q"].shape[-1])
    q = p.cast(a["q"][hq, qs[0] : qs[1]]).reshape(h_kv, g, n, -1)  # (h_kv, g, N, d_k)
    k = p.round(p.cast(a["k"][kv[0] : kv[1], ks[0] : ks[1]]) * p.compute.type(scale))[:, None]
    v = p.cast(a["v"][kv[0] : kv[1], ks[0] : ks[1]])[:, None]  # (h_kv, 1, M, d_v)
    do = None
    if case.backward and any(name in plain for name in ("dq", "dk", "dv")):
        do = p.cast(a["do"][hq, qs[0] : qs[1]]).reshape(h_kv, g, n, -1)  # (h_kv, g, N, d_v)
        dv_sum = np.zeros((h_kv, g, m, v.shape[-1]), p.compute)  # (h_kv, g, M, d_v)
        dk_sum = np.zeros((h_kv, g, m, q.shape[-1]), p.compute)  # (h_kv, g, M, d_k)
    keep, drop = None, None
    if case.dropout is not None and case.dropout.keep is not None:
        keep = case.dropout.keep[b][hq].reshape(h_kv, g, n, m)  # (h_kv, g, N, M) bool
        drop = p.compute.type(1.0 / (1.0 - case.dropout.p))
        v = p.round(v * drop)  # attention_ref scales v by 1/(1-p), rounded
    mask = opt.mask(b, (h_kv, g))
    sinks = None if opt.sinks is None else opt.sinks.reshape(h_kv, g, 1, 1).astype(p.compute)
    # R x C per block: every part's tables together fit the budget
    cells = int(budget // (_LIVE_TABLES * share * g * p.compute.itemsize))
    for r0, r1, c0, c1 in _blocks(mask, n, m, cells):  # rows r0:r1 see keys c0:c1 at most
        kc, vc = k[:, :, c0:c1], v[:, :, c0:c1]  # (h_kv, 1, C, d)
        s, t = _scores(p, q[:, :, r0:r1], kc, opt.softcap, mask, (r0, r1), (c0, c1), (n, m))
        w, lse = _softmax(p, s, sinks)  # (h_kv, g, R, C), (h_kv, g, R)
        kept = None if keep is None else keep[:, :, r0:r1, c0:c1]  # (h_kv, g, R, C)
        wd = w if kept is None else w * kept  # dropped weights are 0
        out = p.round(wd @ vc)  # (h_kv, g, R, d_v)
        _put(plain, "out", out, hq, qs[0] + r0, qs[0] + r1)
        _put(plain, "lse", lse, hq, qs[0] + r0, qs[0] + r1)
        if do is None:
            continue
        dout = do[:, :, r0:r1]  # (h_kv, g, R, d_v)
        dv_sum[:, :, c0:c1] += wd.swapaxes(-1, -2) @ dout  # (h_kv, g, C, d_v)
        dp = p.round(dout @ vc.swapaxes(-1, -2))  # (h_kv, g, R, C)
        if kept is not None:
            dp *= kept  # no gradient reaches a dropped weight
        rowsum = np.einsum("...ij,...ij->...i", dp, w)[..., None]  # (h_kv, g, R, 1)
        ds = p.grad_round(dp, w, rowsum)  # (h_kv, g, R, C): (dP - rowsum(P dP)) P, rounded
        if opt.softcap:
            c = p.compute.type(opt.softcap)
            ds = p.round(p.round(p.round(ds * c) * (1 - t * t)) / c)
        _put(plain, "dq", p.round(ds @ kc), hq, qs[0] + r0, qs[0] + r1)  # (h_kv, g, R, d_k)
        dk_sum[:, :, c0:c1] += ds.swapaxes(-1, -2) @ q[:, :, r0:r1]  # (h_kv, g, C, d_k)
    if do is not None:
        dv = p.round(p.round(dv_sum).sum(axis=1))  # (h_kv, M, d_v): the group's sum
        if drop is not None:
            dv = p.round(dv * drop)  # through v's 1/(1-p)
        dk_scaled = p.round(p.round(dk_sum).sum(axis=1))  # (h_kv, M, d_k), for k * scale
        dk = p.round(dk_scaled * p.compute.type(scale))
        for name, grad in (("dk", dk), ("dv", dv)):
            if name in plain:
                plain[name][kv[0] : kv[1], ks[0] : ks[1]] = grad


def _put(plain: dict, name: str, x: np.ndarray, heads: slice, r0: int, r1: int) -> None:
    if name in plain:  # (h_kv, g, R, ...) -> heads, rows r0:r1 of the packed (h, T_q, ...)
        plain[name][heads, r0:r1] = x.reshape((-1, r1 - r0, *x.shape[3:]))


def _blocks(mask, n: int, m: int, cells: int):
    """(r0, r1, c0, c1) for blocks of query rows, each with the span of keys it may see, as
    many rows as keep rows x keys within ``cells``: a window's blocks grow to its width."""
    r0 = 0
    while r0 < n:
        rows = max(1, min(n - r0, cells // m))
        c0, c1 = _key_span(mask, (r0, r0 + rows), n, m)
        while rows < n - r0:  # double the block while its scores still fit
            more = min(2 * rows, n - r0)
            s0, s1 = _key_span(mask, (r0, r0 + more), n, m)
            if more * (s1 - s0) > cells:
                break
            rows, c0, c1 = more, s0, s1
        yield r0, r0 + rows, c0, c1
        r0 += rows


def _key_span(mask, rows, n: int, m: int) -> tuple[int, int]:
    """[c0, c1): the keys outside which ``mask`` blocks every pair of ``rows``, found tile by
    tile with the masks' own ``tile_state``, so a window's rows cost its width, not M."""
    if mask is None:
        return 0, m
    width = max(512, -(-m // 64))  # at most 64 tiles to ask about per row block
    seen = [
        c
        for c in range(0, m, width)
        if mask.tile_state(rows, (c, min(c + width, m)), n, m, 2) is not TileState.BLOCKED
    ]
    if not seen:  # rows that see no key: any tile keeps the shapes, the mask blocks it all
        return 0, min(width, m)
    return seen[0], min(seen[-1] + width, m)


def _scores(p: _Precision, q, k, softcap: float, mask, rows, cols, nm):
    """The block's scores after softcap and masks, and softcap's tanh (None without one)."""
    s = p.round(q @ k.swapaxes(-1, -2))  # (h_kv, g, R, M)
    t = None
    if softcap:
        c = p.compute.type(softcap)
        t = p.round(np.tanh(p.round(s / c)))
        s = p.round(t * c)
    if mask is not None:
        n, m = nm
        if mask.boolean:  # a bool tile, a quarter of the scores' bytes, and -inf in place
            np.copyto(s, -np.inf, where=~mask.block(rows, cols, n, m, 2))
        else:
            s += mask.bias(rows, cols, n, m, 2)  # broadcastable to (h_kv, g, R, C)
    return s, t


def _softmax(p: _Precision, s: np.ndarray, sinks):
    """Weights rounded to the kernel's dtype and the log-sum-exp (-inf for a row with no key).
    ``s`` is overwritten."""
    top = s.max(axis=-1, keepdims=True)  # (h_kv, g, R, 1)
    if sinks is not None:
        top = np.maximum(top, sinks)
    top[~np.isfinite(top)] = 0  # a row with no key: no shift, every exp is 0
    s -= top
    e = np.exp(s, out=s)  # (h_kv, g, R, M)
    total = e.sum(axis=-1, keepdims=True)
    if sinks is not None:
        total += np.exp(sinks - top)
    with np.errstate(divide="ignore"):
        lse = np.log(total) + top  # log 0 = -inf for a row with no key
    # a row with no key stays all 0
    return p.divide_round(e, np.where(total > 0, total, 1)), lse[..., 0]
