"""``load``: a model folder or a Hugging Face hub id, checked, bounded and built.

Shape legend: V vocabulary, L layers.

A path that is a folder is read as it is. Anything else that reads as a hub id ("org/name" or
"name") goes through ``huggingface_hub.snapshot_download`` for the files attnlab reads and no
others (config, safetensors weights and index, tokenizer files: never a pickle). With the
network off (``HF_HUB_OFFLINE=1``, or no connection) the answer comes from the Hugging Face
cache, or one AttnlabError says what to download and how.

The order of checks is the point: config.json (size, JSON depth, every value's type and range),
then the safetensors headers (declared bytes against memory, layer count against the tensors
there), and only then any table or tensor.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._checkpoint import (
    BUFFERS,
    COMPUTE_DTYPES,
    Checkpoint,
    read_config,
    tokenizer_file,
)
from attnlab.models._config import FAMILIES, Config, shown, unsupported_family
from attnlab.models._model import Model

__all__ = [
    "HUB_FILES",
    "check_dtype",
    "check_layers",
    "load",
    "open_folder",
    "read_folder",
    "resolve",
]

#: What a hub download fetches: everything ``load`` reads, and nothing that could run code.
HUB_FILES = [
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
]
#: A hub id: "name" or "org/name", each part letters, digits, "-", "_", "." (at most 96), not
#: starting or ending with "-" or ".", with no ".." or "--" (the hub's own rules).
_PART = r"(?!.*(?:\.\.|--))[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"{_PART}(?:/{_PART})?", re.ASCII)
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}", re.ASCII)
_LAYER_KEYS = ("n_layer", "num_hidden_layers", "num_layers")


def load(path, *, dtype: str = "float32", revision: str | None = None) -> Model:
    """The model in folder ``path``, or of Hugging Face hub id ``path`` ("org/name"), its
    weights converted once to ``dtype``.

    Args:
        path: a folder in Hugging Face's layout (config.json, model.safetensors or a sharded
            checkpoint, a tokenizer), or a hub id. A folder that exists wins over a hub id.
        revision: a hub id's branch, tag or commit (default: main); only with a hub id.
        dtype: "float32" (default) or "float64" (exact, for checking).

    Raises:
        AttnlabError naming the file and key: a folder of another model type, a missing or
        corrupt file, a config value out of range, a missing tensor or one of the wrong
        shape, an option attnlab cannot run (an unknown rotary schedule, say), a tensor the
        family does not read (the folder holds another kind of model), a checkpoint past half
        of this machine's memory, a hub id that is not one or not in the cache while offline.
        Nothing half-loaded is returned.
    """
    check_dtype(dtype)  # before a download, not after
    return open_folder(resolve(path, revision), dtype)


def check_dtype(dtype) -> None:
    if not isinstance(dtype, str) or dtype not in COMPUTE_DTYPES:
        raise AttnlabError(
            f"expected dtype to be one of {tuple(COMPUTE_DTYPES)}, but got {shown(dtype)} instead"
        )


def open_folder(folder: Path, dtype: str = "float32", progress=None) -> Model:
    """``load`` of a local folder; ``progress(done, total)`` is called after each tensor read."""
    check_dtype(dtype)
    folder, data, cfg, module = read_folder(folder)
    ck = Checkpoint(folder, COMPUTE_DTYPES[dtype])  # headers only: declared bytes bounded
    check_layers(cfg, module, ck)
    ck.progress = progress
    network = module.build(cfg, ck)
    ck.skip(*BUFFERS)  # older exports' masks and rotary tables: not weights
    ck.check_all_read(data["model_type"])  # a tensor nothing read: another model
    return Model(
        data["model_type"], data, folder, network, np.dtype(COMPUTE_DTYPES[dtype]),
        tokenizer_file(folder),
    )  # fmt: skip


def read_folder(path):
    """(folder, config.json's dict, its Config, the family's module) of model folder ``path``,
    after the checks that read no tensor: config.json, a family attnlab runs, and a config
    that describes a model of that family. An AttnlabError naming the file otherwise."""
    folder, _ = local(path)
    data = read_config(folder)
    cfg = Config(data, folder / "config.json")
    family = data.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        raise unsupported_family(cfg.path, family)
    module = importlib.import_module(f"attnlab.models.families.{family}")
    module.shape_of(cfg)  # a config that cannot describe a model fails before any tensor is read
    return folder, data, cfg, module


def check_layers(cfg: Config, module, ck: Checkpoint) -> None:
    """Refuse a layer count the checkpoint cannot hold: every layer has at least one tensor of
    its own, so more layers than tensors is a wrong config, refused before a family builds a
    name table of that length."""
    layers = module.shape_of(cfg).layers
    if layers > len(ck.where):
        key = next((k for k in _LAYER_KEYS if k in cfg.data), "num_hidden_layers")
        raise cfg._bad(key, f"at most {len(ck.where)} (the tensors its checkpoint holds)", layers)


def resolve(path, revision: str | None = None, tqdm_class=None) -> Path:
    """The local folder of ``path``: itself when it is a folder, else the hub id's snapshot
    (``tqdm_class``: the download's progress bars, huggingface_hub's own by default)."""
    if isinstance(path, Path) or (isinstance(path, str) and _looks_local(path)):
        folder, is_dir = local(path)
        if revision is not None:
            raise AttnlabError(
                f"expected revision only with a hub id, but got a folder path {shown(str(path), 300)}"
            )
        if not is_dir:
            raise AttnlabError(
                f"expected a model folder, but {shown(str(folder), 300)} is not a directory"
            )
        return folder
    if not isinstance(path, str):
        raise AttnlabError(
            f"expected path to be a folder or a hub id, but got {type(path).__name__} instead"
        )
    folder, is_dir = local(path)
    if is_dir:  # a folder that exists wins over a hub id
        return folder
    if not _HUB_ID.fullmatch(path):
        raise AttnlabError(
            "expected a model folder or a hub id like 'org/name' (letters, digits, '-', '_', "
            f"'.'), but got {shown(path)} instead"
        )
    if revision is not None and (
        not isinstance(revision, str) or not _REVISION.fullmatch(revision)
    ):
        raise AttnlabError(
            f"expected revision to be a branch, tag or commit name, but got {shown(revision)} "
            "instead"
        )
    return _download(path, revision, tqdm_class)


def local(path) -> tuple[Path, bool]:
    """(``path`` with ~ expanded, whether it is a directory), or an AttnlabError when no file
    system could hold it (a NUL byte, a name too long, ~user of no such user)."""
    try:
        folder = Path(path).expanduser()
        return folder, folder.is_dir()
    except (OSError, ValueError, RuntimeError) as exc:
        raise AttnlabError(
            f"expected a model folder or a hub id, but {shown(str(path), 300)} can be neither "
            f"({type(exc).__name__}: {shown(str(exc), 80)})"
        ) from None


def _looks_local(path: str) -> bool:
    # An absolute path, ~, ./, ../ or a Windows drive is never a hub id; neither is an empty
    # string or one with more than one slash.
    return (
        not path
        or path.startswith(("/", "~", ".", "\\"))
        or re.match(r"[A-Za-z]:[\\/]", path) is not None
        or path.count("/") > 1
        or "\\" in path
    )


def _offline() -> bool:
    # Read at each call (huggingface_hub reads it once, at import).
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _download(repo: str, revision: str | None, tqdm_class=None) -> Path:
    """The snapshot folder of hub id ``repo``, from the cache or downloaded."""
    from huggingface_hub import snapshot_download

    offline = _offline()
    how = (
        f"download it where there is a network with `hf download {repo}"
        + (f" --revision {revision}" if revision else "")
        + " --include 'config.json' '*.safetensors' '*.json' 'merges.txt'`, or pass its folder"
    )
    try:
        folder = snapshot_download(
            repo,
            revision=revision,
            cache_dir=os.environ.get("HF_HUB_CACHE") or None,
            local_files_only=offline,
            allow_patterns=HUB_FILES,
            tqdm_class=tqdm_class,
        )
    except Exception as exc:  # the hub's errors: not cached, not found, gated, no connection
        at = f" at revision {revision!r}" if revision else ""
        if offline:
            raise AttnlabError(
                f"expected the model {repo!r}{at} in the Hugging Face cache, but it is not there "
                f"and the network is off (HF_HUB_OFFLINE); {how}"
            ) from None
        detail = " ".join(str(exc).split())[:160] or "no detail"
        raise AttnlabError(
            f"expected the model {repo!r}{at} in the Hugging Face cache or on the hub, but it "
            f"is not available ({type(exc).__name__}: {detail}); {how}"
        ) from None
    return Path(folder)
