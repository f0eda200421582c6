"""Every fast path, each held to ``attnlab.core.reference`` by the property suite.

The small-problem path, the dense banded and threaded kernels, the compiled passes (numba,
optional), the blockwise forward and backward with their tiles, plan caches and thread pool.
Kernels take validated inputs and never import a dispatcher from ``attnlab.api``.
"""
