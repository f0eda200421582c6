"""Activation patching: which activations of a clean run restore its behaviour in a corrupted
one. ``patch(model, clean, corrupt, metric, over=..., activation=...)``, as TransformerLens's
``patching.get_act_patch_*`` functions.

Shape legend: B batch, N tokens, L layers, h query heads, d head width, V vocabulary.

Each patched run is the corrupted input with one piece of one clean activation put in its
place, and ``metric(logits (B, N, V)) -> float`` of what comes out:

    over="heads"      (L, h): head h's z (``attn.hook_z``, all positions) at layer l
    over="positions"  (L, N): the activation at position p of layer l
    over="layers"     (L,):   the whole activation of layer l

``activation`` names the point: "z" (``attn.hook_z``), "resid_pre", "attn_out" or "mlp_out".
A patch at layer l changes nothing below it, so each patched run starts at layer l from the
corrupted run's cached residual stream instead of recomputing the layers below.
"""

from __future__ import annotations

import numbers

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models.inside._points import Pass, Points, names

__all__ = ["ACTIVATIONS", "OVER", "patch"]

#: What ``patch`` can patch, by its short name -> the point under ``blocks.{l}.``.
ACTIVATIONS = {
    "z": "attn.hook_z",
    "resid_pre": "hook_resid_pre",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
}
#: How ``patch`` cuts an activation into pieces.
OVER = ("heads", "positions", "layers")


def patch(model, clean, corrupt, metric, *, over: str = "heads", activation: str = "z"):
    """The metric of each patched run: (L, h) over heads, (L, N) over positions, (L,) over
    layers (see the module's notes)."""
    if over not in OVER:
        raise AttnlabError(f"expected over to be one of {OVER}, but got {over!r} instead")
    if activation not in ACTIVATIONS:
        raise AttnlabError(
            f"expected activation to be one of {tuple(ACTIVATIONS)}, but got {activation!r} instead"
        )
    if over == "heads" and activation != "z":
        raise AttnlabError(
            f"expected activation='z' with over='heads' (only z has a head axis), but got "
            f"activation={activation!r} instead"
        )
    if not callable(metric):
        raise AttnlabError(
            f"expected metric to be callable metric(logits) -> float, but got "
            f"{type(metric).__name__} instead"
        )
    clean_run = model.run(clean, cache=True, weights=False)
    bad = model.run(corrupt, cache=True, weights=False)
    if clean_run.ids.shape != bad.ids.shape:
        raise AttnlabError(
            f"expected clean and corrupt ids of one shape, but got {clean_run.ids.shape} and "
            f"{bad.ids.shape} instead"
        )
    layers, n = model.shape.layers, bad.ids.shape[1]
    count = {"heads": model.shape.heads, "positions": n, "layers": 1}[over]
    out = np.empty((layers, count))  # (L, h) or (L, N) or (L, 1)
    valid = names(layers, model.network.learned_positions)
    for layer in range(layers):
        name = f"blocks.{layer}.{ACTIVATIONS[activation]}"
        source = clean_run.cache[name]
        resid = bad.cache[f"blocks.{layer}.hook_resid_pre"]
        for piece in range(count):
            hook = _hook(source, over, piece)
            how = Pass(False, Points(valid, hooks={name: hook}), start=layer, resid=resid)
            logits, _ = model.network.forward(bad.ids, how)
            out[layer, piece] = _number(metric, logits)
    return out[:, 0] if over == "layers" else out


def _hook(source: np.ndarray, over: str, piece: int):
    """A hook putting one piece of the clean ``source`` into the corrupted value."""

    def hook(value, name):
        value = value.copy()
        if over == "heads":
            value[:, :, piece] = source[:, :, piece]  # (B, N, d) of head ``piece``
        elif over == "positions":
            value[:, piece] = source[:, piece]  # position ``piece`` of every batch element
        else:
            value[...] = source
        return value

    return hook


def _number(metric, logits) -> float:
    try:
        value = metric(logits)
    except Exception as exc:  # the user's function: one error that names it
        raise AttnlabError(
            f"expected metric(logits) to return a number, but it raised {type(exc).__name__}: {exc}"
        ) from exc
    value = np.asarray(value)
    if value.size != 1 or not isinstance(value.reshape(-1)[0].item(), numbers.Real):
        raise AttnlabError(
            f"expected metric(logits) to return one real number, but got {value!r} instead"
        )
    return float(value.reshape(-1)[0])
