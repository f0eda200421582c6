"""Inside a real model: the named points of its forward pass (cache and hooks), ablation,
activation patching, the logit lens and attribution, and generation with a key/value cache
(docs/inside.md)."""

from attnlab.models.inside.ablate import ABLATIONS, ablate
from attnlab.models.inside.patch import ACTIVATIONS, OVER, patch

__all__ = ["ABLATIONS", "ACTIVATIONS", "OVER", "ablate", "patch"]
