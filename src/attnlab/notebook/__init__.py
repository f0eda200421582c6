"""The explorer's four figures as live notebook widgets (anywidget: no JavaScript build step).

    stepper(q=None, k=None, v=None, mask=None)   figure attention-stepper (steps 1 to 11)
    histogram(d_k=64)                            figure sqrt-dk-histogram
    permutation(sentence=None)                   figure permutation-demo
    multihead()                                  figure multi-head

Each widget's state is a traitlet a cell can read and set (``w.step = 5``, ``w.d_k = 256``),
checked before it is stored: a bad value raises ``WidgetValueError`` (an ``AttnlabError``)
and the widget keeps its last good state and shows why;
the numbers are computed in the kernel by the same figure builders the web explorer uses, and
the widget falls back to static HTML where no widget manager runs. Needs ``attnlab[notebook]``.
``import attnlab as al`` then ``al.notebook.stepper()`` loads this module on first use.
"""

from __future__ import annotations

try:
    import anywidget  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
    raise ImportError("attnlab.notebook needs anywidget: pip install 'attnlab[notebook]'") from exc

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.figures import permutation as _perm
from attnlab.figures import stepper as _step
from attnlab.notebook._checks import WidgetValueError, number_matrix
from attnlab.notebook._widgets import (
    MAX_WORDS,
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
    "WidgetValueError",
    "histogram",
    "multihead",
    "permutation",
    "stepper",
]


def stepper(q=None, k=None, v=None, mask=None, grad_output=None, *, step=1) -> StepperWidget:
    """The attention stepper; defaults: the chapter's two-token example with its causal mask.

    Steps count from 1: 1-6 are the forward pass, 7-11 the backward one (dV, dA, dS, dQ, dK).

    Args:
        q, k, v: small matrices (at most 8 x 8 each); None for the worked example's.
        mask: None or "causal" (the worked example's), "none", or a bool table (N, M) whose
            False entries block a pair.
        grad_output: the backward steps' upstream gradient dO, (N, d_v); None: all ones.
        step: the step shown first.
    """
    traits = {name: number_matrix(name, x) for name, x in (("q", q), ("k", k), ("v", v))
              if x is not None}  # fmt: skip
    if isinstance(mask, str) and mask in ("causal", "none"):
        traits["causal"] = mask == "causal"
    elif mask is not None:
        table = np.asarray(mask)
        n, m = (
            len(traits.get(name, example))
            for name, example in (("q", _step.EXAMPLE_Q), ("k", _step.EXAMPLE_K))
        )
        if table.dtype != bool or table.shape != (n, m):
            raise AttnlabError(
                f"expected mask to be 'causal', 'none' or a bool table of shape "
                f"{(n, m)}, but got {mask!r} instead"
            )
        traits["causal"], traits["blocked"] = False, np.argwhere(~table).tolist()
    if grad_output is not None:
        traits["grad_output"] = grad_output
    return StepperWidget(step=step, **traits)


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
    """Four hand-set heads reading "The animal didn't cross the street because it was tired";
    ``query`` is the word's index, 0 to 9."""
    return MultiHeadWidget(query=query)
