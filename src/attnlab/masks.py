"""Public home of the mask specs: ``from attnlab.masks import Causal, Padding``.

The implementation lives in ``attnlab.core.masks``; see it for the rules each mask encodes.
"""

from attnlab.core.masks import Causal, Combined, Dense, Mask, Padding, SlidingWindow, TileState

__all__ = ["Causal", "Combined", "Dense", "Mask", "Padding", "SlidingWindow", "TileState"]
