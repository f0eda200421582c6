"""A tiny transformer trained on attnlab's own attention gradients.

    TinyTransformer   a decoder or encoder in numpy; attention forward and backward are
                      ``attnlab.attention`` and ``attnlab.attention_backward``
    Adam              the optimiser, updating the model's arrays in place
    pretrained(name)  a model shipped with attnlab: "induction" (``attnlab lab train-induction``
                      at its defaults)
    checkpoints(name) its weights at the snapshots kept while it trained, to watch heads form

>>> from attnlab.transformer import TinyTransformer, Adam
>>> m = TinyTransformer(vocab_size=5, context=4, layers=1, heads=1, d_model=4, seed=1)
>>> loss, grads = m.loss_and_grads([[1, 2, 3, 4]], [[2, 3, 4, -1]])
>>> sorted(grads) == sorted(m.params)
True
"""

from __future__ import annotations

from attnlab.transformer.adam import Adam
from attnlab.transformer.model import AttentionCall, TinyTransformer
from attnlab.transformer.pretrained import PRETRAINED, checkpoints, pretrained

__all__ = ["PRETRAINED", "Adam", "AttentionCall", "TinyTransformer", "checkpoints", "pretrained"]
