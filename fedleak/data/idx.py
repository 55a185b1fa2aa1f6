"""Reader and writer for the IDX file format of MNIST and Fashion-MNIST.

An IDX file is a small header followed by the raw array data:

- two zero bytes;
- one byte naming the element type (``0x08`` unsigned byte, ``0x09`` signed
  byte, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64;
  all multi-byte types are big-endian);
- one byte giving the number of dimensions ``ndim``;
- ``ndim`` big-endian unsigned 32-bit sizes;
- ``prod(sizes)`` elements in C order.

The files are often distributed gzip-compressed. :func:`read_idx` recognises
compression by the gzip magic bytes ``1f 8b``, not by the file name.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError

__all__ = ["read_idx", "write_idx"]

_GZIP_MAGIC = b"\x1f\x8b"

# IDX type code -> big-endian dtype stored in the file.
_CODE_TO_DTYPE: dict[int, np.dtype[np.generic]] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

# numpy kind + item size -> IDX type code, for writing.
_KIND_SIZE_TO_CODE: dict[tuple[str, int], int] = {
    ("u", 1): 0x08,
    ("i", 1): 0x09,
    ("i", 2): 0x0B,
    ("i", 4): 0x0C,
    ("f", 4): 0x0D,
    ("f", 8): 0x0E,
}

_SUPPORTED = "uint8, int8, int16, int32, float32, float64"


def _read_bytes(path: Path) -> bytes:
    """Return the (decompressed) content of ``path``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"IDX file {path} does not exist.") from None
    except OSError as exc:
        raise DataError(f"cannot read IDX file {path}: {exc}") from exc
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(
            f"IDX file {path} starts like a gzip file but cannot be decompressed "
            f"({exc}); the download is probably incomplete: fetch the file again."
        ) from exc


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file, gzip-compressed or raw.

    Parameters
    ----------
    path : str or pathlib.Path
        The file to read. Compression is detected from the gzip magic bytes,
        so a compressed file need not end in ``.gz``.

    Returns
    -------
    numpy.ndarray
        A new, writeable, native-endian array with the shape stored in the
        file header.

    Raises
    ------
    DataError
        If the file is missing, cannot be decompressed, has a bad magic
        number or an unknown type code, or holds more or fewer data bytes
        than its header announces.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DataError(
            f"IDX file {path} is too short ({len(data)} bytes) to hold an IDX "
            "header of at least 4 bytes; the file is truncated or not an IDX file."
        )
    if data[0] != 0 or data[1] != 0:
        raise DataError(
            f"IDX file {path} has a bad magic number: expected two zero bytes, "
            f"found {data[:2].hex(' ')}; the file is not an IDX file."
        )
    code, ndim = data[2], data[3]
    if code not in _CODE_TO_DTYPE:
        known = ", ".join(f"0x{c:02X}" for c in _CODE_TO_DTYPE)
        raise DataError(
            f"IDX file {path} has unknown type code 0x{code:02X}; "
            f"known codes are {known}."
        )
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise DataError(
            f"IDX file {path} is truncated inside its header: expected "
            f"{header_size} header bytes for {ndim} dimensions, "
            f"found {len(data)} bytes."
        )
    dims = struct.unpack(f">{ndim}I", data[4:header_size])
    dtype = _CODE_TO_DTYPE[code]
    expected = math.prod(dims) * dtype.itemsize
    actual = len(data) - header_size
    if actual != expected:
        problem = "truncated" if actual < expected else "oversize"
        raise DataError(
            f"IDX file {path} is {problem}: its header announces shape "
            f"{tuple(dims)} of {dtype.name} ({expected} data bytes) but the "
            f"file holds {actual} data bytes; fetch the file again."
        )
    array = np.frombuffer(data, dtype=dtype, count=math.prod(dims), offset=header_size)
    return array.reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(
    path: str | Path, array: np.ndarray, *, compress: bool | None = None
) -> None:
    """Write an array as an IDX file.

    Parameters
    ----------
    path : str or pathlib.Path
        The file to write (overwritten if it exists).
    array : numpy.ndarray
        The array to store. Its dtype must be one IDX can hold: uint8, int8,
        int16, int32, float32 or float64 (any byte order).
    compress : bool or None, optional
        Whether to gzip the file. ``None`` (the default) compresses when
        ``path`` ends in ``.gz``.

    Raises
    ------
    ConfigError
        If the dtype cannot be stored in IDX, or the array has more than 255
        dimensions or a dimension of 2**32 or more.
    """
    path = Path(path)
    arr = np.asarray(array)
    code = _KIND_SIZE_TO_CODE.get((arr.dtype.kind, arr.dtype.itemsize))
    if code is None:
        raise ConfigError(
            f"cannot write dtype {arr.dtype} to IDX; supported dtypes are "
            f"{_SUPPORTED}: cast the array first (e.g. array.astype(np.int32))."
        )
    if arr.ndim > 255:
        raise ConfigError(f"IDX holds at most 255 dimensions, got {arr.ndim}.")
    if any(d >= 2**32 for d in arr.shape):
        raise ConfigError(f"IDX dimensions must be below 2**32, got {arr.shape}.")
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    body = np.ascontiguousarray(arr, dtype=_CODE_TO_DTYPE[code]).tobytes()
    payload = header + body
    if compress is None:
        compress = path.name.endswith(".gz")
    if compress:
        payload = gzip.compress(payload, mtime=0)
    path.write_bytes(payload)
