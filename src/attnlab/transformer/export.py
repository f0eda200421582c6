"""A ``TinyTransformer`` written as a Hugging Face GPT-2 folder, which ``attnlab.models.load``
(and transformers) then read like any downloaded checkpoint.

Shape legend: D = d_model, h heads of width e = D / h, F = 4D, V the vocabulary, C the context.

With ``mlp=True`` and learned positions the tiny transformer is GPT-2's block exactly: layer
norm before attention and before the MLP, the tanh GELU, a final layer norm (ε = 1e-5 in
both). The mapping, tensor by tensor (GPT-2 stores its projections as (in, out)):

    wte (V, D) = embed            wpe (C, D) = positions
    h.l.ln_1 = layer l's norm1    h.l.attn.c_attn.weight (D, 3D) = [W_Q | W_K | W_V], each
    h.l.ln_2 = norm2                  head's columns side by side; its bias 0
    h.l.attn.c_proj.weight (D, D) = W_O, bias 0
    h.l.mlp.c_fc = mlp.w_in, b_in   h.l.mlp.c_proj = mlp.w_out, b_out
    ln_f = norm                   lm_head.weight (V, D) = unembedᵀ, untied from wte

The word-level tokenizer is a ``tokenizers`` WordLevel model over the given words, split on
whitespace, so each token is one word.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["save_hugging_face"]


def _gpt2_tensors(model) -> dict[str, np.ndarray]:
    p, cfg = model.params, model.config
    out = {"wte.weight": p["embed"], "wpe.weight": p["positions"]}
    for layer in range(cfg["layers"]):
        pre, h = f"layer{layer}.", f"h.{layer}."
        qkv = [p[pre + w].transpose(1, 0, 2).reshape(cfg["d_model"], -1)  # (D, h·e)
               for w in ("w_q", "w_k", "w_v")]  # fmt: skip
        out |= {
            h + "ln_1.weight": p[pre + "norm1.gain"],
            h + "ln_1.bias": p[pre + "norm1.bias"],
            h + "attn.c_attn.weight": np.concatenate(qkv, axis=1),  # (D, 3D)
            h + "attn.c_attn.bias": np.zeros(3 * cfg["d_model"], model.params["embed"].dtype),
            h + "attn.c_proj.weight": p[pre + "w_o"],  # (h·e, D)
            h + "attn.c_proj.bias": np.zeros(cfg["d_model"], model.params["embed"].dtype),
            h + "ln_2.weight": p[pre + "norm2.gain"],
            h + "ln_2.bias": p[pre + "norm2.bias"],
            h + "mlp.c_fc.weight": p[pre + "mlp.w_in"],  # (D, F)
            h + "mlp.c_fc.bias": p[pre + "mlp.b_in"],
            h + "mlp.c_proj.weight": p[pre + "mlp.w_out"],  # (F, D)
            h + "mlp.c_proj.bias": p[pre + "mlp.b_out"],
        }
    out |= {"ln_f.weight": p["norm.gain"], "ln_f.bias": p["norm.bias"]}
    out["lm_head.weight"] = p["unembed"].T  # (V, D)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def _tokenizer(words: tuple[str, ...], unknown: str) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=unknown))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok.to_str()


def save_hugging_face(model, folder, words: tuple[str, ...], *, unknown: str = "<unk>",
                      bos: str = "<bos>", extra: dict | None = None) -> Path:  # fmt: skip
    """Write ``model`` (a causal ``TinyTransformer`` with ``mlp=True`` and learned positions)
    to ``folder`` as config.json, model.safetensors and tokenizer.json; ``words`` are the
    vocabulary in token-id order. ``extra`` goes into config.json under "attnlab"."""
    from safetensors.numpy import save_file

    cfg = model.config
    if not (cfg["mlp"] and cfg["positions"] == "learned" and cfg["causal"] and cfg["scaled"]):
        raise AttnlabError(
            "expected a causal, scaled TinyTransformer with mlp=True and learned positions "
            f"(GPT-2's block), but got {cfg}"
        )
    if len(words) != cfg["vocab_size"]:
        raise AttnlabError(
            f"expected {cfg['vocab_size']} words (the model's vocabulary), but got {len(words)}"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": cfg["vocab_size"],
        "n_positions": cfg["context"],
        "n_embd": cfg["d_model"],
        "n_layer": cfg["layers"],
        "n_head": cfg["heads"],
        "n_inner": 4 * cfg["d_model"],
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": False,
        "bos_token_id": words.index(bos),
        "eos_token_id": words.index(bos),
        "attnlab": extra or {},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    save_file(_gpt2_tensors(model), str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(_tokenizer(words, unknown), encoding="utf-8")
    return folder
