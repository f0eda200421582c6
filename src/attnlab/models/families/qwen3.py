"""Qwen3: the Qwen2 decoder with an RMSNorm on each head's q and k (over the head's d numbers,
one weight per family of heads) before the rotary embedding, no bias by default
(``attention_bias`` puts one on all four projections), and a head width ``head_dim`` that
need not be hidden_size / heads. Sliding windows as Qwen2's: on the layers ``layer_types``
marks, else (with ``use_sliding_window``) from layer ``max_window_layers`` on.

Shape legend: d_model hidden width, h query heads, h_kv key/value heads, d head width.

Tensor names: Llama's, with model.layers.{i}.self_attn.{q_norm, k_norm}.weight (d,).
"""

from __future__ import annotations

from attnlab.models._checkpoint import Checkpoint
from attnlab.models._config import Config
from attnlab.models._decoder import Decoder
from attnlab.models.families import llama, qwen2

__all__ = ["build", "shape_of"]

shape_of = llama.shape_of


def build(cfg: Config, ck: Checkpoint) -> Decoder:
    bias = bool(cfg.get("attention_bias", False))
    return llama.decoder(
        cfg, ck, windows=qwen2.windows(cfg), qkv_bias=bias, out_bias=bias, qk_norm=True
    )
