"""Reading a case file: numpy's ``.npz`` or a ``.safetensors`` file, into a dict of arrays.

Both hold named arrays, which is all a case is: the tensors (q, k, v, out, ...) and the options
as small arrays under FlashAttention's names (``causal`` a bool, ``window_size`` two ints, ...).

A case file comes from elsewhere, so nothing in it is believed before it is checked, and every
size is checked before a byte of data is read:

- ``.npz``: each member must be a ``.npy`` array; its header (``numpy.lib.format``) declares a
  dtype and shape, whose bytes must be what the zip directory says the member inflates to, and
  all members together must fit ``max_bytes``. Data is then read into an array of exactly the
  declared size: a member that inflates past it, or stops short, is refused. No pickles.
- ``.safetensors``: the JSON header's declared dtypes, shapes and byte spans must agree with
  each other and lie inside the file, and fit ``max_bytes``, before the ``safetensors``
  package reads the data (its numpy API returns bfloat16 as ``ml_dtypes.bfloat16``).

numpy has no bfloat16 of its own, so ``np.savez`` stores an ``ml_dtypes.bfloat16`` array as raw
2-byte records (dtype ``V2``); those are read back as bfloat16, the only 2-byte float numpy
cannot name (float16 is stored as itself). 1-byte records are float8 (``float8_e4m3fn``), read
back as their bytes (uint8) for an FP8 case's ``fp8_format`` to name. A ``.safetensors`` file
with F8_E4M3 or F8_E5M2 tensors is read from its checked byte spans, since the
``safetensors`` package's numpy API cannot make float8 arrays.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from attnlab.verifier._options import CaseError

__all__ = ["DEFAULT_MAX_BYTES", "SUFFIXES", "read_case_file"]

SUFFIXES = (".npz", ".safetensors")

#: Bytes of array data a case file may declare, all arrays together (``max_bytes=``).
DEFAULT_MAX_BYTES = 2 * 2**30

_CHUNK = 1 << 24  # bytes inflated at a time


def read_case_file(path, max_bytes=None) -> dict[str, np.ndarray]:
    """The named arrays of a case file, or CaseError naming the file and what is wrong.

    ``max_bytes`` (default 2 GiB) bounds the array data the file may declare; a file past it
    is refused from its headers, before any data is read."""
    path = Path(path)
    budget = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise CaseError(
            f"case: expected a .npz or .safetensors file, but got {str(path)!r} instead"
        )
    if not path.is_file():
        raise CaseError(f"case: cannot read {str(path)!r}: no such file")
    if suffix == ".npz":
        return _read_npz(path, budget)
    return _read_safetensors(path, budget)


def _size(n: int) -> str:
    for unit, step in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= step:
            return f"{n / step:.3g} {unit}"
    return f"{n} bytes"


def _over_budget(path: Path, total: int, budget: int) -> CaseError:
    return CaseError(
        f"case: {str(path)!r} declares {_size(total)} of arrays, past the {_size(budget)} "
        "a case may take (--max-bytes to allow more)"
    )


def _npz_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo):
    """(name, shape, dtype, header bytes) of one member, from its first bytes only."""
    if not info.filename.endswith(".npy"):
        raise CaseError(f"{info.filename}: not a .npy array; a case .npz holds only arrays")
    name = info.filename[:-4]
    with zf.open(info) as f:
        try:
            version = npy.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npy.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = npy.read_array_header_2_0(f)
            else:
                raise ValueError(f"npy format version {version}")
        except (ValueError, EOFError, SyntaxError, TypeError) as exc:
            raise CaseError(f"{name}: not a readable .npy header ({_reason(exc)})") from None
        start = f.tell()
    if dtype.hasobject:
        raise CaseError(
            f"{name}: stored as a Python object (a pickle), which verify does not load; "
            "store numbers, or leave the entry out for FlashAttention's default"
        )
    nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if start + nbytes != info.file_size:
        raise CaseError(
            f"{name}: its header declares shape {shape} of {dtype} ({_size(nbytes)}), but the "
            f"zip directory says the member holds {_size(max(info.file_size - start, 0))}"
        )
    return name, shape, fortran, dtype, start


def _npz_data(zf, info, shape, fortran, dtype, start) -> np.ndarray:
    """The member's data, read into an array of its declared size and no further."""
    arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    view = memoryview(arr.reshape(-1, order="A").view(np.uint8))
    name = info.filename[:-4]
    with zf.open(info) as f:
        f.read(start)
        done = 0
        while done < len(view):
            got = f.readinto(view[done : done + _CHUNK])
            if not got:
                raise CaseError(f"{name}: the member ends before its declared {_size(len(view))}")
            done += got
        if f.read(1):
            raise CaseError(f"{name}: the member holds more than its declared {_size(len(view))}")
    return arr


def _read_npz(path: Path, budget: int) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [info for info in zf.infolist() if not info.is_dir()]
            members = [_npz_header(zf, info) for info in infos]
            total = sum(math.prod(m[1]) * m[3].itemsize for m in members)
            if total > budget:
                raise _over_budget(path, total, budget)
            entries = {
                m[0]: _npz_data(zf, info, *m[1:]) for m, info in zip(members, infos, strict=True)
            }
    except CaseError:
        raise
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise CaseError(f"case: cannot read {str(path)!r} as .npz ({_reason(exc)})") from None
    return {name: _bfloat16_from_void(name, arr) for name, arr in entries.items()}


_ST_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2}
_ST_ITEMSIZE.update({"I8": 1, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1})
_ST_ITEMSIZE.update({"F8_E4M3": 1, "F8_E5M2": 1})  # FP8 cases (verifier/_fp8.py)
_ST_FP8 = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _safetensors_header(path: Path, budget: int) -> dict:
    """Check the declared spans of a .safetensors file against each other, the file and the
    budget, reading only its header."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CaseError(f"case: cannot read {str(path)!r} as .safetensors (no header)")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, 100 * 2**20):
            raise CaseError(
                f"case: {str(path)!r} declares a {_size(length)} header in a file of {_size(size)}"
            )
        try:
            header = json.loads(f.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CaseError(f"case: {str(path)!r} has no JSON header ({_reason(exc)})") from None
    if not isinstance(header, dict):
        raise CaseError(f"case: {str(path)!r} has no JSON header of named tensors")
    data, total = size - 8 - length, 0
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = spec["dtype"], spec["shape"], spec["data_offsets"]
            nbytes = math.prod(int(s) for s in shape) * _ST_ITEMSIZE.get(dtype, 0)
        except (KeyError, TypeError, ValueError):
            raise CaseError(f"{name}: not a tensor entry in the .safetensors header") from None
        if dtype not in _ST_ITEMSIZE:
            raise CaseError(
                f"{name}: expected float64, float32, float16, bfloat16, float8, an integer or "
                f"a bool, but got {dtype} instead"
            )
        if not (0 <= begin <= end <= data) or end - begin != nbytes:
            raise CaseError(
                f"{name}: its header declares shape {tuple(shape)} of {dtype} ({_size(nbytes)}) "
                f"at bytes {begin}..{end}, but the file holds {_size(data)} of data"
            )
        total += nbytes
    if total > budget:
        raise _over_budget(path, total, budget)
    return header | {"__data_start__": 8 + length}


def _read_safetensors(path: Path, budget: int) -> dict[str, np.ndarray]:
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors asks for)
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        header = _safetensors_header(path, budget)
        if any(spec.get("dtype") in _ST_FP8 for spec in _tensors(header)):
            return _read_with_fp8(path, header)  # safetensors' numpy API has no float8
        return dict(load_file(str(path)))
    except CaseError:
        raise
    except (OSError, SafetensorError, ValueError) as exc:
        raise CaseError(
            f"case: cannot read {str(path)!r} as .safetensors ({_reason(exc)})"
        ) from None


def _tensors(header: dict):
    return (spec for name, spec in header.items() if not name.startswith("__"))


def _read_with_fp8(path: Path, header: dict) -> dict[str, np.ndarray]:
    """Every tensor of a checked header read from its byte span (float8 ones as ml_dtypes')."""
    import ml_dtypes

    kinds = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
    kinds.update({"I16": "<i2", "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4"})
    kinds.update({"U64": "<u8", "BOOL": "?", "BF16": ml_dtypes.bfloat16})
    kinds.update({k: getattr(ml_dtypes, v) for k, v in _ST_FP8.items()})
    start, found = header["__data_start__"], {}
    with path.open("rb") as f:
        for name, spec in header.items():
            if name.startswith("__"):
                continue
            begin, end = spec["data_offsets"]
            f.seek(start + begin)
            raw = f.read(end - begin)
            found[name] = np.frombuffer(raw, kinds[spec["dtype"]]).reshape(spec["shape"]).copy()
    return found


def _bfloat16_from_void(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind != "V":
        return arr
    if arr.dtype.itemsize == 1 and arr.dtype.names is None:
        return arr.view(np.uint8)  # float8 records, which the case's fp8_format names
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
