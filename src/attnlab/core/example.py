"""The chapter's two-token worked example (§6.2), defined once for the CLI, figures and tests.

Section 1.6's projections turn two tokens into these queries, keys and values (d_k = d_v = 2).
"""

from __future__ import annotations

__all__ = ["EXAMPLE_K", "EXAMPLE_Q", "EXAMPLE_V"]

EXAMPLE_Q = ((3.0, -3.0), (1.0, 1.0))  # (N=2, d_k=2)
EXAMPLE_K = ((-3.0, 3.0), (1.0, 1.0))  # (M=2, d_k=2)
EXAMPLE_V = ((0.0, -1.0), (1.0, 2.0))  # (M=2, d_v=2)
