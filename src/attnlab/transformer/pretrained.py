"""Models shipped with attnlab, trained by its own labs at their default settings.

    induction   ``attnlab lab train-induction`` at its defaults (seed 0): a 2-layer,
                attention-only causal model whose layer-0 heads attend to the previous token
                and whose layer-1 heads copy what followed the current token's last occurrence

The weights are package data (``induction.npz`` beside this module, a few hundred KiB), so
``pretrained`` needs no network. ``attnlab lab train-induction --save FILE`` writes the same
file again from scratch.
"""

from __future__ import annotations

from importlib import resources

from attnlab.errors import AttnlabError
from attnlab.transformer.model import TinyTransformer

__all__ = ["PRETRAINED", "pretrained"]

PRETRAINED = ("induction",)


def pretrained(name: str = "induction") -> TinyTransformer:
    """The shipped model ``name`` (one of ``PRETRAINED``), loaded afresh on every call."""
    if name not in PRETRAINED:
        raise AttnlabError(f"expected a name in {PRETRAINED}, but got {name!r} instead")
    with resources.as_file(resources.files(__package__) / f"{name}.npz") as path:
        return TinyTransformer.load(path)
