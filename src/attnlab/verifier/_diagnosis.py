"""Why a case fails: each bug a kernel plausibly has, re-run exactly, kept when it explains.

Shape legend: as ``_case.py``; P probe rows per sequence, nb key blocks.

On a failed verdict, each hypothesis that applies to the case's options is computed in float64
(``_hypotheses.attend``: the exact definition with one thing changed) on a few probe rows of
every sequence (the worst rows and rows spread evenly), and compared with the kernel's output
there. A hypothesis is kept when it takes away at least half of the failing forward tensors'
mean error; it ``explained`` the failure when every forward tensor then lies within its
tolerance (factor x the baseline's error + atol). The list is ordered explained first, then by
the error left. Causes, and how each is recognised:

    scale               another softmax scale fits (1, 1/d, scale², 1/sqrt(d_v), 2x or 1/2x,
                        x or / log2 e);
                        or a gradient is a constant multiple of the exact one
    causal_offset       the causal diagonal one key early or late
    causal_alignment    causal aligned top-left (j <= i) where FlashAttention aligns bottom-right
    gqa_mapping         query head i reading key/value head i mod h_kv instead of i // g
    dropped_keys        one aligned block of keys (16 to 256, the tail included) left out
    softcap_order       the cap applied before the scale, or not at all
    lse_base            lse in base 2 (the exact lse x log2 e)
    dtype_accumulation  P . V summed in the kernel's 16-bit dtype: no single entry fits, so its
                        mean error is compared with such a kernel's (within 2x); up to 8,192
                        keys (the emulation takes a pass per key)
    head_permutation    each head's answer sits at another head (checked on the whole tensor)
    transposed_output   the tensor is right read in the other layout (bshd / bhsd)
    window_offset       a window edge one key too near or too far
    missing_sink        the sinks left out of the softmax's denominator
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnlab.kernels._threads import one_blas_thread
from attnlab.verifier._causes import entry, forward_causes
from attnlab.verifier._hint import OTHER, reinterpreted
from attnlab.verifier._hypotheses import attend, exact_spec, probe_inputs, raw_scores
from attnlab.verifier._report import _abs_error

__all__ = ["CAUSES", "diagnose"]

CAUSES = (
    "scale",
    "causal_offset",
    "causal_alignment",
    "gqa_mapping",
    "dropped_keys",
    "softcap_order",
    "lse_base",
    "dtype_accumulation",
    "head_permutation",
    "transposed_output",
    "window_offset",
    "missing_sink",
)
_FORWARD = ("out", "lse")
_PROBES = 64  # probe rows over all sequences: half the worst, half spread evenly
_SCORES = 2**22  # h x P x M scores one probe pass may hold (32 MiB of float64)


def diagnose(case, report, exact: dict) -> list[dict]:
    """The failed ``report``'s likely causes, most likely first, as JSON-ready dicts."""
    # Its products are thin (a few probe rows against every key), where OpenBLAS's threads
    # spend more time waking each other than multiplying: 1-5 s against 0.014 s on one thread
    # for 6 x 32,768 times 32,768 x 64 on the shared 2-core machine.
    with one_blas_thread():
        return _diagnose(case, report, exact)


def _diagnose(case, report, exact: dict) -> list[dict]:
    found = []
    failing = [n for n in _FORWARD if n in report.tensors and not report.tensors[n].passed]
    if failing:
        probe = _Probe(case, report, exact, failing)
        found += probe.forward_hypotheses()
    for name, t in report.tensors.items():
        if not t.passed:
            found += _rearranged(case, name, t, exact[name])
    best = {}
    for f in sorted(found, key=lambda f: (not f["explained"], f["left"])):
        best.setdefault(f["cause"], f)  # one entry per cause: its best variant
    return [{k: f[k] for k in ("cause", "evidence", "explained")} for f in best.values()]


class _Probe:
    """The probe rows of every sequence, the kernel's and the exact answer there."""

    def __init__(self, case, report, exact, failing):
        self.case, self.report, self.failing = case, report, failing
        self.names = [n for n in _FORWARD if n in report.tensors]
        seqs = list(case.sequences())
        # at most _PROBES rows, and an eighth of the rows: a short case's probes (few queries
        # over many keys, as in decoding) stay a small share of its verdict
        rows_all = sum(qs[1] - qs[0] for _, qs, _ in seqs)
        per = max(2, min(_PROBES, max(4, rows_all // 8)) // len(seqs))
        heat = sum(report.tensors[n].heat for n in failing)  # (h, T_q) worst per row
        self.parts = []  # (b, (q0, q1), (k0, k1), rows (P,), exact spec, N) per sequence
        for b, qs, ks in seqs:
            n, m = qs[1] - qs[0], ks[1] - ks[0]
            cap = max(1, min(per, _SCORES // (case.heads * m)))
            rows = _rows(heat[:, qs[0] : qs[1]].max(axis=0), cap)
            self.parts.append((b, qs, ks, rows, exact_spec(case, b), n))
        # each part's inputs and q . k at the probe rows, shared by the hypotheses
        self.inputs = [probe_inputs(case, p[1], p[2], p[3]) for p in self.parts]
        self.raw = [
            raw_scores(p[4], q, k) for p, (q, k, _) in zip(self.parts, self.inputs, strict=True)
        ]
        self.kernel = {name: self._gather(case.arrays[name]) for name in self.names}
        self.exact = {name: self._gather(exact[name]) for name in self.names}
        self.e0 = {name: self._err(name, self.exact[name]) for name in self.names}

    def _gather(self, x) -> np.ndarray:
        """x (h, T_q[, d]) at the probe rows of every sequence, (h, P_all[, d]) float64."""
        idx = np.concatenate([qs[0] + rows for _, qs, _, rows, _, _ in self.parts])
        return np.asarray(x[:, idx], dtype=np.float64)

    def _err(self, name, answer) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return _abs_error(self.kernel[name], answer)

    def run(self, **fields) -> dict:
        """out (h, P_all, d_v) and lse (h, P_all) at the probe rows under the exact spec with
        ``fields`` changed."""
        outs, lses = [], []
        for part, inputs, raw in zip(self.parts, self.inputs, self.raw, strict=True):
            rows, spec, n = part[3:]
            spec = dataclasses.replace(spec, **fields)
            same = spec.kv_of is part[4].kv_of  # the products computed once still hold
            out, lse = attend(spec, *inputs, rows, n, raw if same else None)
            outs.append(out)
            lses.append(lse)
        return {"out": np.concatenate(outs, axis=1), "lse": np.concatenate(lses, axis=1)}

    def judge(self, cause: str, detail: str, answer: dict) -> dict | None:
        """The hypothesis's entry, or None when it takes away less than half the error."""
        left, fits = [], True
        for name in self.names:
            e1 = self._err(name, answer[name])
            fits &= bool(e1.max() <= self._tolerance(name, answer[name]))
            if name in self.failing:
                before = float(self.e0[name].mean())
                left.append(float(e1.mean()) / before if before > 0 else 1.0)
        share = max(left)
        if not share <= 0.5:
            return None
        worst = self.failing[0]
        e1 = self._err(worst, answer[worst])
        evidence = (
            f"{detail}: {worst}'s error at {self.rows_said()} falls from "
            f"{self.e0[worst].max():.3g} to {e1.max():.3g} "
            f"(tolerance {self.report.tensors[worst].tolerance:.3g})"
        )
        return {"cause": cause, "evidence": evidence, "explained": fits, "left": share}

    def _tolerance(self, name: str, answer: np.ndarray) -> float:
        """The tensor's tolerance, grown with the hypothesis's answer where it is larger than
        the exact one (an lse of unscaled scores): errors scale with the values."""
        t = self.report.tensors[name]
        with np.errstate(invalid="ignore"):
            ours = np.nanmax(np.abs(np.where(np.isfinite(answer), answer, np.nan)), initial=0.0)
            theirs = np.nanmax(np.abs(np.where(np.isfinite(self.exact[name]), self.exact[name],
                                               np.nan)), initial=0.0)  # fmt: skip
        return t.tolerance * max(1.0, float(ours) / max(float(theirs), 1e-300))

    def rows_said(self) -> str:
        count = sum(len(p[3]) for p in self.parts)
        return f"{count} probe rows"

    def forward_hypotheses(self) -> list[dict]:
        return [f for f in forward_causes(self) if f is not None]


def _rows(worst: np.ndarray, cap: int) -> np.ndarray:
    """Up to ``cap`` row indices: half the rows with the largest error, half spread evenly."""
    n = len(worst)
    if n <= cap:
        return np.arange(n)
    spread = np.linspace(0, n - 1, cap - cap // 2).round().astype(int)
    top = np.argsort(-np.nan_to_num(worst, nan=np.inf), kind="stable")[: cap // 2]
    return np.unique(np.concatenate([spread, top]))


def _rearranged(case, name: str, t, exact: np.ndarray) -> list[dict]:
    """head_permutation, transposed_output and a gradient's constant factor, on the whole
    tensor: each is the exact answer moved or scaled, no attention to re-run."""
    kernel = case.arrays[name].astype(np.float64)
    found = []
    if case.layout in OTHER and kernel.ndim == 3:
        read = reinterpreted(case.arrays[name], case.layout, case.batch).astype(np.float64)
        with np.errstate(invalid="ignore"):
            err = _abs_error(read, exact)
        if err.max() <= t.tolerance:
            found.append(entry("transposed_output", True, 0.0, (
                f"{name} read as {OTHER[case.layout]} (its memory in the other layout) is "
                f"within its tolerance: error {err.max():.3g}, tolerance {t.tolerance:.3g}"
            )))  # fmt: skip
    perm = _head_permutation(kernel, exact)
    if perm is not None:
        with np.errstate(invalid="ignore"):
            err = _abs_error(kernel, exact[perm])
        pairs = ", ".join(f"{i}<-{j}" for i, j in enumerate(perm) if i != j)
        found.append(entry("head_permutation", bool(err.max() <= t.tolerance), 0.0, (
            f"{name}'s heads hold other heads' answers ({pairs}): error {err.max():.3g} "
            f"with the heads so matched, tolerance {t.tolerance:.3g}"
        )))  # fmt: skip
    if name in ("dq", "dk", "dv"):
        found += _factor(name, t, kernel, exact)
    return found


def _head_permutation(kernel: np.ndarray, exact: np.ndarray):
    """The permutation p with kernel[i] closest to exact[p[i]], when it is not the identity
    and really is a permutation; else None. Compared on about 64 rows."""
    h = kernel.shape[0]
    if h < 2:
        return None
    step = max(1, kernel.shape[1] // 64)
    a, b = kernel[:, ::step], exact[:, ::step]
    with np.errstate(invalid="ignore"):
        cost = np.array([[np.nanmax(_abs_error(a[i], b[j])) for j in range(h)] for i in range(h)])
    perm = cost.argmin(axis=1)
    if len(set(perm.tolist())) != h or (perm == np.arange(h)).all():
        return None  # not a permutation, or every head already its own best match
    return perm


def _factor(name: str, t, kernel: np.ndarray, exact: np.ndarray) -> list[dict]:
    """A gradient that is c times the exact one (a scale applied twice or left out)."""
    finite = np.isfinite(kernel) & np.isfinite(exact)
    e2 = float((exact[finite] ** 2).sum())
    if e2 == 0:
        return []
    c = float((kernel[finite] * exact[finite]).sum()) / e2
    with np.errstate(invalid="ignore"):
        err = _abs_error(kernel, c * exact)
    if abs(c - 1) < 1e-3 or not err.max() <= 0.5 * t.max_abs_error:
        return []
    return [entry("scale", bool(err.max() <= t.tolerance), 0.0, (
        f"{name} is {c:.4g} x the exact gradient: error {err.max():.3g} once divided out, "
        f"tolerance {t.tolerance:.3g}"
    ))]  # fmt: skip
