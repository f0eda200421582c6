"""Reading a Hugging Face checkpoint folder: config.json and its safetensors files.

A folder holds ``config.json`` and either ``model.safetensors`` or a sharded checkpoint
(``model.safetensors.index.json`` naming, for each tensor, the shard that holds it). Tensors are
read through safetensors' numpy API (which maps the file into memory) one at a time and
converted once to the compute dtype, so loading never holds a second copy of the weights: its
peak is the weights at that dtype plus one tensor as stored.

Every tensor of the folder must be read by the family that builds the model: a tensor no
family module reads (a Qwen3 folder whose config.json says "llama", say) is refused by name,
since running without it would compute another model. Buffers a checkpoint may carry that are
not weights (``BUFFERS``: a rotary table, a causal-mask table) are neither read nor refused.

Every problem is one ``AttnlabError`` naming the file and, where there is one, the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, as safetensors returns it)
import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["BUFFERS", "COMPUTE_DTYPES", "Checkpoint", "read_config"]

#: The dtypes a model computes in (numpy has no fast bfloat16 or float16 arithmetic).
COMPUTE_DTYPES = {"float32": np.float32, "float64": np.float64}
#: The dtypes a checkpoint may store its weights in.
STORED = {"F32", "F16", "BF16", "F64"}
#: Name endings of buffers older exports saved beside the weights: causal-mask tables (bool in
#: Pythia's), their fill value, rotary frequencies, BERT's position ids (int64). They are not
#: weights: never read, any dtype.
BUFFERS = (
    ".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias",
    ".rotary_emb.inv_freq", "embeddings.position_ids",
)  # fmt: skip
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def read_config(folder: Path) -> dict:
    """config.json of ``folder`` as a dict."""
    path = folder / "config.json"
    if not folder.is_dir():
        raise AttnlabError(f"expected a model folder, but {folder} is not a directory")
    if not path.is_file():
        raise AttnlabError(f"expected {path} (a Hugging Face model folder), but it is missing")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AttnlabError(f"expected {path} to hold JSON, but reading it failed: {exc}") from None
    if not isinstance(config, dict):
        raise AttnlabError(
            f"expected {path} to hold a JSON object, but got {type(config).__name__}"
        )
    return config


class Checkpoint:
    """The tensors of one folder, by name, each read once and converted to ``dtype``.

    Args:
        folder: the model folder.
        dtype: numpy dtype to convert every tensor to (float32 or float64).
    """

    def __init__(self, folder: Path, dtype):
        self.folder = folder
        self.dtype = np.dtype(dtype)
        self.where = self._locate()  # tensor name -> shard file
        self.read: set[str] = set()  # the names ``get`` has handed out, or ``skip`` excused

    def skip(self, *suffixes: str) -> None:
        """Count the tensors whose names end in one of ``suffixes`` as read: buffers that are
        not weights (older exports save ``rotary_emb.inv_freq``, say)."""
        self.read.update(k for k in self.where if k.endswith(suffixes))

    def skip_under(self, *prefixes: str) -> None:
        """Count the tensors whose names start with one of ``prefixes`` as read: weights the
        run does not use and transformers ignores too (DeepSeek-V3's next-token layers)."""
        self.read.update(k for k in self.where if k.startswith(prefixes))

    def check_all_read(self, family: str) -> None:
        """An AttnlabError naming the first tensor ``family`` never read, if there is one."""
        unread = sorted(set(self.where) - self.read)
        if unread:
            more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
            raise AttnlabError(
                f"expected every tensor in {self.folder} to be one the {family!r} family reads, "
                f"but got {unread[0]!r}{more} instead: is config.json's 'model_type' right?"
            )

    def _locate(self) -> dict[str, Path]:
        index = self.folder / INDEX
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                where = {str(k): self.folder / str(v) for k, v in weight_map.items()}
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise AttnlabError(
                    f"expected {index} to hold a JSON object with a 'weight_map', but it does not"
                ) from None
            files = set(where.values())
        elif (self.folder / SINGLE).is_file():
            files = {self.folder / SINGLE}
            where = {}
        else:
            raise AttnlabError(
                f"expected {self.folder / SINGLE} or {index}, but the folder has neither"
            )
        for file in sorted(files):  # every file's header is checked before any tensor is read
            for key in self._keys(file):
                where.setdefault(key, file)
        return where

    @staticmethod
    def _open(file: Path):
        from safetensors import SafetensorError, safe_open

        if not file.is_file():
            raise AttnlabError(f"expected the checkpoint file {file}, but it is missing")
        try:
            return safe_open(file, framework="numpy")
        except (SafetensorError, OSError) as exc:
            raise AttnlabError(
                f"cannot read the checkpoint file {file}: it is truncated or corrupt ({exc})"
            ) from None

    def _keys(self, file: Path) -> list[str]:
        with self._open(file) as f:
            keys = list(f.keys())
            for key in keys:
                stored = f.get_slice(key).get_dtype()
                if stored not in STORED and not key.endswith(BUFFERS):
                    raise AttnlabError(
                        f"expected tensor {key!r} in {file} to be stored as one of "
                        f"{sorted(STORED)}, but it is {stored} (a quantised checkpoint?)"
                    )
        return keys

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def get(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``key`` as a ``dtype`` array of ``shape``; an AttnlabError naming the file
        and key when it is missing, has another shape, or cannot be read."""
        file = self.where.get(key)
        if file is None:
            shown = self.folder / INDEX if (self.folder / INDEX).is_file() else self.folder / SINGLE
            raise AttnlabError(f"expected tensor {key!r} in {shown}, but it is missing")
        from safetensors import SafetensorError

        try:
            with self._open(file) as f:
                stored = f.get_tensor(key)
        except (SafetensorError, OSError, ValueError) as exc:
            raise AttnlabError(
                f"cannot read tensor {key!r} from {file}: it is truncated or corrupt ({exc})"
            ) from None
        if tuple(stored.shape) != tuple(shape):
            raise AttnlabError(
                f"expected tensor {key!r} in {file} of shape {tuple(shape)} (from config.json), "
                f"but got {tuple(stored.shape)} instead"
            )
        self.read.add(key)
        out = stored.astype(self.dtype, copy=False)  # converted once; the stored copy is freed
        if not np.isfinite(out).all():
            raise AttnlabError(
                f"expected finite numbers in tensor {key!r} of {file}, but got NaN or inf"
            )
        return out
