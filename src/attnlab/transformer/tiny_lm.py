"""The small language model attnlab ships: trained here, on attnlab's own gradients, on the
corpus ``transformer.corpus`` writes, and saved as a Hugging Face GPT-2 folder.

    python -m attnlab.transformer.tiny_lm [FOLDER]      (or: make tiny-lm)

rebuilds it from scratch (seed 0, 2,000 Adam steps: a few minutes on a quiet core) into FOLDER (default: the copy
shipped in the package, ``attnlab/models/shipped/tiny-lm``) and prints its accuracy on the
held-out sequences. The folder opens like any checkpoint: ``attnlab.models.load(folder)``,
``attnlab model FOLDER``, ``attnlab serve`` (its default model). Its config.json records the
accuracies and every head's scores measured at build time under "attnlab", which the tests
check the shipped copy against.

A 2-layer GPT-2 block (4 heads of width 16, d_model 64, MLP, context 32) over 46 words. What it
must learn: the giving sentence's indirect object ("when John and Mary went to the park , John
gave a cake to" -> "Mary", chance 1/8 among the names), and a repeated phrase's second copy
(chance about 1/18).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import numpy as np

from attnlab.transformer import corpus
from attnlab.transformer.export import save_hugging_face
from attnlab.transformer.model import TinyTransformer

__all__ = ["PROBE", "SETTINGS", "accuracies", "build", "head_scores", "shipped_folder"]

#: The model and its training: changing any of these changes the shipped weights.
SETTINGS = {
    "layers": 2,
    "heads": 4,
    "d_model": 64,
    "context": 32,
    "steps": 2000,
    "batch": 32,
    "lr": 3e-3,
    "seed": 0,
}


def shipped_folder() -> Path:
    """The folder of the copy shipped in the package (``attnlab.models.shipped()``)."""
    return Path(str(resources.files("attnlab.models") / "shipped" / "tiny-lm"))


def accuracies(logits: np.ndarray, ev: corpus.Evaluation) -> dict[str, float]:
    """Top-1 accuracy at the held-out positions of each task, from logits (B, N, V)."""
    out = {}
    for task in ("giving", "repeat"):
        at = getattr(ev, task)  # (K, 2)
        guess = logits[at[:, 0], at[:, 1]].argmax(-1)  # (K,)
        out[task] = float((guess == ev.targets[at[:, 0], at[:, 1]]).mean())
    return out


#: The text the recorded head scores are measured on: a phrase said twice, where a
#: previous-token head and an induction head each have a row of targets to find.
PROBE = "<bos> red two cake old book blue hat . red two cake old book blue hat ."


def head_scores(folder) -> dict:
    """Every head's scores (attnlab's definitions, ``models.heads``) on ``PROBE``, float64."""
    import attnlab.models as m

    model = m.load(folder, dtype="float64")
    scores = model.run(model.tokenize(PROBE)).head_scores().scores
    return {k: np.round(v, 6).tolist() for k, v in scores.items()}


def build(folder=None, *, progress=None) -> dict:
    """Train the model at ``SETTINGS`` and write it to ``folder``; returns what config.json
    records: the settings, the held-out accuracies, and every head's scores."""
    from attnlab.labs._training import fit

    s = SETTINGS
    model = TinyTransformer(
        vocab_size=len(corpus.VOCABULARY), context=s["context"], layers=s["layers"],
        heads=s["heads"], d_model=s["d_model"], mlp=True, seed=s["seed"], init_std=0.02,
    )  # fmt: skip
    rng = np.random.default_rng(s["seed"])
    fit(model, lambda r: corpus.sequences(r, s["batch"], s["context"]), rng,
        steps=s["steps"], lr=s["lr"], progress=progress)  # fmt: skip
    ev = corpus.evaluation(context=s["context"])
    record = {"settings": dict(s), "accuracy": accuracies(model.logits(ev.tokens), ev)}
    folder = Path(folder) if folder is not None else shipped_folder()
    save_hugging_face(model, folder, corpus.VOCABULARY, extra=record)
    record["head_scores"] = head_scores(folder)
    save_hugging_face(model, folder, corpus.VOCABULARY, extra=record)
    return record


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else shipped_folder()
    record = build(folder)
    acc = record["accuracy"]
    print(f"wrote {folder}: indirect object {acc['giving']:.1%}, repeated phrase "
          f"{acc['repeat']:.1%} on the held-out sequences")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
