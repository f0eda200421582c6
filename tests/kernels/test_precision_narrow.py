"""``kernels/_precision.matmul`` on a narrow product with a transposed right factor (q kᵀ or
dO vᵀ with a few keys): no worse than the same product with a contiguous factor.

Shape legend: R rows, K the summed width, C the result's columns (keys).

Oracle: the float64 product of the same float32 numbers. OpenBLAS's kernel for a transposed
factor of 2-8 columns sums each entry in one long chain; on FlashAttention's grid (799 queries,
3 keys) it made dq err 2.4-4.3 times torch's float32 error.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.kernels._precision import NARROW, matmul


@pytest.mark.parametrize("k", [32, 64, 128])
@pytest.mark.parametrize("cols", [2, 3, 5, NARROW])
def test_a_narrow_transposed_product_errs_as_little_as_a_contiguous_one(k, cols):
    rng = np.random.default_rng(k * 10 + cols)
    a = rng.normal(size=(8, 799, k)).astype(np.float32)  # (B, R, K)
    b = np.swapaxes(rng.normal(size=(8, cols, k)).astype(np.float32), -1, -2)  # (B, K, C) view
    exact = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(matmul(a, b) - exact).max()
    err_contiguous = np.abs(a @ np.ascontiguousarray(b) - exact).max()
    assert err <= err_contiguous
    # and well inside a sum's worst case, K ulps of the largest partial sum
    assert err <= 0.25 * k * np.finfo(np.float32).eps * np.abs(exact).max()


def test_the_result_is_the_same_product():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 17, 40)).astype(np.float32)
    b = rng.normal(size=(3, 2, 40)).astype(np.float32)
    out = np.empty((3, 17, 2), np.float32)
    got = matmul(a, np.swapaxes(b, -1, -2), out=out)
    assert got is out
    np.testing.assert_allclose(got, a @ np.swapaxes(b, -1, -2), rtol=1e-5, atol=1e-5)
