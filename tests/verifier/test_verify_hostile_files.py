"""Hostile case files: refused with one line and exit code 2 from their headers, before any
array data is inflated or read.

Each file is built here by hand: a .npy header declaring more than the member holds, a member
that is not an array, a small zip of deflated zeros declaring far more than a case may take,
and a .safetensors header whose spans do not fit the file.
"""

from __future__ import annotations

import io
import json
import struct
import time
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from numpy.lib import format as npy
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import _load, read_case_file
from attnlab.verifier._load import DEFAULT_MAX_BYTES
from verify_reference import inputs, reference


def run(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def one_error_line(result, *words):
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_reading(monkeypatch):
    """Fail the test if any array data is read: refusals must come from the headers."""

    def refuse(*args, **kwargs):
        raise AssertionError("array data was read before the refusal")

    monkeypatch.setattr(_load, "_npz_data", refuse)


def _npy_header(shape, descr="<f8") -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    npy.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _good_entries():
    q, k, v = inputs(np.random.default_rng(0))
    return {"q": q, "k": k, "v": v, "out": reference(q, k, v)["out"].astype(np.float32)}


def _zip(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_a_header_declaring_a_trillion_entries_is_one_line(tmp_path, no_reading):
    path = tmp_path / "huge.npz"
    _zip(path, {"q.npy": _npy_header((10**12,)) + b"\0" * 8})
    one_error_line(run(path), "q:", "(1000000000000,)")


def test_a_member_that_is_not_an_array_is_one_line(tmp_path, no_reading):
    path = tmp_path / "readme.npz"
    _zip(path, {"README.txt": b"this case was dumped by a kernel test\n"})
    one_error_line(run(path), "README.txt", "not a .npy")


def test_deflated_zeros_past_the_budget_are_refused_before_inflating(tmp_path, no_reading):
    path = tmp_path / "bomb.npz"
    zeros = _npy_header((2**22,)) + bytes(8 * 2**22)  # 32 MiB of zeros
    _zip(path, {"q.npy": zeros}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 2**20  # deflated to well under a MiB
    one_error_line(run(path, "--max-bytes", 2**20), "32 MiB", "--max-bytes")
    # The default budget refuses 2 GiB of zeros the same way, from the zip directory.
    assert DEFAULT_MAX_BYTES <= 2 * 2**30


def test_a_member_shorter_than_its_header_is_refused(tmp_path):
    path = tmp_path / "short.npz"
    _zip(path, {"q.npy": _npy_header((100,)) + b"\0" * 80})  # 10 of 100 float64s
    one_error_line(run(path), "q:", "(100,)")


def test_a_file_inside_the_budget_still_reads(tmp_path):
    path = tmp_path / "good.npz"
    entries = _good_entries()
    np.savez_compressed(path, **entries)
    got = read_case_file(path)
    assert all(np.array_equal(got[n], entries[n]) for n in entries)
    assert run(path).exit_code == 0


def _safetensors(path, header: dict, data: bytes):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def test_safetensors_sizes_past_the_file_are_one_line(tmp_path):
    path = tmp_path / "huge.safetensors"
    header = {"q": {"dtype": "F32", "shape": [10**6], "data_offsets": [0, 4 * 10**6]}}
    _safetensors(path, header, b"\0" * 16)
    one_error_line(run(path), "q:", "(1000000,)")


def test_safetensors_header_longer_than_the_file_is_one_line(tmp_path):
    path = tmp_path / "header.safetensors"
    path.write_bytes(struct.pack("<Q", 10**15) + b"{}")
    one_error_line(run(path), "header")


def test_safetensors_past_the_budget_is_one_line(tmp_path):
    path = tmp_path / "big.safetensors"
    n = 2**18
    header = {"q": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}
    _safetensors(path, header, bytes(4 * n))
    one_error_line(run(path, "--max-bytes", 2**10), "--max-bytes")


def _deflated_zeros(path, data_bytes: int, chunk: int = 2**24) -> None:
    """A valid .npz of one float64 array of zeros, ``data_bytes`` long, written without
    compressing it all: one deflated chunk of zeros (full flush: each copy decodes alone)
    repeated, the CRC computed over the zeros. 2 GiB comes to a 2 MB file in about 2 s."""
    header = _npy_header((data_bytes // 8,))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(chunk)
    body = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    data = head + body * (data_bytes // chunk) + c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(header)
    for _ in range(data_bytes // chunk):
        crc = zlib.crc32(zeros, crc)
    size, name = len(header) + data_bytes, b"q.npy"
    sizes = (0x21, crc, len(data), size, len(name))  # date, CRC, compressed, inflated, name
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, *sizes, 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, *sizes, 0, 0, 0,
                          0, 0, 0) + name  # fmt: skip
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    path.write_bytes(local + data + central + end)


def test_two_gib_of_deflated_zeros_is_refused_in_seconds_and_little_memory(tmp_path):
    path = tmp_path / "bomb.npz"
    _deflated_zeros(path, 2 * 2**30)
    assert path.stat().st_size < 3 * 2**20
    with zipfile.ZipFile(path) as zf:  # a real zip: the directory reads, the member is there
        assert zf.infolist()[0].file_size > 2 * 2**30
    for args in ((), ("--max-bytes", 4 * 2**30)):  # past the budget; inside it, a bomb still
        tracemalloc.start()
        start = time.perf_counter()
        line = one_error_line(run(path, *args), "bomb.npz")
        took = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert took < 10 and peak < 600 * 2**20, (took, peak, line)
    assert "times smaller" in line and "np.savez" in line


def test_a_directory_that_understates_a_member_is_refused(tmp_path):
    path = tmp_path / "liar.npz"
    zeros = _npy_header((2**20,)) + bytes(8 * 2**20)  # 8 MiB of zeros, deflated to ~8 KiB
    _zip(path, {"q.npy": zeros}, zipfile.ZIP_DEFLATED)
    blob = bytearray(path.read_bytes())
    real = struct.pack("<I", len(zeros))
    small = struct.pack("<I", 200)  # the directory now says the member inflates to 200 bytes
    assert blob.count(real) == 2  # the local header's and the central directory's
    path.write_bytes(bytes(blob).replace(real, small))
    one_error_line(run(path), "q.npy", "understates")
