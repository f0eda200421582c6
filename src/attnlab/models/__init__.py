"""Real Hugging Face checkpoints, run through attnlab's own attention.

>>> import attnlab.models as m                               # doctest: +SKIP
>>> model = m.load("~/models/gpt2")                          # doctest: +SKIP
>>> run = model.run(model.tokenize("The cat sat on the mat. The cat"))  # doctest: +SKIP
>>> run.attention[5].shape, run.trace(5, 1, 9)               # doctest: +SKIP

``load`` reads config.json, the safetensors weights (one file or shards) and, when present,
tokenizer.json; the families are ``FAMILIES``. Every layer's attention goes through
``attnlab.attention`` with the model's own options (grouped-query heads, sliding windows,
chunks, softcap, sinks, DeepSeek's latent attention in either form, BERT's bidirectional
attention with padding), so each weight can be traced back to its scores (``ModelRun.trace``).
``Model.run(ids, cache=True, hooks={...})`` keeps and changes any named activation
(TransformerLens's names); ``ablate`` and ``patch`` knock heads out and patch activations
(docs/inside.md). ``write_tiny_gpt2`` writes a small random GPT-2 folder for trying this without a download.
"""

from __future__ import annotations

from attnlab.models._config import FAMILIES, Shape
from attnlab.models._load import load
from attnlab.models._model import Model
from attnlab.models._run import ModelRun
from attnlab.models._shipped import SHIPPED, shipped
from attnlab.models.heads import ENCODER_KINDS, HEAD_KINDS, HeadScores, head_scores
from attnlab.models.inside import ablate, patch
from attnlab.models.tiny import write_tiny_gpt2

__all__ = [
    "ENCODER_KINDS",
    "FAMILIES",
    "HEAD_KINDS",
    "SHIPPED",
    "HeadScores",
    "Model",
    "ModelRun",
    "Shape",
    "ablate",
    "head_scores",
    "load",
    "patch",
    "shipped",
    "write_tiny_gpt2",
]
