"""Model folders shipped inside the package, so the real-model tools work with no download.

tiny-lm   a 2-layer GPT-2 trained by attnlab on its own corpus (``attnlab.transformer
          .tiny_lm``, which rebuilds it): names, objects and repeated phrases, with a
          word-level tokenizer
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from attnlab.errors import AttnlabError

__all__ = ["SHIPPED", "shipped"]

SHIPPED = ("tiny-lm",)


def shipped(name: str = "tiny-lm") -> Path:
    """The folder of shipped model ``name``: pass it to ``load``, ``attnlab model`` or
    ``attnlab serve --model``."""
    if name not in SHIPPED:
        raise AttnlabError(f"expected a shipped model in {SHIPPED}, but got {name!r} instead")
    return Path(str(resources.files(__package__) / "shipped" / name))
