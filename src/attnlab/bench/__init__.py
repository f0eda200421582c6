"""Side-by-side benchmarks: attnlab's dense and blockwise attention beside PyTorch's SDPA.

    >>> from attnlab import bench
    >>> report = bench.attention(quick=True)      # doctest: +SKIP
    >>> print(report.format())                    # doctest: +SKIP

The CLI runs the same function: ``attnlab bench attention`` (full suite, about 3 minutes on two
cores) or ``attnlab bench attention --quick``; ``attnlab bench backward`` (``bench.backward``)
times the gradients the same way; ``attnlab bench verify`` (``bench.verify_cost``) what
``attnlab verify`` costs beside torch's float64 SDPA; ``attnlab bench model`` (``bench.model``)
a GPT-2-small-shaped forward pass beside transformers'. torch is imported only inside the processes that
time it, never by attnlab itself.
"""

from __future__ import annotations

from attnlab.bench._backward import backward
from attnlab.bench._measure import Config, Result, gemm_ceiling, measure, textbook_attention
from attnlab.bench._model import ModelReport, model
from attnlab.bench._suite import DEFAULT_NS, QUICK_NS, Report, Target, attention, machine_info
from attnlab.bench._verify import verify_cost

__all__ = [
    "DEFAULT_NS",
    "QUICK_NS",
    "Config",
    "ModelReport",
    "Report",
    "Result",
    "Target",
    "attention",
    "backward",
    "gemm_ceiling",
    "machine_info",
    "measure",
    "model",
    "textbook_attention",
    "verify_cost",
]
