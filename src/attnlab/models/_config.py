"""config.json read with errors that name the file and the key.

Shape legend: d_model hidden width, h query heads, h_kv key/value heads, d head width,
L layers, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import AttnlabError

__all__ = ["FAMILIES", "Config", "Shape", "unsupported_family"]

#: The config.json ``model_type`` values attnlab runs, each a module of ``attnlab.models``.
FAMILIES = (
    "gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss",
    "gpt_neox", "qwen3", "gemma3_text", "olmo2", "phi3", "llama4_text",
    "deepseek_v3", "bert",
)  # fmt: skip


def unsupported_family(path: Path, model_type) -> AttnlabError:
    return AttnlabError(
        f"expected config.json's 'model_type' in {path} to be one of {', '.join(FAMILIES)}, "
        f"but got {model_type!r} instead"
    )


@dataclass(frozen=True)
class Shape:
    """A model's sizes: L layers, d_model, h query heads, h_kv key/value heads, d per head,
    V vocabulary, and the longest input it takes (None: no learned limit)."""

    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int | None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class Config:
    """config.json's dict with typed reads: ``cfg.int("hidden_size")`` or an AttnlabError
    naming the file and key."""

    def __init__(self, data: dict, path: Path):
        self.data = data
        self.path = path

    def _bad(self, key: str, want: str, got) -> AttnlabError:
        return AttnlabError(
            f"expected {key!r} in {self.path} to be {want}, but got {got!r} instead"
        )

    def get(self, key: str, default=None):
        value = self.data.get(key)
        return default if value is None else value

    def int(self, key: str, default=None, low: int = 1) -> int:
        value = self.get(key, default)
        if value is None:
            raise AttnlabError(f"expected the key {key!r} in {self.path}, but it is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self._bad(key, f"an integer >= {low}", value)
        return value

    def number(self, key: str, default=None, positive: bool = True) -> float | None:
        value = self.get(key, default)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (positive and value <= 0)
        ):
            raise self._bad(key, "a number > 0" if positive else "a number", value)
        return float(value)

    def choice(self, key: str, allowed: tuple[str, ...], default=None) -> str:
        value = self.get(key, default)
        if value not in allowed:
            raise self._bad(key, f"one of {allowed} (what attnlab can run)", value)
        return value

    def layer_types(self, layers: int, default: list[str]) -> list[str]:
        """Each layer's 'full_attention' or 'sliding_attention' (``layer_types``, else
        ``default``)."""
        kinds = self.get("layer_types", default)
        ok = ("full_attention", "sliding_attention")
        if not isinstance(kinds, list) or len(kinds) != layers or any(k not in ok for k in kinds):
            raise self._bad("layer_types", f"a list of {layers} entries from {ok}", kinds)
        return kinds

    def heads(self) -> tuple[int, int, int]:
        """(h, h_kv, d): query heads, key/value heads (dividing h), and the head width."""
        heads = self.int("num_attention_heads")
        kv = self.int("num_key_value_heads", heads)
        if heads % kv:
            raise self._bad("num_key_value_heads", f"a divisor of num_attention_heads={heads}", kv)
        d_model = self.int("hidden_size")
        if self.get("head_dim") is None and d_model % heads:
            raise self._bad("num_attention_heads", f"a divisor of hidden_size={d_model}", heads)
        return heads, kv, self.int("head_dim", d_model // heads)
