"""The result of running a model on token ids: logits, each layer's attention, and traces.

Shape legend: B batch, N tokens, L layers, h query heads, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._attend import LayerAttention

__all__ = ["ModelRun"]


@dataclass
class ModelRun:
    """One forward pass.

    Attributes:
        ids: the token ids, (B, N).
        logits: the next-token logits, (B, N, V).
        layers: each layer's ``LayerAttention`` (q, k after the rotary embedding, v, mask,
            scale, softcap, sinks), for reading any row back.
        cache: with ``run(..., cache=True)``, every named activation (docs/inside.md), else None.
        model: the ``Model`` that ran (for the logit lens and attribution).
        keys: the real tokens (B, N) bool of an ``attention_mask`` with padding, else None.
        hooks: the hooks the run was made with, or None.
        output: what ``logits`` holds: "next-token logits" (a decoder), "masked-LM logits"
            (an encoder with its prediction head) or "last hidden state" (an encoder without
            one: (B, N, d_model), not vocabulary scores).
    """

    ids: np.ndarray
    logits: np.ndarray
    layers: list[LayerAttention] = field(repr=False)
    cache: dict | None = field(default=None, repr=False)
    model: object | None = field(default=None, repr=False)
    keys: np.ndarray | None = field(default=None, repr=False)
    hooks: dict | None = field(default=None, repr=False)
    output: str = "next-token logits"

    @property
    def attention(self) -> list[np.ndarray]:
        """Each layer's attention weights, (B, h, N, N): the numbers transformers returns
        with ``output_attentions=True`` (computed on first use when the run kept none)."""
        return [layer.weights for layer in self.layers]

    @property
    def kinds(self) -> list[str]:
        """Each layer's attention: 'full' or 'sliding W', with softcap and sinks as they apply."""
        return [layer.kind for layer in self.layers]

    def trace(self, layer: int, head: int, query: int, batch: int = 0):
        """Row ``query`` of ``head`` in ``layer`` (of batch element ``batch``) as an
        ``AttentionTrace``: scores, scaled, capped (with a softcap), masked, weights and output,
        from the q and k the model used (after the rotary embedding)."""
        if isinstance(layer, bool) or not isinstance(layer, int | np.integer):
            raise AttnlabError(f"expected layer to be an integer, but got {layer!r}")
        if not 0 <= layer < len(self.layers):
            raise AttnlabError(f"expected 0 <= layer < {len(self.layers)}, but got layer={layer}")
        return self.layers[layer].trace(head, query, batch)

    def logit_lens(self, layer: int) -> np.ndarray:
        """(B, N, V): layer ``layer``'s ``hook_resid_post`` through the final norm and the
        output head (and final softcap); the last layer's is ``logits`` (docs/inside.md)."""
        from attnlab.models.inside.lens import logit_lens

        return logit_lens(self, layer)

    def logit_attribution(self, position: int, token: int, batch: int = 0) -> dict[str, float]:
        """{component: its share of the logit of ``token`` at ``position``}: ``embed``,
        ``pos_embed``, every head ``L{l}H{h}``, each ``L{l}.mlp`` and the bias terms, the final
        norm's scale frozen at this run's value. The shares add up to the logit before a final
        softcap (docs/inside.md)."""
        from attnlab.models.inside.lens import logit_attribution

        return logit_attribution(self, position, token, batch)

    def logit_difference(self, position: int, a: int, b: int, batch: int = 0) -> dict[str, float]:
        """``logit_attribution`` of logit[a] - logit[b] at ``position``."""
        from attnlab.models.inside.lens import logit_difference

        return logit_difference(self, position, a, b, batch)

    def head_scores(self, batch: int = 0):
        """Previous-token, induction, duplicate-token and first-token scores of every head
        (``attnlab.models.heads.HeadScores``) on batch element ``batch``."""
        from attnlab.models.heads import head_scores

        if isinstance(batch, bool) or not isinstance(batch, int) or not 0 <= batch < len(self.ids):
            raise AttnlabError(f"expected 0 <= batch < {len(self.ids)}, but got batch={batch!r}")
        return head_scores(self, batch)

    def as_dict(self, *, weights: bool = False, top: int = 5) -> dict:
        """JSON-ready: ids, the shape, what the logits are, each layer's kind, the top-``top``
        tokens of each position (batch 0; none when the run's output is a hidden state), and
        with ``weights`` every layer's attention as nested lists."""
        b, n, v = self.logits.shape
        out = {
            "ids": self.ids.tolist(),
            "batch": b,
            "tokens": n,
            "vocab": None if self.output == "last hidden state" else v,  # else d_model
            "output": self.output,
            "layers": [
                {"kind": layer.kind, "heads": layer.q.shape[1], "kv_heads": layer.k.shape[1]}
                for layer in self.layers
            ],
        }
        if self.output != "last hidden state":
            order = np.argsort(-self.logits[0], axis=-1)[:, :top]  # (N, top)
            out["next_tokens"] = [
                [{"id": int(t), "logit": float(self.logits[0, i, t])} for t in row]
                for i, row in enumerate(order)
            ]
        if weights:
            out["attention"] = [w.tolist() for w in self.attention]
        return out
