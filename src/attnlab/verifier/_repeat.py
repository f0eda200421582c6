"""Determinism: two dumps of the same run must be equal bit for bit.

FlashAttention's determinism test runs a kernel twice on the same inputs and requires the
outputs (and, with ``deterministic=True``, the gradients) to be bitwise identical. Given the
entries of two case files, this compares every array they hold by its bytes: NaN against the
same NaN is equal, -0.0 against 0.0 is not.
"""

from __future__ import annotations

import numpy as np

from attnlab.verifier._options import CaseError

__all__ = ["repeat_check"]


def _differences(a: np.ndarray, b: np.ndarray) -> tuple[int, tuple]:
    """(entries whose bytes differ, the first one's index) of two arrays of one shape."""
    size = a.dtype.itemsize
    ra = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(-1, size)  # (entries, bytes)
    rb = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(-1, size)
    bad = (ra != rb).any(axis=1)  # (entries,)
    count = int(bad.sum())
    first = np.unravel_index(int(np.argmax(bad)), a.shape) if count else ()
    return count, tuple(int(i) for i in first)


def repeat_check(first: dict, second: dict) -> dict:
    """{"equal": bool, "differs": {name: {"entries": n, "first": index}}} over every array of
    two runs' entries; CaseError when they do not hold the same names, shapes and dtypes."""
    # An option left at its default (a Python value, not an array) need not be repeated.
    first = {n: x for n, x in first.items() if isinstance(x, np.ndarray) or n in second}
    first = {n: np.asarray(x) for n, x in first.items() if x is not None}
    second = {n: np.asarray(x) for n, x in second.items() if x is not None}
    for name in sorted(set(first) ^ set(second)):
        raise CaseError(f"--repeat: {name} is in one case only; the two runs must hold the same")
    differs = {}
    for name in sorted(first):
        a, b = first[name], second[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CaseError(
                f"--repeat: {name} is {a.dtype} {a.shape} in the case but {b.dtype} {b.shape} "
                "in its repeat"
            )
        count, where = _differences(a, b)
        if count:
            differs[name] = {"entries": count, "first": list(where)}
    return {"equal": not differs, "differs": differs}
