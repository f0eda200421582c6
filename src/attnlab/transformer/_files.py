"""A ``TinyTransformer``'s file: an .npz archive (numpy's zip of .npy arrays), written
atomically and read with every part checked before a model is built.

    config        a 0-d text array: the constructor's arguments as a JSON object
    <parameter>   one real float array per parameter (``_config.shapes`` names them), finite
                  in the model's dtype (1e300 in a float64 file is inf in a float32 model)
    other names   ignored by ``read`` (a lab keeps its training snapshots there)

``read`` turns each way a file can be wrong (missing, a folder, not a zip, not an npz, a config
that is not a JSON object, an unknown or missing argument, a weight that is complex, text,
object or not finite) into one ``AttnlabError`` naming the file and the entry.
"""

from __future__ import annotations

import inspect
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from attnlab._atomic import write_atomic
from attnlab.errors import AttnlabError

__all__ = ["CONFIG_KEY", "checked_config", "checked_weight", "read", "shown", "write"]

CONFIG_KEY = "config"


def shown(path) -> str:
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else repr(path)
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _path(path) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise AttnlabError(f"expected path to be a file name, but got {path!r} instead")
    if "\x00" in os.fspath(path):
        raise AttnlabError(f"expected a path without a NUL character, but got {shown(path)}")
    path = Path(path)
    if path.is_dir():
        raise AttnlabError(f"expected a model file, but {shown(path)} is a folder")
    if not path.is_file():
        raise AttnlabError(f"expected a model file, but {shown(path)} does not exist")
    return path


def checked_config(config, where: str, arguments) -> dict:
    """``config`` as keyword arguments for the constructor whose ``arguments`` (an
    ``inspect.Signature``) it must match: a dict with every required key and no other."""
    if not isinstance(config, dict):
        raise AttnlabError(f"expected the config of {where} to be a JSON object, but got "
                           f"{type(config).__name__} {str(config)[:60]} instead")  # fmt: skip
    known = {n for n, p in arguments.parameters.items() if p.kind is p.KEYWORD_ONLY}
    required = {n for n in known if arguments.parameters[n].default is inspect.Parameter.empty}
    unknown, missing = sorted(set(config) - known), sorted(required - set(config))
    if unknown:
        raise AttnlabError(f"expected the config of {where} to hold only {sorted(known)}, but "
                           f"it has {unknown}")  # fmt: skip
    if missing:
        raise AttnlabError(f"expected the config of {where} to give {missing}, but it does not")
    defaults = {n: arguments.parameters[n].default for n in known - required}
    return defaults | config


def checked_weight(name: str, array, dtype, where: str) -> np.ndarray:
    """``array`` as the model's ``dtype``, or an error naming ``name`` when it is not a real,
    finite float array there."""
    array = np.asarray(array)
    if array.dtype.kind != "f":
        raise AttnlabError(f"expected parameter {name} in {where} to be real floats, but got "
                           f"dtype {array.dtype}")  # fmt: skip
    with np.errstate(over="ignore"):
        cast = array.astype(dtype)
    bad = ~np.isfinite(cast)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AttnlabError(f"expected finite {np.dtype(dtype).name} values in parameter {name} "
                           f"of {where}, but got {float(array[at])!r} at index {at}")  # fmt: skip
    return cast


def _entry(data, name: str, where: str) -> np.ndarray:
    try:
        value = data[name]
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        # object arrays need pickle, which is never allowed; a damaged member fails its read
        raise AttnlabError(f"expected entry {name!r} of {where} to be a numeric array, but it "
                           f"cannot be read without pickle or is damaged ({exc})") from None  # fmt: skip
    if not isinstance(value, np.ndarray):  # a zip member that is not an .npy comes as bytes
        raise AttnlabError(f"expected entry {name!r} of {where} to be an .npy array, but it "
                           "is not one")  # fmt: skip
    return value


def read(path, arguments, names) -> tuple[dict, dict]:
    """(config, name -> array) from a file ``write`` wrote, every failure an AttnlabError.

    ``names(config)`` checks the configuration (its values, the memory it needs) and gives
    the parameters to read: nothing else in the file is read, and nothing before that check.
    """
    path = _path(path)
    where = shown(path)
    try:
        with open(path, "rb") as handle:  # ours to close, whatever np.load makes of it
            return _read_open(handle, where, arguments, names)
    except OSError as exc:  # unreadable: permissions, an I/O error
        raise AttnlabError(f"expected a readable model file, but {where} cannot be read "
                           f"({exc.strerror or exc})") from None  # fmt: skip


def _read_open(handle, where: str, arguments, names) -> tuple[dict, dict]:
    try:
        data = np.load(handle, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise AttnlabError(f"expected a model file written by TinyTransformer.save, but "
                           f"{where} is not one ({exc})") from None  # fmt: skip
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise AttnlabError(f"expected an .npz archive in {where}, but it holds one array")
    with data:
        if CONFIG_KEY not in data.files:
            raise AttnlabError(f"expected a '{CONFIG_KEY}' entry in {where}, but found only "
                               f"{sorted(data.files)[:8]}")  # fmt: skip
        text = _entry(data, CONFIG_KEY, where)
        config = _parsed(text, where, arguments)
        wanted = set(names(config)) & set(data.files)  # the parameters, once config is sound
        arrays = {name: _entry(data, name, where) for name in sorted(wanted)}
    return config, arrays


def _parsed(text: np.ndarray, where: str, arguments) -> dict:
    if text.dtype.kind != "U" or text.ndim:
        raise AttnlabError(f"expected the config of {where} to be JSON text, but it is a "
                           f"{text.dtype} array of shape {text.shape}")  # fmt: skip
    try:
        config = json.loads(str(text))
    except ValueError as exc:
        raise AttnlabError(f"expected the config of {where} to be JSON, but it is not "
                           f"({exc})") from None  # fmt: skip
    return checked_config(config, where, arguments)


def write(path, entries: dict[str, np.ndarray], *, force: bool = True) -> None:
    """``entries`` as an .npz at ``path``, atomically; OSError/FileExistsError as
    ``_atomic.write_atomic`` raises them."""
    if not isinstance(path, str | os.PathLike) or "\x00" in os.fspath(path):
        raise AttnlabError(f"expected path to be a file name, but got {path!r} instead")
    write_atomic(path, lambda out: np.savez(out, **entries), force=force)
