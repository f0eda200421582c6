"""What a reader checks: the executable spec (``reference.py``), masks, validation, softmax, the
stages and their words, number formatting, the trace, the cost model and mask converters.

Nothing here imports threads, numba or a kernel: speed lives in ``attnlab.kernels``.
"""
