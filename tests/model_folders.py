"""Tiny random model folders of every family, for the loader's limit and fuzz tests.

``write_family(folder, config)`` writes config.json and a model.safetensors holding exactly the
tensors the family asks for: the family's own ``build`` is run once against a recording
checkpoint, which answers every ``get(name, shape)`` with random numbers and writes them down.
So a family added later gets a folder with no list of tensor names kept here.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from attnlab.models._config import Config

#: A small config of each family that loads (vocab 12, d_model 8, 2 layers).
BASE = {
    "gpt2": {"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 2, "n_positions": 16,
             "vocab_size": 12, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"},
    "llama": {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "num_hidden_layers": 2, "intermediate_size": 12,
              "vocab_size": 12, "rms_norm_eps": 1e-6, "rope_theta": 10000.0},
    "mistral": {"model_type": "mistral", "hidden_size": 8, "num_attention_heads": 2,
                "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 12,
                "vocab_size": 12, "sliding_window": 3, "rope_theta": 10000.0},
    "qwen2": {"model_type": "qwen2", "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "num_hidden_layers": 2, "intermediate_size": 12,
              "vocab_size": 12, "use_sliding_window": True, "sliding_window": 3,
              "max_window_layers": 1, "rope_theta": 10000.0},
    "gemma2": {"model_type": "gemma2", "hidden_size": 8, "num_attention_heads": 2,
               "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 2,
               "intermediate_size": 12, "vocab_size": 12, "sliding_window": 3,
               "query_pre_attn_scalar": 4, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "rope_theta": 10000.0},
    "gpt_oss": {"model_type": "gpt_oss", "hidden_size": 8, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 2,
                "intermediate_size": 6, "vocab_size": 12, "num_local_experts": 3,
                "num_experts_per_tok": 2, "sliding_window": 3, "rope_theta": 10000.0},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 8, "num_attention_heads": 2,
                 "num_hidden_layers": 2, "intermediate_size": 12, "vocab_size": 12,
                 "max_position_embeddings": 16, "rotary_pct": 0.5, "layer_norm_eps": 1e-5},
    "qwen3": {"model_type": "qwen3", "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 2,
              "intermediate_size": 12, "vocab_size": 12, "rope_theta": 10000.0},
    "gemma3_text": {"model_type": "gemma3_text", "hidden_size": 8, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 2,
                    "intermediate_size": 12, "vocab_size": 12, "sliding_window": 3,
                    "sliding_window_pattern": 2, "query_pre_attn_scalar": 4,
                    "rope_theta": 10000.0},
    "olmo2": {"model_type": "olmo2", "hidden_size": 8, "num_attention_heads": 2,
              "num_key_value_heads": 1, "num_hidden_layers": 2, "intermediate_size": 12,
              "vocab_size": 12, "rope_theta": 10000.0},
    "phi3": {"model_type": "phi3", "hidden_size": 8, "num_attention_heads": 2,
             "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 12,
             "vocab_size": 12, "max_position_embeddings": 16, "rope_theta": 10000.0},
    "llama4_text": {"model_type": "llama4_text", "hidden_size": 8, "num_attention_heads": 2,
                    "num_key_value_heads": 1, "head_dim": 4, "num_hidden_layers": 2,
                    "intermediate_size": 12, "intermediate_size_mlp": 12, "vocab_size": 12,
                    "num_local_experts": 2, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 2, "no_rope_layers": [1, 0],
                    "attention_chunk_size": 3, "rope_theta": 10000.0},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 8, "num_attention_heads": 2,
                    "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 12,
                    "moe_intermediate_size": 4, "n_shared_experts": 1, "n_routed_experts": 4,
                    "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2,
                    "first_k_dense_replace": 1, "kv_lora_rank": 4, "q_lora_rank": 4,
                    "qk_rope_head_dim": 2, "v_head_dim": 4, "qk_nope_head_dim": 2,
                    "vocab_size": 12, "max_position_embeddings": 16, "rope_theta": 10000.0},
    "bert": {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2,
             "num_hidden_layers": 2, "intermediate_size": 12, "vocab_size": 12,
             "max_position_embeddings": 16, "type_vocab_size": 2},
}  # fmt: skip


class _Recorder:
    """A checkpoint that makes up each tensor it is asked for and remembers it."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.tensors

    def __len__(self) -> int:
        return len(self.tensors)

    def skip_under(self, *prefixes: str) -> None:
        """Nothing to excuse: the recorder holds only what the family asked for."""

    def get(self, key: str, shape) -> np.ndarray:
        if key not in self.tensors:
            self.tensors[key] = (0.3 * self.rng.standard_normal(shape)).astype(np.float32)
        return self.tensors[key].astype(np.float64)


def write_family(folder: Path, config: dict, seed: int = 0) -> Path:
    """Write ``config`` and random weights of its family into ``folder``; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = Config(config, folder / "config.json")
    module = importlib.import_module(f"attnlab.models.families.{config['model_type']}")
    recorder = _Recorder(seed)
    module.build(cfg, recorder)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(recorder.tensors, str(folder / "model.safetensors"))
    return folder


def hostile_safetensors(path: Path, name: str, shape: tuple[int, ...], dtype: str = "F32"):
    """A safetensors file whose header declares one tensor of ``shape`` and whose data is a
    hole (a sparse file): as large on paper as the header says, nothing written."""
    item = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[dtype]
    nbytes = int(np.prod(shape, dtype=object)) * item
    header = json.dumps({name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, nbytes]}})
    header += " " * (-len(header) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as out:
        out.write(len(header).to_bytes(8, "little") + header.encode())
        out.truncate(8 + len(header) + nbytes)
    return path
