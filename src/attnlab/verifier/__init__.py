"""Judge an attention kernel's output, forward and backward, against the exact answer.

``attnlab.verify(q=..., k=..., v=..., out=..., **options)`` and ``attnlab verify CASE`` compute
the case in float64 with attnlab's own attention, a plain answer in the kernel's dtype, and
pass each tensor whose error is at most ``factor`` times the plain answer's plus ``atol``: the
rule of FlashAttention's tests. See docs/verify.md.

Modules, one concept each: ``_options`` (FlashAttention's options as attnlab masks),
``_case`` (arrays, layouts, shapes), ``_dropout`` (dropout and its keep mask), ``_load``
(.npz / .safetensors, checked from their headers), ``_truth`` (float64), ``_baseline`` (the
baseline dtype), ``_rounding`` (float16 / bfloat16 on the bits; ``_rounding_numba`` the same compiled), ``_judging`` (baselines and
verdicts), ``_kvcache`` (``flash_attn_with_kvcache`` cases), ``_dropout_stats`` (dropout
without a mask), ``_hint`` (layout hints), ``_repeat`` (bitwise repeats), ``_cluster`` (Dask
tasks), ``_report`` (the verdict: the max and the mean rules), ``_hypotheses`` (attention with
one bug planted, on probe rows), ``_causes`` (each hypothesis), ``_diagnosis`` (why a case
fails), ``_blocks`` (its error per head x block), ``_plot`` (where it errs), ``_api`` (the
entry points).
"""

from __future__ import annotations

from attnlab.verifier._api import DEFAULT_MEMORY_BUDGET, verify, verify_case, verify_file
from attnlab.verifier._case import Case, make_case
from attnlab.verifier._load import read_case_file
from attnlab.verifier._options import CaseError
from attnlab.verifier._plot import figure, write_plot
from attnlab.verifier._report import TensorVerdict, VerifyReport

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "Case",
    "CaseError",
    "TensorVerdict",
    "VerifyReport",
    "figure",
    "make_case",
    "read_case_file",
    "verify",
    "verify_case",
    "verify_file",
    "write_plot",
]
