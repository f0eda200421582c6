"""Calling a user's score_mod or mask_mod on a block of pairs, and refusing what comes back wrong.

Shape legend (torch's FlexAttention letters):
    B   batch           H   query heads         L'  a tile's query rows   S'  its keys
    b (B, 1, 1, 1), h (1, H, 1, 1), q_idx (1, 1, L', 1), kv_idx (1, 1, 1, S')

A mod is the caller's code: it may raise, return NaN, return the wrong shape or the wrong kind.
Each becomes one ``AttnlabError`` naming the argument (score_mod / mask_mod), never a traceback
from inside attnlab and never a silent NaN in the output.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError

__all__ = ["call_mask_mod", "call_score_mod", "indices"]


def indices(batch: int, heads: int, rows: np.ndarray, cols: np.ndarray) -> tuple:
    """The four broadcastable integer index arrays a mod receives."""
    b = np.arange(batch).reshape(-1, 1, 1, 1)  # (B, 1, 1, 1)
    h = np.arange(heads).reshape(1, -1, 1, 1)  # (1, H, 1, 1)
    return b, h, rows.reshape(1, 1, -1, 1), cols.reshape(1, 1, 1, -1)  # (1,1,L',1), (1,1,1,S')


def _run(name: str, fn, args) -> np.ndarray:
    try:
        with np.errstate(all="ignore"):  # NaN and inf are judged below, with the argument named
            out = fn(*args)
        return np.asarray(out)
    except Exception as exc:  # the caller's code: whatever it raises is reported as one error
        raise AttnlabError(
            f"expected {name} to run on numpy index arrays (b, h, q_idx, kv_idx), but got "
            f"{type(exc).__name__}: {exc} from it instead"
        ) from None


def _shaped(name: str, out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    try:
        return np.broadcast_to(out, shape)
    except ValueError:
        raise ShapeError(
            f"expected {name} to return an array broadcastable to the tile's shape {shape}, "
            f"but got shape {out.shape} instead"
        ) from None


def call_mask_mod(mask_mod, args: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """mask_mod(b, h, q_idx, kv_idx) as a bool array broadcast to ``shape`` (a read-only view)."""
    out = _run("mask_mod", mask_mod, args)
    if out.dtype != np.bool_:
        raise AttnlabError(
            f"expected mask_mod to return booleans (True = may attend), but got dtype "
            f"{out.dtype} instead"
        )
    return _shaped("mask_mod", out, shape)


def call_score_mod(score_mod, score: np.ndarray, args: tuple, allowed) -> np.ndarray:
    """score_mod(score, b, h, q_idx, kv_idx) in score's dtype and shape; -inf where ``allowed``
    (bool, broadcastable to score) is False. NaN or +inf on an allowed pair is refused."""
    out = _run("score_mod", score_mod, (score,) + args)
    if out.dtype.kind not in "iuf":
        raise AttnlabError(
            f"expected score_mod to return real numbers, but got dtype {out.dtype} instead"
        )
    out = np.array(_shaped("score_mod", out, score.shape), dtype=score.dtype)  # (B, H, L', S')
    out[~np.broadcast_to(allowed, out.shape)] = -np.inf  # masked pairs: whatever the mod said
    bad = np.isnan(out) | np.isposinf(out)
    if bad.any():
        at = np.argwhere(bad)[0]
        where = (
            int(at[0]),
            int(at[1]),
            int(args[2].reshape(-1)[at[2]]),
            int(args[3].reshape(-1)[at[3]]),
        )
        raise NonFiniteInputError(
            f"expected score_mod to return finite scores or -inf (masked out), but got "
            f"{out[tuple(at)]} at (b, h, q_idx, kv_idx) = {where} ({int(bad.sum())} such entries) "
            "instead"
        )
    return out
