"""Knock heads out: ``ablate(model, ids, heads=[(layer, head), ...], how=...)``.

Shape legend: B batch, N tokens, h query heads, d head width.

A head is ablated at ``blocks.{l}.attn.hook_z`` (B, N, h, d), its output before the output
projection, so what it would have added to the residual stream is replaced:

    zero      its z is 0 (the head adds only the output projection's bias, shared by all heads)
    mean      its z is its mean over this run's batch and positions
    resample  its z is taken from the next sequence of the batch (b + 1, the last from the
              first): the head sees another input, as TransformerLens's resampling does

The run below the first ablated layer is the clean one, so it is computed once and the
ablated run starts from its residual stream there.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models.inside._points import Pass, Points, names

__all__ = ["ABLATIONS", "ablate", "check_heads"]

#: The ways ``ablate`` replaces a head's output.
ABLATIONS = ("zero", "mean", "resample")


def check_heads(heads, layers: int, per_layer: int) -> list[tuple[int, int]]:
    """``heads`` as a list of (layer, head) pairs of whole numbers in range."""
    try:
        pairs = [tuple(pair) for pair in heads]
    except TypeError:
        pairs = None
    good = pairs is not None and len(pairs) > 0
    for pair in pairs or []:
        whole = all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in pair)
        if len(pair) != 2 or not whole or not (0 <= pair[0] < layers and 0 <= pair[1] < per_layer):
            good = False
    if not good:
        raise AttnlabError(
            f"expected heads to be a non-empty list of (layer, head) pairs with 0 <= layer < "
            f"{layers} and 0 <= head < {per_layer}, but got {heads!r} instead"
        )
    return [(int(layer), int(head)) for layer, head in pairs]


def ablate(model, ids, heads, how: str = "zero", *, attention_mask=None):
    """The ``ModelRun`` of ``ids`` with ``heads`` [(layer, head), ...] knocked out ``how``
    ("zero", "mean" or "resample"; see the module's notes). Its ``cache`` holds the clean
    run's activations below the first ablated layer and the ablated ones from there."""
    if how not in ABLATIONS:
        raise AttnlabError(f"expected how to be one of {ABLATIONS}, but got {how!r} instead")
    pairs = check_heads(heads, model.shape.layers, model.shape.heads)
    clean = model.run(ids, cache=True, attention_mask=attention_mask, weights=False)
    if how == "resample" and len(clean.ids) < 2:
        raise AttnlabError(
            "expected ids of at least 2 sequences (B >= 2) for how='resample', which takes a "
            f"head's output from another sequence, but got B = {len(clean.ids)} instead"
        )
    by_layer: dict[int, list[int]] = {}
    for layer, head in pairs:
        by_layer.setdefault(layer, []).append(head)

    def hook_for(layer: int):
        chosen = by_layer[layer]
        source = clean.cache[f"blocks.{layer}.attn.hook_z"]  # (B, N, h, d)

        def hook(z, name):
            z = z.copy()
            if how == "zero":
                z[:, :, chosen] = 0
            elif how == "mean":
                z[:, :, chosen] = source[:, :, chosen].mean((0, 1))  # (heads, d), broadcast
            else:
                z[:, :, chosen] = np.roll(source[:, :, chosen], -1, axis=0)  # b takes b + 1
            return z

        return hook

    start = min(by_layer)
    hooks = {f"blocks.{layer}.attn.hook_z": hook_for(layer) for layer in by_layer}
    points = Points(names(model.shape.layers, model.network.learned_positions), hooks=hooks)
    points.cache = {k: v for k, v in clean.cache.items() if _below(k, start)}
    points.active = True
    resid = clean.cache[f"blocks.{start}.hook_resid_pre"]
    how_ = Pass(True, points, clean.keys, start=start, resid=resid)
    logits, layers = model.network.forward(clean.ids, how_)
    run = type(clean)(
        ids=clean.ids, logits=logits, layers=clean.layers[:start] + layers, cache=points.cache,
        model=model, keys=clean.keys, hooks=hooks,
    )  # fmt: skip
    return run


def _below(name: str, layer: int) -> bool:
    """Whether point ``name`` comes before layer ``layer``'s first point."""
    if not name.startswith("blocks."):
        return name != "ln_final.hook_normalized"
    return int(name.split(".")[1]) < layer
