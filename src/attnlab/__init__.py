"""attnlab: attention you can compute by hand, check, see, and run fast.

>>> import attnlab as al
>>> al.attention([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]],
...              mask=al.masks.Causal()).round(3)
array([[ 0.   , -1.   ],
       [ 0.804,  1.413]])

``import attnlab`` loads numpy and nothing heavier; the labs, exercises, figures, benchmark, CLI
and web app load on first use (``al.labs``, ``al.exercises``, ``al.notebook``, ...).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

from attnlab import cost, errors, flex, masks, positions
from attnlab.api.attention import (
    AttentionTrace,
    attention,
    scaled_dot_product_attention,
    trace_attention,
)
from attnlab.api.backward import attention_backward
from attnlab.api.multihead import MultiHeadAttention, multi_head_attention
from attnlab.core.merge import merge_attention_states
from attnlab.core.softmax import logsumexp, softmax
from attnlab.errors import AttnlabError, FullyMaskedRowError, NonFiniteInputError, ShapeError
from attnlab.flex import create_block_mask, flex_attention, flex_attention_backward
from attnlab.verifier import verify

try:
    __version__ = version("attnlab")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "AttentionTrace",
    "AttnlabError",
    "FullyMaskedRowError",
    "MultiHeadAttention",
    "NonFiniteInputError",
    "ShapeError",
    "__version__",
    "attention",
    "attention_backward",
    "cost",
    "create_block_mask",
    "errors",
    "exercises",
    "flex",
    "flex_attention",
    "flex_attention_backward",
    "labs",
    "logsumexp",
    "masks",
    "merge_attention_states",
    "multi_head_attention",
    "positions",
    "scaled_dot_product_attention",
    "softmax",
    "trace_attention",
    "verify",
]

_LAZY = {"labs", "exercises", "figures", "bench", "notebook", "distributed", "models"}


def __getattr__(name: str):
    # Submodules that are not needed for the maths load on first use, keeping the import light.
    if name in _LAZY:
        module = importlib.import_module(f"attnlab.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
