"""The chapter's labs: each measures one claim of §6 and returns a frozen, JSON-ready result.

Every lab takes a ``seed`` (same seed, same numbers) and returns a dataclass with
``.as_dict()`` (plain JSON types; NaN becomes None), ``.table()`` -> (columns, rows) and
``.summary()`` (a few sentences). The CLI (`attnlab lab NAME`), the web app and the tests call
these same functions; bad arguments raise ``attnlab.errors.AttnlabError``.

    variance     Var(q·k)/d_k and Var(q·k/√d_k) per width (§6.3, lab 2b)
    saturation   share of softmax trials with p_max > 0.99, unscaled vs scaled (§6.3, lab 2b)
    sweep        the same over d_k = 16..256, with score histograms (figure sqrt-dk-histogram)
    permutation  "The dog bit the man" vs "The man bit the dog", without and with positions (§6.5)
    cost         multi-head attention timed across N beside the cost model (§6.6)

>>> from attnlab.labs import LABS
>>> sorted(LABS)
['cost', 'permutation', 'saturation', 'sweep', 'variance']
"""

from __future__ import annotations

from attnlab.labs import timing
from attnlab.labs._common import COLUMN_TITLES
from attnlab.labs.cost import CostRow, CostTimingResult, cost_timing
from attnlab.labs.permutation import PermutationResult, permutation
from attnlab.labs.saturation import SaturationResult, saturation
from attnlab.labs.sweep import ScoreHistogram, SweepResult, SweepRow, score_histogram, width_sweep
from attnlab.labs.variance import VarianceResult, VarianceRow, variance_scaling

__all__ = [
    "COLUMN_TITLES",
    "LABS",
    "CostRow",
    "CostTimingResult",
    "PermutationResult",
    "SaturationResult",
    "ScoreHistogram",
    "SweepResult",
    "SweepRow",
    "VarianceResult",
    "VarianceRow",
    "cost_timing",
    "permutation",
    "saturation",
    "score_histogram",
    "timing",
    "variance_scaling",
    "width_sweep",
]

#: name -> lab function, the names `attnlab lab NAME` and the web app use.
LABS = {
    "variance": variance_scaling,
    "saturation": saturation,
    "sweep": width_sweep,
    "permutation": permutation,
    "cost": cost_timing,
}
