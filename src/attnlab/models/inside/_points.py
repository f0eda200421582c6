"""Named points of a forward pass: where activations are cached and where hooks change them.

Shape legend: B batch, N tokens, d_model hidden width, h query heads, h_kv key/value heads,
d head width.

Every activation of a forward pass goes through ``points(name, value)``. The names are
TransformerLens's, so its users feel at home (``names`` lists them for a model). A ``Points``
with neither a cache nor hooks is inactive and hands each value straight back, so a plain run
keeps no activation and costs what it did before.

A hook is ``fn(value, name)`` returning the replacement (or None to keep the value). Whatever
it returns must have the value's shape and be finite; anything else, or an exception inside
``fn``, is one ``AttnlabError`` naming the hook.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["LAYER_POINTS", "Pass", "Points", "names"]

#: Each layer's points, in the order the forward pass reaches them (prefix ``blocks.{l}.``).
LAYER_POINTS = (
    "hook_resid_pre",
    "ln1.hook_normalized",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "ln2.hook_normalized",
    "hook_mlp_out",
    "hook_resid_post",
)


def names(layers: int, learned_positions: bool) -> list[str]:
    """Every point of a model with ``layers`` layers, in forward order."""
    out = ["hook_embed"] + (["hook_pos_embed"] if learned_positions else [])
    out += [f"blocks.{i}.{p}" for i in range(layers) for p in LAYER_POINTS]
    return out + ["ln_final.hook_normalized"]


class Points:
    """The cache and hooks of one forward pass.

    Args:
        valid: every name this model has (``names``), to check hook names against.
        cache: keep every value (after its hook) in ``self.cache``.
        hooks: {name: fn(value, name) -> new value | None}.
    """

    def __init__(self, valid=(), *, cache: bool = False, hooks: Mapping | None = None):
        self.cache: dict[str, np.ndarray] | None = {} if cache else None
        self.hooks: dict[str, Callable] = dict(check_hooks(hooks, valid)) if hooks else {}
        self.active = cache or bool(self.hooks)

    def wants(self, name: str) -> bool:
        """Whether ``name``'s value is cached or hooked (so it must be computed)."""
        return self.cache is not None or name in self.hooks

    def hooked(self, name: str) -> bool:
        return name in self.hooks

    def __call__(self, name: str, value: np.ndarray) -> np.ndarray:
        """``value`` after ``name``'s hook (if any), kept in the cache (if one is kept)."""
        if not self.active:
            return value
        fn = self.hooks.get(name)
        if fn is not None:
            value = _apply(fn, name, value)
        if self.cache is not None:
            self.cache[name] = value
        return value


def check_hooks(hooks, valid) -> dict:
    """``hooks`` as a dict after checking each name is a point and each value is callable."""
    if not isinstance(hooks, Mapping):
        raise AttnlabError(
            f"expected hooks to be a dict {{name: fn}}, but got {type(hooks).__name__} instead"
        )
    known = set(valid)
    for name, fn in hooks.items():
        if name not in known:
            close = difflib.get_close_matches(str(name), list(valid), n=3, cutoff=0.5)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise AttnlabError(
                f"expected hook names among the model's points (such as "
                f"'blocks.0.attn.hook_z'), but got {name!r} instead{hint}"
            )
        if not callable(fn):
            raise AttnlabError(
                f"expected the hook for {name!r} to be callable fn(value, name), but got "
                f"{type(fn).__name__} instead"
            )
    return dict(hooks)


def _apply(fn, name: str, value: np.ndarray) -> np.ndarray:
    try:
        new = fn(value, name)
    except Exception as exc:  # a user's function: any error becomes one that names the hook
        raise AttnlabError(
            f"expected the hook for {name!r} to return a value, but it raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if new is None:
        return value
    try:
        new = np.asarray(new, dtype=value.dtype)
    except (TypeError, ValueError):
        raise AttnlabError(
            f"expected the hook for {name!r} to return an array of shape {value.shape}, but "
            f"got {type(new).__name__} instead"
        ) from None
    if new.shape != value.shape:
        raise AttnlabError(
            f"expected the hook for {name!r} to return an array of shape {value.shape}, but "
            f"got shape {new.shape} instead"
        )
    # -inf blocks a key in the scores (as the mask does); anything else non-finite is refused
    blocked = name.endswith("hook_attn_scores") & np.isneginf(new)
    if np.isnan(new).any() or (np.isinf(new) & ~blocked).any():
        raise AttnlabError(
            f"expected the hook for {name!r} to return finite values, but got NaN or inf instead"
        )
    return new


@dataclass
class Pass:
    """How one forward pass runs (what a network's ``forward`` reads beside the ids).

    Attributes:
        weights: keep each layer's attention weights as computed.
        points: the cache and hooks (inactive by default).
        keys: which tokens are real, (B, N) bool (``attention_mask``), or None: all of them.
        start: the first layer to run; with start > 0, ``resid`` is its residual stream
            (B, N, d_model) before ``blocks.{start}.hook_resid_pre``, and the layers below
            are not run again (what ``patch`` does for each patched run).
        kv: a key/value cache to decode from (``generate``), or None.
        options: a family's own run options (BERT's token_type_ids, DeepSeek's mla).
    """

    weights: bool = True
    points: Points = field(default_factory=Points)
    keys: np.ndarray | None = None
    start: int = 0
    resid: np.ndarray | None = None
    kv: object | None = None
    options: dict = field(default_factory=dict)

    @property
    def offset(self) -> int:
        """The position of the first token: the rows already in the key/value cache."""
        return 0 if self.kv is None else self.kv.length
