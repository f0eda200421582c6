"""Reading a case file: numpy's ``.npz`` or a ``.safetensors`` file, into a dict of arrays.

Both hold named arrays, which is all a case is: the tensors (q, k, v, out, ...) and the options
as small arrays under FlashAttention's names (``causal`` a bool, ``window_size`` two ints, ...).

- ``.safetensors`` is read with the ``safetensors`` package's numpy API, which returns bfloat16
  tensors as ``ml_dtypes.bfloat16`` arrays: the format PyTorch's bfloat16 tensors round-trip in
  (``safetensors.torch.save_file``).
- ``.npz`` is read without pickles. numpy has no bfloat16 of its own, so ``np.savez`` stores an
  ``ml_dtypes.bfloat16`` array as raw 2-byte records (dtype ``V2``); those are read back as
  bfloat16, the only 2-byte float numpy cannot name (float16 is stored as itself).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from attnlab.verifier._options import CaseError

__all__ = ["SUFFIXES", "read_case_file"]

SUFFIXES = (".npz", ".safetensors")


def read_case_file(path) -> dict[str, np.ndarray]:
    """The named arrays of a case file, or CaseError naming the file and what is wrong."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise CaseError(
            f"case: expected a .npz or .safetensors file, but got {str(path)!r} instead"
        )
    if not path.is_file():
        raise CaseError(f"case: cannot read {str(path)!r}: no such file")
    if suffix == ".npz":
        return _read_npz(path)
    return _read_safetensors(path)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    entries, name = {}, None
    try:
        with np.load(path, allow_pickle=False) as data:
            for name in data.files:
                entries[name] = data[name]
    except ValueError as exc:  # an entry numpy stored as a pickled object (None, a dict, ...)
        if "allow_pickle" in str(exc) and name is not None:
            raise CaseError(
                f"{name}: stored as a Python object (a pickle), which verify does not load; "
                "store numbers, or leave the entry out for FlashAttention's default"
            ) from None
        raise CaseError(f"case: cannot read {str(path)!r} as .npz ({_reason(exc)})") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise CaseError(f"case: cannot read {str(path)!r} as .npz ({_reason(exc)})") from None
    return {name: _bfloat16_from_void(name, arr) for name, arr in entries.items()}


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors asks for)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except (OSError, SafetensorError, ValueError) as exc:
        raise CaseError(
            f"case: cannot read {str(path)!r} as .safetensors ({_reason(exc)})"
        ) from None


def _bfloat16_from_void(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind != "V":
        return arr
    if arr.dtype.itemsize != 2 or arr.dtype.names is not None:
        raise CaseError(
            f"{name}: expected float64, float32, float16 or bfloat16, but got raw records of "
            f"{arr.dtype.itemsize} bytes ({arr.dtype}) instead"
        )
    import ml_dtypes

    return arr.view(ml_dtypes.bfloat16)


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
