"""GET /api/learned at a training checkpoint: predictions only from that checkpoint's own
weights. The shipped file's snapshots keep the attention weights only; a model made of them and
the trained model's output layer predicts with two steps of training at once, so for those the
answer carries no predictions and says why."""

from __future__ import annotations

import numpy as np

from attnlab.transformer import checkpoints, pretrained
from attnlab.transformer.pretrained import _path

TOKENS = "5 9 12 40 7 5 9 12 40"


def _own_unembedding(step: int) -> bool:
    """Whether the shipped file holds an output layer for the snapshot at ``step``."""
    with _path("induction") as path, np.load(path) as data:
        return f"snapshot/{step}/unembed" in data.files


def test_each_checkpoints_predictions_come_from_its_own_weights(client):
    steps = [step for step, _ in checkpoints("induction")]
    for index, step in enumerate(steps[:-1]):
        data = client.get("/api/learned", params={"tokens": TOKENS, "checkpoint": index}).json()
        if _own_unembedding(step):
            model = checkpoints("induction")[index][1]
            batch = np.array([[int(t) for t in TOKENS.split()]])
            assert data["predictions"] == model.predict(batch)[0].tolist()
        else:
            assert data["predictions"] is None, (index, step)
            assert "output layer" in data["predictions_note"]
    # The trained model has its own output layer: its predictions, and no note.
    last = client.get("/api/learned", params={"tokens": TOKENS}).json()
    batch = np.array([[int(t) for t in TOKENS.split()]])
    assert last["predictions"] == pretrained("induction").predict(batch)[0].tolist()
    assert last["predictions_note"] is None
