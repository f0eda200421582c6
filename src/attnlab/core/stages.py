"""The steps of one attention call, forward and backward, named and explained once.

Shape legend (the chapter's letters): N query rows, M key rows, d_k query/key width, d_v value
width. The weights are A, as in the chapter (§6.5 keeps P for a permutation).

Every place that shows a step reads it from here, word for word: the trace's text and HTML
(``core/trace.py``), ``attnlab example`` and ``attnlab attention`` on the terminal, the
stepper's figure data (``figures/stepper*.py``), the page (through ``GET /api/config``'s
``stages``) and the notebook widgets (through the figures). A wording fix made here reaches
them all.

The module is plain data with no imports beyond the standard library, so the core may use it
(it renders the trace) and every layer above may too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "BACKWARD",
    "BACKWARD_HEADING",
    "CAPPED",
    "FORWARD",
    "INPUTS",
    "STAGES",
    "Stage",
    "stage",
    "stages_data",
]


@dataclass(frozen=True)
class Stage:
    """One step: what it is called, what it computes and what it means.

    ``name`` is the trace's attribute (``trace.weights``); ``symbol`` the letter the chapter
    gives the table; ``formula`` the step in symbols; ``caption`` one line naming the step, its
    formula and its shape (short enough for an 80-column terminal); ``explain`` a few sentences
    on what the step does and why; ``rows`` and ``cols`` what the table's rows and columns are
    ("query", "key" or "dim"); ``phase`` "forward" or "backward".
    """

    name: str
    symbol: str
    title: str
    formula: str
    caption: str
    explain: str
    rows: str
    cols: str
    phase: str = "forward"


# The stepper opens on the inputs; the trace keeps them as q, k and v, not as a step.
INPUTS = Stage(
    "inputs",
    "Q, K, V",
    "Queries, keys and values",
    "Q (N×d_k), K (M×d_k), V (M×d_v)",
    "inputs  Q (N x d_k), K (M x d_k), V (M x d_v)",
    "Each token owns a row in all three. Its query row is the question it asks of the others, "
    "its key row is how others recognise it, and its value row is the content it passes on to "
    "whoever attends to it.",
    "query",
    "dim",
)

FORWARD = (
    Stage(
        "scores",
        "S",
        "Scores",
        "S = Q Kᵀ",
        "scores  S = Q Kᵀ  (N x M)",
        "Entry (i, j) is the dot product of query row i with key row j: multiply the entries "
        "pairwise and add. The more the two vectors point the same way, the larger the score.",
        "query",
        "key",
    ),
    Stage(
        "scaled",
        "S · 1/√d_k",
        "Scaled scores",
        "S · 1/√d_k",
        "scaled  S · scale  (scale = 1/√d_k unless set)",
        "Every score is multiplied by the scale, 1/√d_k unless another is chosen, which keeps a "
        "typical score near ±1 however wide the vectors are (§6.3).",
        "query",
        "key",
    ),
    Stage(
        "masked",
        "S · 1/√d_k + M",
        "Mask added",
        "S/√d_k + M",
        "masked  S · scale + M  (-inf where blocked)",
        "The mask M adds 0 where query i may look at key j and −∞ where it may not. A −∞ score "
        "can never win any weight: after softmax it becomes exactly 0.",
        "query",
        "key",
    ),
    Stage(
        "weights",
        "A",
        "Softmax",
        "A = softmax of each row",
        "weights  A = softmax of each row  (N x M)",
        "Each row is exponentiated and divided by its total, so its weights are at least 0 and "
        "add up to 1. Softmax only cares about gaps: a score far above the rest of its row takes "
        "nearly all the weight.",
        "query",
        "key",
    ),
    Stage(
        "output",
        "O",
        "Output",
        "O = A V",
        "output  O = A V  (N x d_v)",
        "Each query's output is a blend of the value rows, mixed in the proportions given by its "
        "row of weights: a weighted average of the values.",
        "query",
        "dim",
    ),
)

BACKWARD = (
    Stage(
        "grad_output",
        "dO",
        "Upstream gradient dO",
        "dO = ∂L/∂O",
        "grad_output  dO = ∂L/∂O  (N x d_v)",
        "The backward pass starts from dO: how much a loss L changes when each output entry "
        "grows. The chain rule carries it back, step by step, to V, Q and K.",
        "query",
        "dim",
        "backward",
    ),
    Stage(
        "grad_v",
        "dV",
        "Gradient of V",
        "dV = Aᵀ dO",
        "grad_v  dV = Aᵀ dO  (M x d_v)",
        "Value row j reached output i with weight A_ij, so it collects that weight times query "
        "i's row of dO, summed over all queries.",
        "key",
        "dim",
        "backward",
    ),
    Stage(
        "grad_weights",
        "dA",
        "Gradient of the weights",
        "dA = dO Vᵀ",
        "grad_weights  dA = dO Vᵀ  (N x M)",
        "Nudging weight A_ij up mixes a little more of value row j into output i, so the loss "
        "moves by dO_i · v_j per unit of weight. Every pair gets this number, blocked or not: "
        "the next step decides how much of it reaches the scores.",
        "query",
        "key",
        "backward",
    ),
    Stage(
        "grad_scores",
        "dS",
        "Back through the softmax",
        "dS = A ∘ (dA − δ),  δ_i = Σ_j A_ij dA_ij",
        "grad_scores  dS = A ∘ (dA − δ)  (0 where blocked)",
        "Softmax ties a row together: a score that rises takes weight from the others. So a "
        "score's gradient is its weight times how far its dA lies above δ_i, the row's weighted "
        "average of dA, and each row of dS adds up to 0. A blocked pair gets 0 (its weight is "
        "0), a row with one allowed key gets 0 (its weight is 1 whatever its score), and a "
        "saturated row, one weight near 1, gets almost 0: without 1/√d_k large scores saturate "
        "and learning stalls (§6.3). The mask only adds constants, so dS is also the gradient "
        "of the scaled scores.",
        "query",
        "key",
        "backward",
    ),
    Stage(
        "grad_q",
        "dQ",
        "Gradient of Q",
        "dQ = dS K · 1/√d_k",
        "grad_q  dQ = dS K · scale  (N x d_k)",
        "Score (i, j) is q_i · k_j times the scale, so nudging query i in the direction of key j "
        "raises that score fastest. Query i's gradient adds up the key rows, each weighted by "
        "its entry in row i of dS, times the scale.",
        "query",
        "dim",
        "backward",
    ),
    Stage(
        "grad_k",
        "dK",
        "Gradient of K",
        "dK = dSᵀ Q · 1/√d_k",
        "grad_k  dK = dSᵀ Q · scale  (M x d_k)",
        "The same score read the other way: key j's gradient adds up the query rows, each "
        "weighted by its entry in column j of dS, times the scale. A key that no query may see "
        "gets 0.",
        "key",
        "dim",
        "backward",
    ),
)

# Shown only when a call uses it (a softcap), between the scaled and the masked table; not one
# of the stepper's steps, so it is kept out of STAGES.
CAPPED = Stage(
    "capped",
    "c · tanh(S · scale / c)",
    "Capped scores",
    "c · tanh(S · scale / c)",
    "capped  c · tanh(S · scale / c)  (softcap c)",
    "With a softcap c, each scaled score passes through c · tanh(score / c): near 0 it is left "
    "almost as it was, and however large it grows it never passes ±c, so no single key can "
    "take all of a row's weight by a huge score alone.",
    "query",
    "key",
)

STAGES = FORWARD + BACKWARD
BACKWARD_HEADING = "backward: the chain rule from the output back to Q, K and V, given dO = ∂L/∂O"
_BY_NAME = {s.name: s for s in (INPUTS, CAPPED, *STAGES)}


def stage(name: str) -> Stage:
    """The step called ``name`` ("inputs", "scores", ..., "grad_k")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no step called {name!r}; the steps are {sorted(_BY_NAME)}") from None


def stages_data() -> list[dict]:
    """Every step of the trace, in order, as plain dicts (what ``GET /api/config`` serves)."""
    return [asdict(s) for s in STAGES]
