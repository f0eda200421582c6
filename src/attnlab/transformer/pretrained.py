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

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.transformer.model import TinyTransformer

__all__ = ["PRETRAINED", "checkpoints", "pretrained"]

PRETRAINED = ("induction",)


def _path(name: str):
    if name not in PRETRAINED:
        raise AttnlabError(f"expected a name in {PRETRAINED}, but got {name!r} instead")
    return resources.as_file(resources.files(__package__) / f"{name}.npz")


def pretrained(name: str = "induction") -> TinyTransformer:
    """The shipped model ``name`` (one of ``PRETRAINED``), loaded afresh on every call."""
    with _path(name) as path:
        return TinyTransformer.load(path)


def checkpoints(name: str = "induction") -> list[tuple[int | None, TinyTransformer]]:
    """(step, model) for each snapshot kept while ``name`` trained, then (its steps, the
    trained model); the last step is None for a file that does not record it.

    A snapshot holds the weights attention depends on, in float16; its unembedding is the
    trained model's (snapshots show where heads look, not what the model predicted then).
    """
    final = pretrained(name)
    with _path(name) as path, np.load(path, allow_pickle=False) as data:
        steps = sorted({int(k.split("/")[1]) for k in data.files if k.startswith("snapshot/")})
        out = []
        for step in steps:
            arrays = dict(final.params)
            arrays |= {k.split("/", 2)[2]: data[k] for k in data.files
                       if k.startswith(f"snapshot/{step}/")}  # fmt: skip
            out.append((step, TinyTransformer.from_arrays(final.config, arrays)))
        total = int(data["trained_steps"]) if "trained_steps" in data.files else None
    return out + [(total, final)]
