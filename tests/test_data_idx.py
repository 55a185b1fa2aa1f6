from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedleak.data import read_idx, write_idx
from fedleak.errors import ConfigError, DataError


def _sample(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=(3, 4, 5)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(3, 4, 5), endpoint=True).astype(dtype)


@pytest.mark.parametrize(
    "dtype", ["uint8", "int8", "int16", "int32", "float32", "float64"]
)
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_round_trip(tmp_path: Path, dtype: str, suffix: str) -> None:
    array = _sample(dtype)
    path = tmp_path / f"a-idx{suffix}"
    write_idx(path, array)
    is_gzip = path.read_bytes()[:2] == b"\x1f\x8b"
    assert is_gzip == (suffix == ".gz")
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype)
    assert back.dtype.isnative
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    back[0, 0, 0] = 0  # the result is a writeable array of its own


def test_big_endian_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "x"
    write_idx(path, np.array([1, 256], dtype=np.int32))
    data = path.read_bytes()
    assert data[:4] == bytes([0, 0, 0x0C, 1])
    assert struct.unpack(">I", data[4:8]) == (2,)
    assert data[8:] == b"\x00\x00\x00\x01\x00\x00\x01\x00"


def test_non_native_input_is_written_correctly(tmp_path: Path) -> None:
    array = np.arange(6, dtype=">f8").reshape(2, 3)
    write_idx(tmp_path / "x", array)
    np.testing.assert_array_equal(read_idx(tmp_path / "x"), array)


def test_gzip_detected_by_magic_not_suffix(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "train-images-idx3-ubyte"  # no .gz suffix
    write_idx(path, array, compress=True)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    np.testing.assert_array_equal(read_idx(path), array)


def test_compress_false_overrides_suffix(tmp_path: Path) -> None:
    path = tmp_path / "raw.gz"
    write_idx(path, np.zeros(3, np.uint8), compress=False)
    assert path.read_bytes()[:2] == b"\x00\x00"
    np.testing.assert_array_equal(read_idx(path), np.zeros(3, np.uint8))


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    write_idx(path, np.zeros((10, 10), np.uint8))
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(DataError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "truncated" in message
    assert "100" in message and "93" in message


def test_truncated_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    write_idx(path, np.arange(1000, dtype=np.int32))
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match=r"x\.gz"):
        read_idx(path)


def test_oversize_file(tmp_path: Path) -> None:
    path = tmp_path / "x"
    write_idx(path, np.zeros(4, np.int16))
    path.write_bytes(path.read_bytes() + b"\x00\x01")
    with pytest.raises(DataError, match=r"oversize.*8 data bytes.*10 data bytes"):
        read_idx(path)


def test_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"\x01\x00\x08\x01" + struct.pack(">I", 2) + b"\x00\x00")
    with pytest.raises(DataError, match="magic"):
        read_idx(path)


def test_bad_magic_inside_gzip(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(gzip.compress(b"not an idx file at all"))
    with pytest.raises(DataError, match="magic"):
        read_idx(path)


def test_unknown_type_code(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DataError, match="0x0A"):
        read_idx(path)


def test_truncated_header(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"\x00\x00\x08\x03\x00\x00")
    with pytest.raises(DataError, match="header"):
        read_idx(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        read_idx(tmp_path / "nope")


def test_unsupported_dtype_on_write(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="int64"):
        write_idx(tmp_path / "x", np.zeros(3, np.int64))
    assert not (tmp_path / "x").exists()
