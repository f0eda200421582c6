"""Every numeric tolerance the tests use, named in one place.

float64 results must match an independent oracle to 1e-10; float32 to 2e-5 (about 170 ulps at
1.0, room for a different summation order across an N x M table).
"""

F64 = {"rtol": 0.0, "atol": 1e-10}
F32 = {"rtol": 0.0, "atol": 2e-5}
# Blockwise against dense: same maths, different summation order.
BLOCKWISE_F64 = {"rtol": 0.0, "atol": 1e-12}
BLOCKWISE_F32 = {"rtol": 0.0, "atol": 2e-5}
# The chapter prints its numbers to 3-4 significant figures.
CHAPTER = {"rtol": 0.0, "atol": 5e-4}


def for_dtype(dtype) -> dict:
    """The oracle tolerance for a numpy or torch dtype."""
    return F32 if "32" in str(dtype) else F64


# Central finite differences, as torch.autograd.gradcheck checks float64 gradients: a step of
# 1e-6 and |analytic - numeric| <= atol + rtol * |numeric|.
GRADCHECK = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3}
# Second order: two finite-difference estimates of uᵀ H w (from the loss, and from the gradient)
# each carry O(eps²) truncation and O(ulp / eps²) rounding; a step of 1e-4 balances the two.
HESSIAN = {"eps": 1e-4, "atol": 1e-5, "rtol": 1e-4}
# The same maths summed in another order (other tiles, other chunks, threads that add the key
# gradients in another order): float64 rounding only.
REORDERED_F64 = {"rtol": 0.0, "atol": 1e-12}
