"""The ``Model`` that ``load`` returns: its shape, tokenizer and runs.

Shape legend: B batch, N tokens, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._config import Shape
from attnlab.models._run import ModelRun

__all__ = ["Model"]


@dataclass
class Model:
    """A loaded model.

    Attributes:
        architecture: config.json's ``model_type`` ("gpt2", "llama", ...).
        config: config.json as a dict.   path: the folder.
        shape: layers, d_model, heads, kv_heads, head_dim, vocab, max_positions.
        dtype: the compute dtype.   network: the family's weights and forward pass.
    """

    architecture: str
    config: dict
    path: Path
    network: object
    dtype: np.dtype
    tokenizer_path: Path | None

    @property
    def shape(self) -> Shape:
        return self.network.shape

    def _tokenizer(self):
        if self.tokenizer_path is None:
            raise AttnlabError(
                f"expected {self.path / 'tokenizer.json'} (or GPT-2's vocab.json and merges.txt) "
                "to turn text into ids, but the folder has none; pass token ids instead"
            )
        if not hasattr(self, "_tok"):
            from attnlab.models._checkpoint import open_tokenizer

            self._tok = open_tokenizer(self.tokenizer_path)
        return self._tok

    def tokenize(self, text: str) -> np.ndarray:
        """Token ids of ``text``, (N,), through tokenizer.json or GPT-2's vocab.json and
        merges.txt (special tokens as the tokenizer adds them)."""
        if not isinstance(text, str):
            raise AttnlabError(f"expected text to be a str, but got {type(text).__name__}")
        return np.asarray(self._tokenizer().encode(text).ids, dtype=np.int64)

    def tokens(self, ids) -> list[str]:
        """Each id's text, (N,) -> N strings, as one token decodes alone (its id in angle
        brackets where it decodes to nothing, so a BOS or padding token stays visible)."""
        flat = [int(i) for i in np.asarray(ids).reshape(-1)]
        if self.tokenizer_path is None:
            return [str(i) for i in flat]
        tok = self._tokenizer()
        out = []
        for i in flat:
            text = tok.decode([i], skip_special_tokens=False)
            out.append(text if text else tok.id_to_token(i) or f"<{i}>")
        return out

    def as_ids(self, ids_or_text) -> np.ndarray:
        """Checked token ids (B, N): text is tokenized, ids (N,) or (B, N) checked against the
        vocabulary and the model's learned positions."""
        if isinstance(ids_or_text, str):
            ids_or_text = self.tokenize(ids_or_text)
        return self._check_ids(ids_or_text)

    def detokenize(self, ids) -> str:
        """The text of token ids (N,), special tokens kept (as transformers' ``decode``)."""
        flat = [int(i) for i in np.asarray(ids).reshape(-1)]
        return self._tokenizer().decode(flat, skip_special_tokens=False)

    def run(
        self,
        ids_or_text,
        *,
        cache: bool = False,
        hooks=None,
        attention_mask=None,
        weights: bool = True,
        token_type_ids=None,
        mla=None,
    ) -> ModelRun:
        """Run token ids ``ids_or_text`` (N,) or (B, N).

        Args:
            cache: keep every named activation in ``run.cache`` (TransformerLens's names:
                ``blocks.0.hook_resid_pre``, ``blocks.0.attn.hook_z``, ...; docs/inside.md).
            hooks: {name: fn(value, name)}: fn returns the value to flow on (or None to keep
                it); any cache name can be hooked.
            attention_mask: (B, N) of 1 (real token) and 0 (padding), left or right, as
                transformers takes it: pad keys get weight 0. Positions stay 0 .. N - 1, as in
                transformers' plain forward.
            weights: keep every layer's attention weights as computed (default); without,
                ``run.attention`` computes them on first use.
            token_type_ids: an encoder's (BERT) segment of each token, (B, N); 0 by default.
            mla: a model with latent attention (DeepSeek-V3): "naive" (the default: each
                head's keys and values decompressed, as transformers computes) or "absorbed"
                (every head attends to the one latent cache, as FlashMLA computes).
        Another family refuses token_type_ids and mla.
        """
        from attnlab.models.inside._points import Pass, Points, names

        ids = self.as_ids(ids_or_text)
        keys = self._check_mask(attention_mask, ids.shape)
        given = {"token_type_ids": token_type_ids, "mla": mla}
        options = {k: v for k, v in given.items() if v is not None}
        takes = getattr(self.network, "options", ())
        for name in options:
            if name not in takes:
                raise AttnlabError(
                    f"expected no {name} for a {self.architecture} model (it takes "
                    f"{', '.join(takes) or 'neither token_type_ids nor mla'}), but got one"
                )
        valid = names(self.shape.layers, self.network.learned_positions) if hooks else ()
        points = Points(valid, cache=bool(cache), hooks=hooks)
        logits, layers = self.network.forward(ids, Pass(weights, points, keys, options=options))
        return ModelRun(
            ids=ids, logits=logits, layers=layers, cache=points.cache, model=self, keys=keys,
            hooks=points.hooks or None, output=getattr(self.network, "output", "next-token logits"),
        )  # fmt: skip

    def generate(
        self, ids_or_text, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
        top_p: float | None = None, seed: int | None = None, stop=None,
    ) -> np.ndarray:  # fmt: skip
        """(B, N + new) ids: the prompt ``ids_or_text`` (N,) or (B, N) followed by up to ``max_new_tokens`` new
        tokens, as transformers' ``generate`` returns them. temperature 0 (default) is greedy,
        equal to ``generate(do_sample=False)``; otherwise sampling with ``top_k`` / ``top_p``
        and ``seed``. ``stop``: a token id or ids that end a sequence. Each new token runs
        alone against a key/value cache (docs/inside.md)."""
        from attnlab.models.inside.generate import generate

        return generate(
            self, ids_or_text, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, stop=stop,
        )  # fmt: skip

    def stream(
        self, ids_or_text, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
        top_p: float | None = None, seed: int | None = None, stop=None,
    ):  # fmt: skip
        """``generate`` one step at a time: yields each step's new tokens (B,) as they come."""
        from attnlab.models.inside.generate import stream

        return stream(
            self, ids_or_text, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed, stop=stop,
        )  # fmt: skip

    def _check_mask(self, mask, shape) -> np.ndarray | None:
        """attention_mask as (B, N) bool, or None when it is None or all ones."""
        if mask is None:
            return None
        arr = np.asarray(mask)
        if arr.ndim == 1:
            arr = arr[None]  # (1, N)
        if arr.shape != shape or arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
            raise AttnlabError(
                f"expected attention_mask of 1 and 0 with the ids' shape {shape}, but got "
                f"shape {arr.shape} of dtype {arr.dtype} instead"
            )
        keys = arr.astype(bool)
        return None if keys.all() else keys

    def _check_ids(self, ids) -> np.ndarray:
        try:
            arr = np.asarray(ids)
        except ValueError as exc:
            raise AttnlabError(f"expected ids to be a rectangular array, but got {exc}") from None
        if arr.ndim == 1:
            arr = arr[None]  # (1, N)
        if arr.ndim != 2 or arr.shape[1] == 0 or arr.shape[0] == 0:
            raise AttnlabError(
                f"expected ids of shape (N,) or (B, N) with N >= 1, but got {arr.shape}"
            )
        if arr.dtype.kind not in "iu":
            raise AttnlabError(f"expected integer token ids, but got dtype {arr.dtype}")
        vocab, limit = self.shape.vocab, self.shape.max_positions
        if arr.min() < 0 or arr.max() >= vocab:
            raise AttnlabError(
                f"expected token ids in [0, {vocab}), but got {arr.min()}..{arr.max()}"
            )
        if limit is not None and arr.shape[1] > limit:
            raise AttnlabError(
                f"expected at most {limit} tokens (the model's learned positions), but got {arr.shape[1]}"
            )
        return arr.astype(np.int64, copy=False)
