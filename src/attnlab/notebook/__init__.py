"""The explorer's four figures as live notebook widgets (anywidget: no JavaScript build step).

    stepper(q=None, k=None, v=None, mask=None)   figure attention-stepper
    histogram(d_k=64)                            figure sqrt-dk-histogram
    permutation(sentence=None)                   figure permutation-demo
    multihead()                                  figure multi-head

Each widget's state is a traitlet a cell can read and set (``w.step = 4``, ``w.d_k = 256``);
the numbers are computed in the kernel by the same figure builders the web explorer uses, and
the widget falls back to static HTML where no widget manager runs. Needs ``attnlab[notebook]``.
"""

from __future__ import annotations

try:
    import anywidget  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
    raise ImportError("attnlab.notebook needs anywidget: pip install 'attnlab[notebook]'") from exc

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.figures import multihead as _mh
from attnlab.figures import permutation as _perm
from attnlab.figures import stepper as _step
from attnlab.notebook._widgets import (
    HistogramWidget,
    MultiHeadWidget,
    PermutationWidget,
    StepperWidget,
)

__all__ = [
    "HistogramWidget",
    "MultiHeadWidget",
    "PermutationWidget",
    "StepperWidget",
    "histogram",
    "multihead",
    "permutation",
    "stepper",
]

MAX_WORDS = 12


def _rows(name: str, x) -> list[list[float]]:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise AttnlabError(f"expected {name} to be a matrix of numbers, but got {x!r}") from None
    if arr.ndim != 2:
        raise AttnlabError(f"expected {name} to be a matrix (rows, width), but got {arr.shape}")
    return arr.tolist()


def stepper(q=None, k=None, v=None, mask=None, grad_output=None) -> StepperWidget:
    """The attention stepper; defaults: the chapter's two-token example with its causal mask.

    Steps 0-5 are the forward pass, 6-10 the backward one (dV, dA, dS, dQ, dK).

    Args:
        q, k, v: small matrices (at most 8 x 8 each); None for the worked example's.
        mask: None or "causal" (the worked example's), "none", or a bool table (N, M) whose
            False entries block a pair.
        grad_output: the backward steps' upstream gradient dO, (N, d_v); None: all ones.
    """
    q = _rows("q", _step.EXAMPLE_Q if q is None else q)
    k = _rows("k", _step.EXAMPLE_K if k is None else k)
    v = _rows("v", _step.EXAMPLE_V if v is None else v)
    causal, blocked = True, []
    if isinstance(mask, str) and mask in ("causal", "none"):
        causal = mask == "causal"
    elif mask is not None:
        table = np.asarray(mask)
        if table.dtype != bool or table.shape != (len(q), len(k)):
            raise AttnlabError(
                f"expected mask to be 'causal', 'none' or a bool table of shape "
                f"{(len(q), len(k))}, but got {mask!r} instead"
            )
        causal, blocked = False, np.argwhere(~table).tolist()
    g = None if grad_output is None else _rows("grad_output", grad_output)
    return StepperWidget(q=q, k=k, v=v, causal=causal, blocked=blocked, grad_output=g)


def histogram(d_k: int = 64, *, scaled: bool = False, seed: int = 0) -> HistogramWidget:
    """Scores at head width d_k (16 to 256), with and without the 1/√d_k scaling."""
    return HistogramWidget(d_k=d_k, scaled=scaled, seed=seed)


def permutation(sentence: str | None = None, *, positions: bool = False) -> PermutationWidget:
    """Self-attention on a sentence (default: "The dog bit the man"); set ``order`` to reorder."""
    words = list(_perm.SENTENCE) if sentence is None else str(sentence).split()
    if not 2 <= len(words) <= MAX_WORDS:
        raise AttnlabError(
            f"expected a sentence of 2 to {MAX_WORDS} words, but got {len(words)} words"
        )
    return PermutationWidget(words=words, positions=positions)


def multihead(query: int = 3) -> MultiHeadWidget:
    """Four hand-set heads reading "The animal didn't cross the street because it was tired"."""
    if not 0 <= query < len(_mh.SENTENCE):
        raise AttnlabError(
            f"expected query from 0 to {len(_mh.SENTENCE) - 1}, but got {query} instead"
        )
    return MultiHeadWidget(query=query)
