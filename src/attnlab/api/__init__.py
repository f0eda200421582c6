"""The public dispatchers: ``attention``, ``attention_backward`` and multi-head attention.

Each checks its inputs once (``attnlab.core``'s validation), picks a kernel from
``attnlab.kernels`` and refuses results that overflowed. Nothing here computes attention itself.
"""
