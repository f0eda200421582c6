"""The hypotheses of the diagnosis (``_diagnosis.py``), each a bug re-run on the probe rows.

Shape legend: as ``_case.py``; P probe rows, nb key blocks, h heads, d_v value width.

Each function takes the diagnosis's probe (its rows, the kernel's and the exact answer there,
``probe.run`` to re-run the exact definition with a field changed, ``probe.judge`` to keep a
hypothesis that takes away at least half the error) and returns an entry or None. Only the
hypotheses the case's options make possible are tried: no window, no window_offset.
"""

from __future__ import annotations

import math

import numpy as np

from attnlab.verifier._hypotheses import accumulated, partial_sums, probe_inputs
from attnlab.verifier._report import _abs_error

__all__ = ["entry", "forward_causes"]

_BLOCKS = (16, 32, 64, 128, 256)  # key block sizes a kernel may drop
_ACCUMULATED_KEYS = 8192  # the narrow accumulator is emulated a key at a time: up to this
_MAX_SHARES = 128  # key blocks whose partial sums are held: (128, h, P, d_v) at most
_LOG2E = 1.0 / math.log(2.0)


def entry(cause: str, explained: bool, left: float, evidence: str) -> dict:
    """A diagnosis entry; ``left``, the share of the error it leaves, orders the list."""
    return {"cause": cause, "evidence": evidence, "explained": explained, "left": left}


def forward_causes(probe):
    """Every applicable hypothesis's entry (None where it explains nothing)."""
    case, opt = probe.case, probe.case.options
    spec = probe.parts[0][4]
    yield _scale(probe, spec.scale, case.arrays["q"].shape[-1], case.arrays["v"].shape[-1])
    left, right = opt.window
    band = "causal_offset" if opt.causal else "window_offset"
    for r in (right - 1, right + 1) if right >= 0 else ():
        said = "one key later" if r > right else "one key earlier"
        yield probe.judge(band, f"the diagonal (right edge) {said}", probe.run(right=r))
    for lf in (left - 1, left + 1) if left >= 0 else ():
        if lf >= 0:
            said = "one key wider" if lf > left else "one key narrower"
            yield probe.judge("window_offset", f"the window's left edge {said}", probe.run(left=lf))
    if right >= 0 and any(qs[1] - qs[0] != ks[1] - ks[0] for _, qs, ks, _, _, _ in probe.parts):
        said = "the causal diagonal aligned top-left (j <= i), not bottom-right"
        yield probe.judge("causal_alignment", said, probe.run(top_left=True))
    h_kv, g = case.group
    if h_kv > 1 and g > 1:
        said = f"query head i reading key/value head i mod {h_kv}, not i // {g}"
        yield probe.judge("gqa_mapping", said, probe.run(kv_of=np.arange(case.heads) % h_kv))
    if opt.softcap:
        said = "the softcap applied before the scale"
        yield probe.judge("softcap_order", said, probe.run(cap_first=True))
        yield probe.judge("softcap_order", "the softcap not applied", probe.run(softcap=0.0))
    if opt.sinks is not None:
        yield probe.judge("missing_sink", "the sinks left out", probe.run(sinks=None))
    if "lse" in probe.names:
        base2 = {"out": probe.exact["out"], "lse": probe.exact["lse"] * _LOG2E}
        yield probe.judge("lse_base", "lse in base 2 (the exact lse x log2 e)", base2)
    yield dropped(probe)
    yield accumulation(probe)


def _scale(probe, scale: float, d_k: int, d_v: int):
    """The best of the scales a kernel plausibly used instead."""
    candidates = {
        "1 (no scale)": 1.0,
        f"1/d_k = {1 / d_k:.4g}": 1.0 / d_k,
        f"scale squared ({scale**2:.4g})": scale**2,
        f"scale x log2 e ({scale * _LOG2E:.4g})": scale * _LOG2E,
        f"scale / log2 e ({scale / _LOG2E:.4g})": scale / _LOG2E,
        f"1/sqrt(d_k) = {d_k**-0.5:.4g}": d_k**-0.5,
        f"2 x scale ({2 * scale:.4g})": 2 * scale,
        f"scale / 2 ({scale / 2:.4g})": scale / 2,
    }
    if d_v != d_k:
        candidates[f"1/sqrt(d_v) = {d_v**-0.5:.4g}"] = d_v**-0.5
    best = None
    for said, c in candidates.items():
        if abs(c - scale) <= 1e-12 * scale:
            continue
        found = probe.judge(
            "scale", f"softmax scale {said} instead of {scale:.4g}", probe.run(scale=c)
        )
        if found is not None and (best is None or _better(found, best)):
            best = found
    return best


def accumulation(probe) -> dict | None:
    """dtype_accumulation: the kernel's mean error at the probe rows against that of a kernel
    summing P . V in the case's 16-bit dtype (fewer rows: a pass per key)."""
    case = probe.case
    longest = max(ks[1] - ks[0] for _, _, ks, _, _, _ in probe.parts)
    if case.dtype.itemsize != 2 or "out" not in probe.failing or longest > _ACCUMULATED_KEYS:
        return None
    kernel_err, emulated_err, plain = [], [], []
    start = 0
    for _, qs, ks, rows, spec, n in probe.parts:
        few = rows[:: max(1, len(rows) // 8)]
        q, k, v = probe_inputs(case, qs, ks, few)
        sim = accumulated(spec, q, k, v, few, n, case.dtype)
        where = start + np.searchsorted(rows, few)
        ex, ke = probe.exact["out"][:, where], probe.kernel["out"][:, where]
        with np.errstate(invalid="ignore"):
            kernel_err.append(_abs_error(ke, ex).ravel())
            emulated_err.append(_abs_error(sim, ex).ravel())
        start += len(rows)
        plain.append(probe.report.tensors["out"].baseline_mean_error)
    ours, theirs = np.concatenate(kernel_err), np.concatenate(emulated_err)
    mean, like = float(ours.mean()), float(theirs.mean())
    if not (like > 0 and 0.5 <= mean / like <= 2.0 and ours.max() <= 2 * theirs.max()):
        return None
    # A match of statistics, not of entries: ranked after any bug that fits entry by entry.
    return entry("dtype_accumulation", True, 0.5, (
        f"out's mean error {mean:.3g} at the probe rows matches a kernel that sums P . V in "
        f"{case.dtype.name} ({like:.3g}; largest {ours.max():.3g} and {theirs.max():.3g}); "
        f"the plain baseline's mean is {plain[0]:.3g}"
    ))  # fmt: skip


def dropped(probe) -> dict | None:
    """dropped_keys: the best single aligned key block left out, from each block's share:
    the shares of the finest blocks (16 keys, coarser past 2,048 keys) computed once, larger
    blocks their sums."""
    m = max(ks[1] - ks[0] for _, _, ks, _, _, _ in probe.parts)
    finest = _BLOCKS[0]
    while -(-m // finest) > _MAX_SHARES:  # long sequences: coarser shares, bounded memory
        finest *= 2
    base = []  # per part: (S, Z) of the finest blocks, their totals, top, spec
    for part, (q, k, v), raw in zip(probe.parts, probe.inputs, probe.raw, strict=True):
        rows, spec, n = part[3:]
        S, Z, top = partial_sums(spec, q, k, v, rows, n, finest, raw)
        base.append((S, Z, S.sum(0), Z.sum(0), top, spec))
    best = None
    for block in [b for b in _BLOCKS if b >= finest] or [finest]:
        per = block // finest
        blocks = max(-(-b[0].shape[0] // per) for b in base)
        if blocks < 2 and block > finest:
            continue
        for c in range(blocks):
            answer = _without(base, c * per, (c + 1) * per)
            found = probe.judge("dropped_keys", _keys_said(probe, block, c), answer)
            if found is not None and (best is None or _better(found, best)):
                best = found
    return best


def _better(a: dict, b: dict) -> bool:
    return (not a["explained"], a["left"]) < (not b["explained"], b["left"])


def _keys_said(probe, block: int, c: int) -> str:
    m = max(ks[1] - ks[0] for _, _, ks, _, _, _ in probe.parts)
    return f"keys {c * block}..{min((c + 1) * block, m) - 1} of each sequence left out"


def _without(base, c0: int, c1: int) -> dict:
    """out and lse of every probe row with the finest blocks c0:c1 removed from its softmax."""
    outs, lses = [], []
    for S, Z, s_all, z_all, top, spec in base:
        if c0 < S.shape[0]:
            s_all, z_all = s_all - S[c0:c1].sum(0), z_all - Z[c0:c1].sum(0)
        if spec.sinks is not None:
            z_all = z_all + np.exp(spec.sinks[:, None, None] - top)
        with np.errstate(divide="ignore", invalid="ignore"):
            z_all = np.maximum(z_all, 0.0)  # a difference of sums: no negative round-off
            outs.append(s_all / np.where(z_all > 0, z_all, 1.0))
            lses.append((np.log(z_all) + top)[..., 0])
    return {"out": np.concatenate(outs, axis=1), "lse": np.concatenate(lses, axis=1)}
