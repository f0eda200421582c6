"""Public home of the mask specs: ``from attnlab.masks import Causal, Padding``.

The implementation lives in ``attnlab.core.masks``; see it for the rules each mask encodes.
Converters from and to other frameworks' conventions (each docstring states its polarity) live
in ``attnlab.core.interop`` and ``attnlab.core.interop_jax``; ``explain`` draws a mask as a
grid (``attnlab.core.explain``).
"""

from attnlab.core.chunks import Chunks
from attnlab.core.explain import Explanation, explain
from attnlab.core.interop import (
    from_hf,
    from_hf_4d,
    from_key_padding_mask,
    from_torch,
    to_torch,
)
from attnlab.core.interop_jax import from_jax, to_jax
from attnlab.core.masks import (
    ALiBi,
    Causal,
    Combined,
    Dense,
    Mask,
    Padding,
    SlidingWindow,
    TileState,
)

__all__ = [
    "ALiBi",
    "Causal",
    "Chunks",
    "Combined",
    "Dense",
    "Explanation",
    "Mask",
    "Padding",
    "SlidingWindow",
    "TileState",
    "explain",
    "from_hf",
    "from_hf_4d",
    "from_jax",
    "from_key_padding_mask",
    "from_torch",
    "to_jax",
    "to_torch",
]
