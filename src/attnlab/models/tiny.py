"""A tiny random GPT-2 folder, written with numpy and safetensors, for trying attnlab.models
without a download (the notebook and the CLI's tests use it).

It has the layout a downloaded GPT-2 has (config.json, model.safetensors, tokenizer.json), so
``load`` reads it exactly as it reads GPT-2 small; its tokenizer splits on whitespace and
punctuation and knows the words of ``text``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["SAMPLE_TEXT", "write_tiny_gpt2"]

SAMPLE_TEXT = "the cat sat on the mat . the dog sat on the log . the cat saw the dog and the dog saw the cat ."


def _tokenizer(words: list[str]) -> str:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate(words)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok.to_str()


def write_tiny_gpt2(
    path, *, layers: int = 2, d_model: int = 32, heads: int = 4, positions: int = 64,
    seed: int = 0, text: str = SAMPLE_TEXT,
) -> Path:  # fmt: skip
    """Write a random GPT-2 (weights N(0, 0.02²), norms 1 and 0) into folder ``path``.

    Returns the folder. The vocabulary is "[UNK]" and the distinct words of ``text``.
    """
    from safetensors.numpy import save_file

    for name, value in (
        ("layers", layers),
        ("d_model", d_model),
        ("heads", heads),
        ("positions", positions),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise AttnlabError(f"expected {name} to be an integer in 1..4096, but got {value!r}")
    if d_model % heads:
        raise AttnlabError(f"expected heads to divide d_model={d_model}, but got heads={heads}")
    words = list(dict.fromkeys(text.split()))
    vocab = len(words) + 1
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    w = {
        "transformer.wte.weight": normal(vocab, d_model),
        "transformer.wpe.weight": normal(positions, d_model),
    }
    for name in ["transformer.ln_f"] + [
        f"transformer.h.{i}.ln_{j}" for i in range(layers) for j in (1, 2)
    ]:
        w[f"{name}.weight"] = np.ones(d_model, np.float32)
        w[f"{name}.bias"] = np.zeros(d_model, np.float32)
    for i in range(layers):
        p = f"transformer.h.{i}."
        for name, (d_in, d_out) in {
            "attn.c_attn": (d_model, 3 * d_model),
            "attn.c_proj": (d_model, d_model),
            "mlp.c_fc": (d_model, 4 * d_model),
            "mlp.c_proj": (4 * d_model, d_model),
        }.items():
            w[f"{p}{name}.weight"] = normal(d_in, d_out)
            w[f"{p}{name}.bias"] = normal(d_out)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": vocab,
        "n_embd": d_model,
        "n_layer": layers,
        "n_head": heads,
        "n_positions": positions,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    save_file(w, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(_tokenizer(words), encoding="utf-8")
    return folder
