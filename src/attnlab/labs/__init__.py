"""The chapter's labs: each measures one claim of §6 and returns a frozen, JSON-ready result.

Every lab takes a ``seed`` (same seed, same numbers) and returns a dataclass with
``.as_dict()`` (plain JSON types; NaN becomes None), ``.table()`` -> (columns, rows) and
``.summary()`` (a few sentences). The CLI (`attnlab lab NAME`), the web app and the tests call
these same functions; bad arguments raise ``attnlab.errors.AttnlabError``.

Each lab is declared once, by the ``SPEC`` (a ``LabSpec``) at the end of its module: its
parameters with default, bounds and help, its title, its table's columns, its plot and an
estimate of time and memory. ``LABS`` maps each name to its spec, which runs the lab when
called (``LABS["variance"](draws=5_000)``); the CLI commands and the web routes are generated
from it.

    variance     Var(q·k)/d_k and Var(q·k/√d_k) per width (§6.3, lab 2b)
    saturation   share of softmax trials with p_max > 0.99, unscaled vs scaled (§6.3, lab 2b)
    sweep        the same over d_k = 16..256, with score histograms (figure sqrt-dk-histogram)
    permutation  "The dog bit the man" vs "The man bit the dog", without and with positions (§6.5)
    cost         multi-head attention timed across N beside the cost model (§6.6), and h heads
                 of width d_model/h against one head of width d_model
    proof        each step of §6.3's argument for √d_k measured beside its prediction, with SEs
    gradient     the gradient reaching the scores and the queries, unscaled vs scaled (§6.3)
    train-induction, train-scaling, train-positions   a tiny transformer trained on attnlab's
                 own gradients: an induction head forms; 1/√d_k speeds learning; order needs
                 positions (``induction``, ``training_scaling``, ``training_positions``)
    ablate-heads the shipped induction model with each head and each layer knocked out:
                 accuracy and loss per position of the repeat (``ablation``)

In Jupyter every result displays as an HTML table with its summary, then its plot as Plotly's
notebook mimetype (the figure's JSON; the frontend draws it). Its ``_repr_html_`` (an HTML page)
carries plotly.js inline once per process (``_display``); ``reset_display()`` makes the next
one carry it again.

>>> from attnlab.labs import LABS
>>> sorted(LABS)
['ablate-heads', 'cost', 'gradient', 'permutation', 'proof', 'saturation', 'sweep', 'train-induction', 'train-positions', 'train-scaling', 'variance']
"""

from __future__ import annotations

from attnlab.labs import ablation as _ablation
from attnlab.labs import induction as _induction
from attnlab.labs import measured_cost as _cost
from attnlab.labs import score_gradients as _gradient
from attnlab.labs import softmax_saturation as _saturation
from attnlab.labs import sqrt_dk_proof as _proof
from attnlab.labs import sweep as _sweep
from attnlab.labs import timing
from attnlab.labs import training_positions as _training_positions
from attnlab.labs import training_scaling as _training_scaling
from attnlab.labs import variance as _variance
from attnlab.labs import word_order as _permutation
from attnlab.labs._common import jsonable
from attnlab.labs._display import reset as reset_display
from attnlab.labs._spec import Estimate, LabPlot, LabSpec, Param, Series
from attnlab.labs.ablation import AblationResult, AblationRow, ablate_heads
from attnlab.labs.induction import InductionResult, train_induction
from attnlab.labs.measured_cost import CostRow, CostTimingResult, cost_timing
from attnlab.labs.score_gradients import GradientResult, GradientRow, gradient
from attnlab.labs.softmax_saturation import SaturationResult, saturation
from attnlab.labs.sqrt_dk_proof import ProofResult, ProofRow, proof
from attnlab.labs.sweep import ScoreHistogram, SweepResult, SweepRow, score_histogram, width_sweep
from attnlab.labs.training_positions import PositionsResult, train_positions
from attnlab.labs.training_scaling import ScalingResult, train_scaling
from attnlab.labs.variance import VarianceResult, VarianceRow, variance_scaling
from attnlab.labs.word_order import PermutationResult, permutation

__all__ = [
    "COLUMN_TITLES",
    "LABS",
    "AblationResult",
    "AblationRow",
    "CostRow",
    "CostTimingResult",
    "Estimate",
    "GradientResult",
    "GradientRow",
    "InductionResult",
    "LabPlot",
    "LabSpec",
    "Param",
    "PermutationResult",
    "PositionsResult",
    "ProofResult",
    "ProofRow",
    "SaturationResult",
    "ScalingResult",
    "ScoreHistogram",
    "Series",
    "SweepResult",
    "SweepRow",
    "VarianceResult",
    "VarianceRow",
    "ablate_heads",
    "cost_timing",
    "gradient",
    "jsonable",
    "permutation",
    "proof",
    "reset_display",
    "saturation",
    "score_histogram",
    "timing",
    "train_induction",
    "train_positions",
    "train_scaling",
    "variance_scaling",
    "width_sweep",
]

#: name -> the lab's spec (callable: it runs the lab), the names `attnlab lab NAME` and the web use.
LABS: dict[str, LabSpec] = {
    spec.name: spec for spec in (_variance.SPEC, _saturation.SPEC, _sweep.SPEC,
                                 _permutation.SPEC, _cost.SPEC, _proof.SPEC, _gradient.SPEC,
                                 _induction.SPEC, _training_scaling.SPEC,
                                 _training_positions.SPEC, _ablation.SPEC)
}  # fmt: skip

#: table() column keys -> short titles for people (terminal, HTML); CSV and JSON keep the keys.
COLUMN_TITLES = {key: title for spec in LABS.values() for key, title in spec.columns}
