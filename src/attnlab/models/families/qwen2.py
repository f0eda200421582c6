"""Qwen2: the Llama decoder with biases on the q, k and v projections (none on o), and a
sliding window on the layers ``layer_types`` marks "sliding_attention" (older configs: with
``use_sliding_window``, layers from ``max_window_layers`` on).
"""

from __future__ import annotations

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Decoder
from attnlab.models.families import llama

__all__ = ["build", "shape_of", "windows"]

shape_of = llama.shape_of


def windows(cfg: Config) -> list[int | None]:
    """Each layer's sliding window, or None where it attends causally."""
    layers = cfg.int("num_hidden_layers")
    sliding = cfg.get("use_sliding_window", False) and cfg.get("sliding_window") is not None
    first = cfg.int("max_window_layers", layers, low=0)
    default = [
        "sliding_attention" if sliding and i >= first else "full_attention" for i in range(layers)
    ]
    kinds = cfg.layer_types(layers, default)
    window = cfg.int("sliding_window") if "sliding_attention" in kinds else None
    return [window if kind == "sliding_attention" else None for kind in kinds]


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    return llama.decoder(cfg, ck, windows=windows(cfg), qkv_bias=True, out_bias=False)
