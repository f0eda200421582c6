"""Position vectors: the fix for attention's blindness to word order (§6.5).

Shape legend: n positions, d_model features.
"""

from __future__ import annotations

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.errors import AttnlabError

__all__ = ["sinusoidal"]


def sinusoidal(n: int, d_model: int, *, base: float = 10000.0) -> np.ndarray:
    """The sine/cosine table of Vaswani et al. (2017), §3.5.

    PE[pos, 2i] = sin(pos / base^(2i/d_model)),  PE[pos, 2i+1] = cos(pos / base^(2i/d_model)).

    Returns:
        float64 array (n, d_model). An odd d_model keeps the last sine column.

    >>> sinusoidal(2, 4).round(4)
    array([[0.    , 1.    , 0.    , 1.    ],
           [0.8415, 0.5403, 0.01  , 1.    ]])
    """
    n, d_model = positive_int("n", n), positive_int("d_model", d_model)
    if not (isinstance(base, int | float | np.number) and base > 0 and np.isfinite(base)):
        raise AttnlabError(f"expected base to be a finite number > 0, but got {base!r} instead")
    pos = np.arange(n, dtype=np.float64)[:, None]  # (n, 1)
    freq = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(d/2),)
    angles = pos * freq  # (n, ceil(d/2))
    table = np.empty((n, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table
