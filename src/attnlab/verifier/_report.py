"""The verdict: each tensor's error against the exact answer, judged by FlashAttention's rule.

Shape legend: as ``_case.py``; a tensor is packed (heads, rows, columns), lse (heads, rows).

For each tensor the kernel returned (out, lse, dq, dk, dv):

    error           |kernel - exact|, elementwise in float64; NaN counts as inf
    baseline error  max |plain - exact|, the plain same-dtype answer of ``_baseline.py``,
                    over the entries where the plain answer is finite
    pass            max error <= factor * baseline error + atol, and
                    mean error <= factor * baseline mean error + floor,
                    floor = atol * min(1, 4 / sqrt(entries))

``factor`` is 2, as in FlashAttention's tests. ``atol`` defaults to two units in the last place
of the tensor's stored dtype at the tensor's scale: 2 * ulp(0.3 + max |exact|), the allowance
FlashAttention's tests take as ``2 * max |out_ref + 0.3 - 0.3 - out_ref|``, the error of doing
any arithmetic at all on the reference in that dtype. For a float16 output of values up to 1
that is 2 * 2^-10 ≈ 2.0e-3; for float32, 2.4e-7; for float64, 4.4e-16.

The mean rule catches what the maximum cannot see: a kernel that accumulates in too narrow a
dtype errs a little everywhere, its worst entry still under atol, its mean several times the
plain answer's. Correct kernels' mean errors sit at 0.3-1.2 times the baseline's (a sweep of
torch kernels with float32 accumulation, benchmarks/verify_mean_sweep.py), so the max rule's
factor, 2, bounds the mean too (a --factor given loosens or tightens both). The floor is for
few entries: one query and one key leave the baseline's mean at 0 by luck, or at an eighth of a
float32 lse's error. A mean of n errors of about an ulp each strays by about atol / sqrt(n);
correct kernels needed up to 1.4 atol / sqrt(n) over the plain mean, so the floor allows 4,
and never more than atol (one entry: its mean is its maximum).

A log-sum-exp row the exact answer leaves at -inf (a row with no key) is right when the kernel
gives -inf or +inf there (FlashAttention writes +inf), and infinitely wrong otherwise.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import numpy as np

from attnlab.verifier._blocks import blocks_json
from attnlab.verifier._case import Case

__all__ = ["TensorVerdict", "VerifyReport", "default_atol", "judge"]

TENSORS = ("out", "lse", "dq", "dk", "dv")
_KEY_ROWS = ("dk", "dv")  # tensors whose rows are keys, not queries


def _eps(dtype: np.dtype) -> float:
    if dtype.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)
    return float(np.finfo(dtype).eps)


def default_atol(dtype: np.dtype, scale: float) -> float:
    """2 * ulp(0.3 + scale) in ``dtype``: two units in the last place at the tensor's scale."""
    x = 0.3 + abs(scale)
    return 2.0 * _eps(dtype) * 2.0 ** math.floor(math.log2(x))


@dataclass(frozen=True)
class TensorVerdict:
    """One tensor's errors and verdict. ``worst`` names where the error is largest."""

    name: str
    dtype: str
    max_abs_error: float
    mean_abs_error: float
    baseline_error: float
    atol: float
    factor: float
    worst: dict
    baseline_mean_error: float  # mean |plain - exact|: FlexAttention's tests judge on means
    baseline_dtype: str  # the dtype the plain answer was computed in
    nonfinite: int  # kernel entries that are NaN or inf where the exact answer is finite
    heat: np.ndarray = field(repr=False, compare=False)  # (heads, rows): max error per row
    rows_cu: np.ndarray | None = field(default=None, repr=False, compare=False)  # (B + 1,)
    mean_floor: float = 0.0  # atol * min(1, 4 / sqrt(entries)): the mean rule's allowance

    @property
    def tolerance(self) -> float:
        return self.factor * self.baseline_error + self.atol

    @property
    def ratio(self) -> float:
        """max error / baseline error (inf when only the kernel errs, 0 when neither does)."""
        if self.baseline_error > 0:
            return self.max_abs_error / self.baseline_error
        return 0.0 if self.max_abs_error == 0 else math.inf

    @property
    def mean_tolerance(self) -> float:
        return self.factor * self.baseline_mean_error + self.mean_floor

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance and self.mean_passed

    @property
    def mean_rule(self) -> bool:
        """Whether the mean rule judges this tensor: only against a float16 or bfloat16
        baseline, where the bug it exists for (accumulating in the stored dtype) shows. Against
        a float32 baseline both means are a few ulps, and a correct kernel that takes other
        float32 steps (torch's compiled FlexAttention with a softcap, on a GPU: its lse's mean
        error 3.1 times a plain float32 attention's) would fail it; the max rule judges those."""
        return self.baseline_dtype in ("float16", "bfloat16")

    @property
    def mean_passed(self) -> bool:
        """The mean rule alone: the kernel's mean error within factor x the baseline's."""
        return not self.mean_rule or self.mean_abs_error <= self.mean_tolerance

    @property
    def mean_ratio(self) -> float:
        """mean error / the baseline's mean error, the ratio FlexAttention's tests bound."""
        if self.baseline_mean_error > 0:
            return self.mean_abs_error / self.baseline_mean_error
        return 0.0 if self.mean_abs_error == 0 else math.inf

    def as_dict(self) -> dict:
        return {
            "dtype": self.dtype,
            "max_abs_error": _num(self.max_abs_error),
            "mean_abs_error": _num(self.mean_abs_error),
            "baseline_error": _num(self.baseline_error),
            "baseline_mean_error": _num(self.baseline_mean_error),
            "mean_ratio": _num(self.mean_ratio),
            "mean_tolerance": _num(self.mean_tolerance),
            "mean_rule": self.mean_rule,
            "baseline_dtype": self.baseline_dtype,
            "ratio": _num(self.ratio),
            "atol": self.atol,
            "tolerance": _num(self.tolerance),
            "worst": dict(self.worst),
            "nonfinite": self.nonfinite,
            "pass": self.passed,
        }

    def failure(self) -> str:
        """What is wrong, in words, for the summary line."""
        if self.max_abs_error <= self.tolerance:  # only the mean rule failed
            return (
                f"{self.name}'s mean error {self.mean_abs_error:.3g} is {self.mean_ratio:.3g} x "
                f"the baseline's (mean tolerance {self.mean_tolerance:.3g}): it errs a little "
                "everywhere, as a too narrow accumulator does"
            )
        return (
            f"{self.name} off by {self.max_abs_error:.3g} at {self.where()} "
            f"(tolerance {self.tolerance:.3g})"
        )

    def where(self) -> str:
        """The worst position in words: 'batch 1, head 3, row 17, column 5'."""
        w = self.worst
        rows = "key row" if self.name in _KEY_ROWS else "row"
        parts = [f"batch {w['batch']}", f"head {w['head']}", f"{rows} {w['row']}"]
        if "column" in w:
            parts.append(f"column {w['column']}")
        return ", ".join(parts)


def _position(worst: dict) -> str:
    keys = ("batch", "head", "row", "column")
    return "(" + ", ".join(str(worst[k]) for k in keys if k in worst) + ")"


def _num(x: float) -> float | str:
    """A number for JSON, which has no inf or NaN: those as the strings "inf", "-inf", "nan"
    (null would hide which; a kernel's NaN is counted in ``nonfinite`` too)."""
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _abs_error(kernel: np.ndarray, exact: np.ndarray) -> np.ndarray:
    err = np.subtract(kernel, exact)  # inf - inf is NaN: handled below
    np.abs(err, out=err)
    gone = np.isneginf(exact)  # lse of a row with no key
    if gone.any():
        err[gone] = np.where(np.isinf(kernel[gone]), 0.0, np.inf)
    nan = np.isnan(err)
    if nan.any():
        err[nan] = np.inf
    return err


def judge(
    name: str, case: Case, exact, plain, factor: float, atol, baseline_dtype=None
) -> TensorVerdict:
    """The verdict on tensor ``name`` of ``case`` (float64 ``exact`` and ``plain`` answers)."""
    stored = case.arrays[name]
    with np.errstate(invalid="ignore"):
        kernel = stored.astype(np.float64)
        err = _abs_error(kernel, exact)
        base = _abs_error(plain, exact)
    # Where the plain answer overflowed (float16's 65,504), it sets no bound: an infinite
    # baseline error would let any kernel, NaN included, pass.
    # (no copies where every entry is finite, the common case: the same numbers)
    kept = np.isfinite(base)
    finite_base = base if kept.all() else base[kept]
    finite = np.isfinite(exact)
    everywhere = bool(finite.all())
    if everywhere:
        scale = float(max(exact.max(), -exact.min()))
    else:
        scale = float(np.abs(exact[finite]).max()) if finite.any() else 0.0
    if atol is None:
        atol = default_atol(stored.dtype, scale)
    flat = int(np.argmax(err))
    index = np.unravel_index(flat, err.shape)  # (head, row[, column])
    batch, row = case.locate(int(index[1]), keys=name in _KEY_ROWS)
    worst = {"batch": batch, "head": int(index[0]), "row": row}
    if err.ndim == 3:
        worst["column"] = int(index[2])
    if case.layout == "varlen":
        worst["token"] = int(index[1])  # the row in the packed (T, h, d) array
    worst["kernel"] = _num(float(kernel[index]))
    worst["exact"] = _num(float(exact[index]))
    heat = err.max(axis=-1) if err.ndim == 3 else err  # (heads, rows)
    return TensorVerdict(
        name=name,
        dtype=stored.dtype.name,
        max_abs_error=float(err.flat[flat]),
        mean_abs_error=float(err.mean()),
        baseline_error=float(finite_base.max()) if finite_base.size else 0.0,
        baseline_mean_error=float(finite_base.mean()) if finite_base.size else 0.0,
        atol=float(atol),
        factor=float(factor),
        worst=worst,
        baseline_dtype=np.dtype(baseline_dtype or case.dtype).name,
        nonfinite=int(
            kernel.size - np.isfinite(kernel).sum()
            if everywhere
            else (~np.isfinite(kernel) & finite).sum()
        ),
        heat=heat,
        rows_cu=case.cu_k if name in _KEY_ROWS else case.cu_q,  # its rows' sequences
        mean_floor=float(atol) * min(1.0, 4.0 / math.sqrt(err.size)),
    )


@dataclass(frozen=True)
class VerifyReport:
    """Every tensor's verdict, and the case they came from. ``passed``: all tensors pass."""

    tensors: dict[str, TensorVerdict]
    dtype: str  # the kernel's dtype: q's, k's and v's
    layout: str
    factor: float
    options: dict
    shape: dict
    cu_q: np.ndarray = field(repr=False, compare=False)
    cu_k: np.ndarray = field(repr=False, compare=False)
    hints: tuple = ()  # sentences on a failure's likely cause (a layout mix-up)
    repeat: dict | None = None  # a second run's bitwise comparison (``_repeat.py``)
    diagnosis: tuple = ()  # on a failure: likely causes, most likely first (``_diagnosis.py``)
    blocks: dict | None = field(default=None, repr=False, compare=False)  # (``_blocks.py``)

    @property
    def passed(self) -> bool:
        same = self.repeat is None or self.repeat["equal"]
        return same and all(t.passed for t in self.tensors.values())

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def __bool__(self) -> bool:
        return self.passed

    def as_dict(self) -> dict:
        out = self._fields()
        if self.blocks is not None:  # a failed case's diagnosis and where it errs
            out["diagnosis"] = [dict(d) for d in self.diagnosis]
            out["blocks"] = blocks_json(self.blocks)
        return out

    def _fields(self) -> dict:
        return {
            "verdict": self.verdict,
            "dtype": self.dtype,
            "layout": self.layout,
            "factor": self.factor,
            "shape": dict(self.shape),
            "options": dict(self.options),
            "tensors": {name: t.as_dict() for name, t in self.tensors.items()},
            "hints": list(self.hints),
            "repeat": self.repeat,
        }

    def rows(self) -> list[list[str]]:
        """The table: one row per tensor, the columns of ``COLUMNS``."""
        return [
            [
                name,
                t.dtype,
                f"{t.max_abs_error:.3g}",
                f"{t.mean_abs_error:.3g}",
                f"{t.baseline_mean_error:.3g}",
                f"{t.baseline_error:.3g}",
                t.baseline_dtype,
                f"{t.ratio:.3g}",
                "statistical" if math.isnan(t.tolerance) else f"{t.tolerance:.3g}",
                _position(t.worst),
                "pass" if t.passed else "FAIL",
            ]
            for name, t in self.tensors.items()
        ]

    COLUMNS = (
        "tensor",
        "dtype",
        "max error",
        "mean error",
        "baseline mean",
        "baseline",
        "baseline dtype",
        "ratio",
        "tolerance",
        "worst (b, h, row, col)",
        "verdict",
    )

    def summary(self) -> str:
        """One line: the verdict, and the failing tensors with where each is worst."""
        bad = [t for t in self.tensors.values() if not t.passed]
        again = ""
        if self.repeat is not None and self.repeat["equal"]:
            again = "; the repeat is bitwise equal"
        elif self.repeat is not None:
            again = "; repeat not bitwise equal: " + ", ".join(
                f"{name} in {d['entries']} entries, first at {tuple(d['first'])}"
                for name, d in self.repeat["differs"].items()
            )
        if not bad and self.passed:
            return (
                f"pass: every tensor within {self.factor:g} x its baseline's error + atol, its "
                f"mean within {self.factor:g} x the baseline's{again}"
            )
        said = "; ".join(t.failure() for t in bad) or "every tensor within its tolerance"
        hints = "".join(f"; hint: {h}" for h in self.hints)
        return f"fail: {said}{again}{hints}"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows()
        )
        color = "#1a7f37" if self.passed else "#cf222e"
        return (
            f'<div class="attnlab-verify"><p><strong style="color:{color}">'
            f"{html.escape(self.summary())}</strong></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>kernel dtype {html.escape(self.dtype)}, layout {html.escape(self.layout)}, "
            f"rule: error &le; {self.factor:g} &times; baseline error + atol, mean error &le; "
            f"{self.factor:g} &times; the baseline's + a floor</p>{self._diagnosis_html()}</div>"
        )

    def _diagnosis_html(self) -> str:
        """A failed case's likely causes as an ordered list (nothing for a pass)."""
        if not self.diagnosis:
            return ""
        items = "".join(
            f"<li><strong>{html.escape(d['cause'])}</strong> "
            f"({'explains it' if d['explained'] else 'explains part'}): "
            f"{html.escape(d['evidence'])}</li>"
            for d in self.diagnosis
        )
        return f"<p>diagnosis, most likely first:</p><ol>{items}</ol>"
