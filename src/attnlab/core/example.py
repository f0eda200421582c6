"""The chapter's two-token worked example (§6.2), defined once for the CLI, figures and tests.

Shape legend: N = M = 2 tokens, d_model = 4 token width, d_k = d_v = 2.

Two token vectors X go through three projections, Q = X W^Q, K = X W^K, V = X W^V, and give the
queries, keys and values the chapter works by hand. The chapter prints W^V; its token vectors and
its W^Q, W^K belong to an earlier section that the chapter does not repeat, so the X, W^Q and W^K
here are one choice of small whole numbers that reproduces its q and k exactly (tests check all
three products against the chapter's table).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "EXAMPLE_K",
    "EXAMPLE_Q",
    "EXAMPLE_V",
    "EXAMPLE_W_K",
    "EXAMPLE_W_Q",
    "EXAMPLE_W_V",
    "EXAMPLE_X",
    "example_projections",
]

EXAMPLE_Q = ((3.0, -3.0), (1.0, 1.0))  # (N=2, d_k=2)
EXAMPLE_K = ((-3.0, 3.0), (1.0, 1.0))  # (M=2, d_k=2)
EXAMPLE_V = ((0.0, -1.0), (1.0, 2.0))  # (M=2, d_v=2)

EXAMPLE_X = ((1.0, 0.0, 1.0, -1.0), (0.0, 1.0, 0.0, 1.0))  # (N=2, d_model=4) the tokens
EXAMPLE_W_Q = ((1.0, -1.0), (1.0, 1.0), (2.0, -2.0), (0.0, 0.0))  # (d_model, d_k)
EXAMPLE_W_K = ((-1.0, 1.0), (1.0, 1.0), (-2.0, 2.0), (0.0, 0.0))  # (d_model, d_k)
EXAMPLE_W_V = ((1.0, 0.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0))  # (d_model, d_v) the chapter's


def example_projections() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K and V computed from the token vectors: X W^Q, X W^K, X W^V.

    >>> q, k, v = example_projections()
    >>> q.tolist(), v.tolist()
    ([[3.0, -3.0], [1.0, 1.0]], [[0.0, -1.0], [1.0, 2.0]])
    """
    x = np.asarray(EXAMPLE_X)  # (N, d_model)
    return tuple(x @ np.asarray(w) for w in (EXAMPLE_W_Q, EXAMPLE_W_K, EXAMPLE_W_V))  # each (N, 2)
