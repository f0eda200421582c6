"""DeepSeek-V3's mixture-of-experts MLP: sigmoid routing limited to the best expert groups,
plus shared experts every token passes through.

Shape legend: T = B · N tokens, d_model hidden width, E routed experts, G groups of E / G
experts, k experts per token, d_ff expert width.

For each token:
    s = σ(x W_routerᵀ)                     (T, E): the experts' scores
    s' = s + b                              the correction bias b moves the choice only
    group score = sum of the two largest s' in the group; keep the best ``topk_group`` groups
    chosen = the k largest s' among the kept groups' experts
    gate_e = s_e (not s'_e), over Σ_chosen s (when ``norm_topk_prob``), times
             ``routed_scaling_factor``
    out = Σ_chosen gate_e · expert_e(x) + shared(x)
Each expert and the shared experts are SwiGLU MLPs (``_layers.gated_mlp``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.models._layers import gated_mlp, linear

__all__ = ["DeepSeekMoE"]


@dataclass
class DeepSeekMoE:
    """One layer's routed and shared experts and the routing options; call it on
    (..., d_model)."""

    router: np.ndarray  # (E, d_model)
    bias: np.ndarray  # (E,): e_score_correction_bias
    experts: list[dict]  # each {gate_proj, up_proj, down_proj}
    shared: dict  # the shared experts as one gated MLP
    act: object
    top_k: int
    groups: int
    top_groups: int
    norm_topk: bool
    scaling: float

    def route(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chosen experts (T, k), their gates (T, k)) for tokens x (T, d_model)."""
        t, e = len(x), len(self.bias)
        scores = 1.0 / (1.0 + np.exp(-linear(x, self.router)))  # (T, E)
        choice = scores + self.bias
        by_group = choice.reshape(t, self.groups, e // self.groups)  # (T, G, E / G)
        group_score = np.sort(by_group, -1)[..., -2:].sum(-1)  # (T, G): its two best experts
        best = np.argsort(-group_score, -1, kind="stable")[:, : self.top_groups]  # (T, top_groups)
        kept = np.zeros((t, self.groups), bool)
        np.put_along_axis(kept, best, True, -1)
        choice = np.where(np.repeat(kept, e // self.groups, -1), choice, -np.inf)  # (T, E)
        chosen = np.argsort(-choice, -1, kind="stable")[:, : self.top_k]  # (T, k)
        gates = np.take_along_axis(scores, chosen, -1)  # (T, k): the scores, without the bias
        if self.norm_topk:
            gates = gates / (gates.sum(-1, keepdims=True) + 1e-20)
        return chosen, gates * self.scaling

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The MLP, (..., d_model) -> (..., d_model)."""
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])  # (T, d_model)
        chosen, gates = self.route(x)
        out = np.zeros_like(x)
        for e in np.unique(chosen):
            tokens, slot = np.nonzero(chosen == e)  # the tokens routed to expert e
            y = gated_mlp(x[tokens], self.experts[e], self.act)  # (t, d_model)
            np.add.at(out, tokens, y * gates[tokens, slot, None])
        out += gated_mlp(x, self.shared, self.act)
        return out.reshape(*lead, -1)
