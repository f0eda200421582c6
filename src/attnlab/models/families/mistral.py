"""Mistral: the Llama decoder whose every layer attends within a sliding window of
``sliding_window`` keys (each query sees itself and the window - 1 keys before it), as
``attnlab.masks.SlidingWindow(sliding_window)``; no window in config.json means causal.
"""

from __future__ import annotations

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Decoder
from attnlab.models.families import llama

__all__ = ["build", "shape_of"]

shape_of = llama.shape_of


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    window = cfg.get("sliding_window")
    window = None if window is None else cfg.int("sliding_window")
    layers = cfg.int("num_hidden_layers")
    return llama.decoder(cfg, ck, windows=[window] * layers, qkv_bias=False, out_bias=False)
