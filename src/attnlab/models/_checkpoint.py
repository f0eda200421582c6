"""Reading a Hugging Face checkpoint folder: config.json and its safetensors files.

A folder holds ``config.json``, a tokenizer (tokenizer.json, or GPT-2's vocab.json and
merges.txt, read through the ``tokenizers`` library) and either ``model.safetensors`` or a sharded checkpoint
(``model.safetensors.index.json`` naming, for each tensor, the shard that holds it). Tensors are
read through safetensors' numpy API (which maps the file into memory) one at a time and
converted once to the compute dtype, so loading never holds a second copy of the weights: its
peak is the weights at that dtype plus one tensor as stored.

Before any tensor is read, the headers' declared sizes are summed at the compute dtype and a
checkpoint past half of this machine's memory is refused (``memory_bytes``), naming its largest
tensor; config.json and the shard index are refused past a few MB without being read whole.

Every tensor of the folder must be read by the family that builds the model: a tensor no
family module reads (a Qwen3 folder whose config.json says "llama", say) is refused by name,
since running without it would compute another model. Buffers a checkpoint may carry that are
not weights (``BUFFERS``: a rotary table, a causal-mask table) are neither read, bounded nor
refused.

Every problem is one ``AttnlabError`` naming the file and, where there is one, the key.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, as safetensors returns it)
import numpy as np

from attnlab.errors import AttnlabError

__all__ = [
    "BUFFERS",
    "COMPUTE_DTYPES",
    "Checkpoint",
    "memory_bytes",
    "open_tokenizer",
    "read_config",
    "read_json",
    "tokenizer_file",
]

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
#: config.json is a few KB in every real model; the largest shard indexes (hundreds of
#: thousands of tensors, DeepSeek-V3's ~90,000 at ~9 MB) stay well under their bound.
MAX_CONFIG_BYTES = 4 * 2**20
MAX_INDEX_BYTES = 64 * 2**20


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        pass
    try:  # Windows: GlobalMemoryStatusEx
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong)] + [
                (name, ctypes.c_ulonglong)
                for name in ("total", "free", "page", "page_free", "virt", "virt_free", "ext")
            ]

        status = _Status()
        status.length = ctypes.sizeof(_Status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return int(status.total)
    except (AttributeError, OSError):
        pass
    return None


def read_json(path: Path, limit: int, what: str):
    """The JSON in ``path``, refused past ``limit`` bytes before reading it, and refused (not
    raised) when it is not UTF-8 JSON, nests too deep for the parser, or holds an integer past
    Python's digit limit."""
    size = path.stat().st_size
    if size > limit:
        raise AttnlabError(
            f"expected {path} to be at most {limit // 2**20} MB ({what}), but it is "
            f"{size / 2**20:.1f} MB instead"
        )
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError:
        raise AttnlabError(
            f"expected {path} to hold JSON nested a few levels deep, but it nests too deep to read"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError and the int digit limit
        raise AttnlabError(
            f"expected {path} to hold JSON, but reading it failed: {str(exc)[:200]}"
        ) from None


def read_config(folder: Path) -> dict:
    """config.json of ``folder`` as a dict."""
    path = folder / "config.json"
    if not folder.is_dir():
        raise AttnlabError(f"expected a model folder, but {folder} is not a directory")
    if not path.is_file():
        raise AttnlabError(f"expected {path} (a Hugging Face model folder), but it is missing")
    config = read_json(path, MAX_CONFIG_BYTES, "a model's config")
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
        self.sizes: dict[str, tuple[int, ...]] = {}  # tensor name -> declared shape
        self.progress = None  # progress(done, total) after each tensor read, for a bar
        self.done = 0
        self.where = self._locate()  # tensor name -> shard file
        self.read: set[str] = set()  # the names ``get`` has handed out, or ``skip`` excused
        self._bound()

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

    def _bound(self) -> None:
        """Refuse a checkpoint whose tensors, at the compute dtype, pass half of this machine's
        memory: loading holds them all, and the rest (runs, the OS) needs the other half."""
        total = memory_bytes()
        if total is None or not self.sizes:
            return
        item = self.dtype.itemsize
        need = {key: math.prod(shape) * item for key, shape in self.sizes.items()}
        declared = sum(need.values())
        if declared > total // 2:
            largest = max(need, key=need.get)
            raise AttnlabError(
                f"expected a checkpoint that fits in half of this machine's memory "
                f"({total / 2**30 / 2:.1f} GiB), but got {declared / 2**30:.1f} GiB at "
                f"{self.dtype} declared by the tensors in {self.folder} instead; the largest is "
                f"{largest!r} of shape {self.sizes[largest]} ({need[largest] / 2**30:.1f} GiB)"
            )

    def _locate(self) -> dict[str, Path]:
        index = self.folder / INDEX
        if index.is_file():
            data = read_json(index, MAX_INDEX_BYTES, "a shard index")
            try:
                where = {str(k): self.folder / str(v) for k, v in data["weight_map"].items()}
            except (KeyError, TypeError, AttributeError):
                raise AttnlabError(
                    f"expected {index} to hold a JSON object with a 'weight_map', but it does not"
                ) from None
            if any(
                Path(v).name != v or v in ("", ".", "..")
                for v in map(str, data["weight_map"].values())
            ):
                raise AttnlabError(
                    f"expected {index}'s 'weight_map' to name files inside {self.folder}, but "
                    "it names a path"
                )
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
                part = f.get_slice(key)
                stored = part.get_dtype()
                if key.endswith(BUFFERS):  # not a weight: any dtype, never read nor bounded
                    continue
                self.sizes[key] = tuple(int(x) for x in part.get_shape())
                if stored not in STORED:
                    raise AttnlabError(
                        f"expected tensor {key!r} in {file} to be stored as one of "
                        f"{sorted(STORED)}, but it is {stored} (a quantised checkpoint?)"
                    )
        return keys

    def __contains__(self, key: str) -> bool:
        return key in self.where

    def __len__(self) -> int:
        """The number of tensors the folder holds (buffers included)."""
        return len(self.where)

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
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.sizes))
        if not np.isfinite(out).all():
            raise AttnlabError(
                f"expected finite numbers in tensor {key!r} of {file}, but got NaN or inf"
            )
        return out


def tokenizer_file(folder: Path) -> Path | None:
    """tokenizer.json, else GPT-2's vocab.json (with merges.txt beside it), else None."""
    for name in ("tokenizer.json", "vocab.json"):
        path = folder / name
        if path.is_file() and (name == "tokenizer.json" or (folder / "merges.txt").is_file()):
            return path
    return None


def open_tokenizer(path: Path):
    """The ``tokenizers.Tokenizer`` of ``path``: tokenizer.json as written, or vocab.json +
    merges.txt as GPT-2's byte-level BPE (its regex split, no prefix space, no added BOS, and
    ``<|endoftext|>`` kept whole as GPT-2's tokenizer keeps it)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    try:
        if path.name == "tokenizer.json":
            return Tokenizer.from_file(str(path))
        vocab = read_json(path, 64 * 2**20, "a tokenizer's vocabulary")
        if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
            raise AttnlabError(
                f"expected {path} to hold a JSON object of token -> id, but it does not"
            )
        tok = Tokenizer(BPE.from_file(str(path), str(path.with_name("merges.txt"))))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        if "<|endoftext|>" in vocab:
            tok.add_special_tokens(["<|endoftext|>"])
        return tok
    except AttnlabError:
        raise
    except Exception as exc:  # tokenizers raises its own Exception type on a bad file
        raise AttnlabError(f"cannot read the tokenizer {path}: {str(exc)[:200]}") from None
