"""Judge an attention kernel's output, forward and backward, against the exact answer.

``attnlab.verify(q=..., k=..., v=..., out=..., **options)`` and ``attnlab verify CASE`` compute
the case in float64 with attnlab's own attention, a plain answer in the kernel's dtype, and
pass each tensor whose error is at most ``factor`` times the plain answer's plus ``atol``: the
rule of FlashAttention's tests. See docs/verify.md.

Modules, one concept each: ``_options`` (FlashAttention's options as attnlab masks),
``_case`` (arrays, layouts, shapes), ``_load`` (.npz / .safetensors), ``_truth`` (float64),
``_baseline`` (the kernel's dtype), ``_report`` (the verdict), ``_plot`` (where it errs),
``_api`` (the entry points).
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
