"""Predict first: one or two questions per figure, asked before the figure shows the answer.

Each prompt says how to check a reader's guess (a number within a tolerance, or one of a few
choices) and how to set the figure up to see the answer. Every number in an answer is computed
here from attnlab: the worked example's trace, the saturation lab, the permutation and
multi-head figures' own data, never typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import attnlab
from attnlab.core.example import EXAMPLE_K, EXAMPLE_Q, EXAMPLE_V
from attnlab.figures import histogram
from attnlab.figures._data import as_dict
from attnlab.figures.multihead import HEADS, SENTENCE, build_multihead
from attnlab.figures.permutation import build_permutation

__all__ = ["Action", "Prompt", "build_prompts"]

SATURATION_D_K = 128  # §6.3's measured case: d_k = 128, 64 keys, 500 trials
RATIO_TOLERANCE = 0.1  # a guess of e^gap within 10% counts as right
SHARE_TOLERANCE = 10.0  # percentage points, about five of the lab's standard errors
SPREAD_TOLERANCE = 0.5  # a guess of how many times wider within half a time counts as right


@dataclass(frozen=True)
class Action:
    """One thing to do to the figure so it shows the answer."""

    selector: str  # a CSS selector inside the page
    do: str  # "check", "uncheck", "value" or "click"
    value: str = ""


@dataclass(frozen=True)
class Prompt:
    id: str
    figure: str  # the anchor of the figure the prompt is about
    figure_title: str
    question: str
    kind: str  # "number" or "choice"
    choices: list[str]  # for "choice"
    answer: float  # the number, or the index of the right choice
    tolerance: float  # for "number": |guess - answer| <= tolerance is right
    unit: str
    answer_text: str
    show: list[Action] = field(default_factory=list)
    step: str = ""  # the stepper step to open after the actions

    def as_dict(self) -> dict:
        return as_dict(self)


def _stepper() -> list[Prompt]:
    trace = attnlab.trace_attention(EXAMPLE_Q, EXAMPLE_K, EXAMPLE_V)  # no mask
    weights = trace.weights[0]  # (M,) token 1's weights
    gap = float(trace.scaled[0].max() - trace.scaled[0].min())
    ratio = math.exp(gap)
    choices = ["Almost all on token 1, itself", "Almost all on token 2", "About half on each"]
    top = int(np.argmax(weights))
    unmask = [Action("#stepper-causal", "uncheck"), Action("#stepper-scaled", "check")]
    where = Prompt(
        "stepper-mask",
        "figure-attention-stepper",
        "Attention stepper",
        "Switch the causal mask off and go to the softmax. Token 1 scores "
        f"{trace.scaled[0, 0]:.2f} against itself and {trace.scaled[0, 1]:.2f} against token 2. "
        "Where does its weight go?",
        "choice",
        choices,
        top,
        0.0,
        "",
        f"{choices[top]}: token 2 gets {weights[1]:.6f} of the weight. Softmax only cares about "
        f"the difference between scores, and a difference of {gap:.3f} is enormous once "
        "exponentiated.",
        unmask,
        "weights",
    )
    times = Prompt(
        "stepper-ratio",
        "figure-attention-stepper",
        "Attention stepper",
        f"Same row, mask off: the two scores differ by {gap:.3f}. How many times bigger is token "
        "2's weight than token 1's?",
        "number",
        [],
        ratio,
        RATIO_TOLERANCE * ratio,
        "times",
        f"About {ratio:,.0f} times: e^{gap:.3f}. A gap g always makes one weight e^g times the "
        "other, whatever the rest of the row holds.",
        unmask,
        "weights",
    )
    return [where, times, _stepper_gradient()]


def _stepper_gradient() -> Prompt:
    """The backward steps: a row with one allowed key passes no gradient to its scores."""
    causal = attnlab.masks.Causal()
    trace = attnlab.trace_attention(
        EXAMPLE_Q, EXAMPLE_K, EXAMPLE_V, causal, grad_output=np.ones((2, 2))
    )
    ds = trace.grad_scores  # (2, 2): the gradient of the masked scores, dO all ones
    choices = [
        "Zero: nothing reaches token 1's scores",
        "About as big as token 2's",
        "Bigger than token 2's: token 1's weight is 1, the largest",
    ]
    size = np.abs(ds).sum(axis=1)  # (2,) how much gradient each row's scores get
    right = 0 if size[0] == 0 else 1 if abs(size[0] - size[1]) < 0.5 * size[1] else 2
    return Prompt(
        "stepper-gradient",
        "figure-attention-stepper",
        "Attention stepper",
        "Causal mask on, the chapter's example. Training sends a gradient back from the "
        "outputs (all ones). Token 1 may look only at itself. How big is the gradient that "
        "reaches token 1's scores?",
        "choice",
        choices,
        right,
        0.0,
        "",
        f"{choices[right]}: its row of dS is [{ds[0, 0]:g}, {ds[0, 1]:g}]. With one allowed key "
        "the weight is 1 whatever the score, so moving the score moves nothing. Token 2, "
        f"which weighs two keys, gets [{ds[1, 0]:.3f}, {ds[1, 1]:.3f}]. A saturated row is "
        "nearly in the same place, which is why learning stalls without √d_k.",
        [Action("#stepper-causal", "check"), Action("#stepper-scaled", "check")],
        "grad_scores",
    )


def _histogram() -> list[Prompt]:
    lab = attnlab.labs.saturation(d_k=SATURATION_D_K)
    share = 100 * lab.unscaled_share
    se = 100 * lab.unscaled_share_se
    setup = [Action("#hist-dk", "value", str(SATURATION_D_K)), Action("#hist-scaled", "uncheck")]
    unscaled = Prompt(
        "histogram-share",
        "figure-sqrt-dk-histogram",
        "Why divide by √d_k",
        f"Scaling off, d_k = {lab.d_k}, {lab.keys} keys a trial: in what percentage of trials "
        f"does one key take more than {lab.threshold:.0%} of the weight?",
        "number",
        [],
        share,
        SHARE_TOLERANCE,
        "%",
        f"{share:.1f}% (± {se:.1f}%) of {lab.trials} trials. Raw scores spread like "
        f"√{lab.d_k} ≈ {math.sqrt(lab.d_k):.1f}, so gaps big enough to hand one key everything "
        "are common.",
        setup,
    )
    choices = ["It stays about the same", "It drops to about zero", "It goes up"]
    right = 1 if lab.scaled_share < 0.01 else 0
    scaled = Prompt(
        "histogram-scaled",
        "figure-sqrt-dk-histogram",
        "Why divide by √d_k",
        "Now switch the division by √d_k on. What happens to that share?",
        "choice",
        choices,
        right,
        0.0,
        "",
        f"{choices[right]}: {100 * lab.scaled_share:.1f}% of the scaled trials saturate. Scaled "
        "scores have variance 1 at any width, so the gaps stay small.",
        [Action("#hist-dk", "value", str(SATURATION_D_K)), Action("#hist-scaled", "check")],
    )
    return [_spread(), unscaled, scaled]


def _spread() -> Prompt:
    """§6.3's try: how much wider the raw scores get from the narrowest slider width to the
    widest, measured on the figure's own draws (the proof says √(256/16) = 4)."""
    low, high = histogram.D_K_MIN, histogram.D_K_MAX
    narrow, wide = (
        attnlab.labs.score_histogram(d_k, scaled=False, draws=histogram.DRAWS).std
        for d_k in (low, high)
    )
    ratio = wide / narrow
    return Prompt(
        "histogram-spread",
        "figure-sqrt-dk-histogram",
        "Why divide by √d_k",
        f"Scaling off, move d_k from {low} to {high}. How many times wider does the histogram "
        "of raw scores get?",
        "number",
        [],
        ratio,
        SPREAD_TOLERANCE,
        "times",
        f"About {ratio:.1f} times: the measured spread goes from {narrow:.2f} to {wide:.2f}. "
        f"Width grows like √d_k, so {high / low:g} times the width gives √{high / low:g} = "
        f"{math.sqrt(high / low):g} times the spread, not {high / low:g}.",
        [Action("#hist-scaled", "uncheck"), Action("#hist-dk", "value", str(high))],
    )


def _permutation() -> list[Prompt]:
    n = len(build_permutation().tokens)
    shuffled = build_permutation(list(range(n))[::-1])  # the sentence read backwards
    change = max(t.max_change for t in shuffled.tokens)
    choices = ["Their values change", "Only their place in the list changes", "Both change"]
    right = 1 if change < 1e-9 else 0
    return [
        Prompt(
            "permutation-shuffle",
            "figure-permutation-demo",
            "Attention cannot see word order",
            "With no position vectors, shuffle the tokens. Do the output vectors change their "
            "numbers, or only where they sit in the list?",
            "choice",
            choices,
            right,
            0.0,
            "",
            f"{choices[right]}: reversing the sentence moves every output with its token, and the "
            f"largest change of any output number is {change:.1g}. Nothing in a score says "
            "where a token sits.",
            [Action("#perm-positions", "uncheck"), Action("#perm-shuffle", "click")],
        )
    ]


def _multihead() -> list[Prompt]:
    it, animal = SENTENCE.index("it"), SENTENCE.index("animal")
    picked = build_multihead(query=it).picked
    right = next(h for h, key in enumerate(picked.top) if key == animal)
    names = [name for name, _, _ in HEADS]
    return [
        Prompt(
            "multihead-it",
            "figure-multi-head",
            "Four heads, four ways of looking",
            "Pick the word “it”. Before looking, which head lets the model tell what “it” "
            "stands for?",
            "choice",
            names,
            right,
            0.0,
            "",
            f"The “{names[right]}” head: it puts {picked.top_weight[right]:.0%} of the weight of "
            "“it” on “animal”. The other heads look elsewhere, which is why all of them are "
            "joined and mixed.",
            [Action(f"#mh-words input[value='{it}']", "click")],
        )
    ]


def build_prompts() -> list[Prompt]:
    """The predict-first prompts, figure by figure, in the page's order.

    >>> [p.id for p in build_prompts()][:2]
    ['stepper-mask', 'stepper-ratio']
    """
    return [*_stepper(), *_histogram(), *_permutation(), *_multihead()]
