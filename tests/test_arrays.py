"""numpy arrays into Flower Arrays without numpy.save (fedleak.arrays)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from flwr.app import Array

from fedleak.arrays import array_fields, npy_bytes
from fedleak.training import read_npy


def _saved(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


CASES = {
    "float32 matrix": np.arange(12, dtype=np.float32).reshape(3, 4),
    "0-d": np.array(3.5),
    "empty": np.zeros((0, 3)),
    "bool": np.array([True, False, True]),
    "big-endian": np.arange(5, dtype=">f4"),
    "float16": np.arange(6, dtype=np.float16),
    "datetime": np.array(["2020-01-01", "2021-02-03"], dtype="datetime64[D]"),
    "strings": np.array(["ab", "c"]),
    "complex": np.full((2, 2), 1 + 2j, dtype=np.complex64),
    "fortran order": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "strided": np.arange(10.0)[::2],
    "conv weight": np.random.default_rng(0).normal(size=(32, 1, 3, 3)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_npy_bytes_are_what_numpy_save_writes(name: str) -> None:
    value = CASES[name]
    assert npy_bytes(value) == _saved(value)
    again = npy_bytes(value)  # the cached header gives the same bytes
    assert again == _saved(value)


@pytest.mark.parametrize("name", list(CASES))
def test_array_fields_build_flowers_array(name: str) -> None:
    value = CASES[name]
    ours, flowers = Array(**array_fields(value)), Array(value)
    assert (ours.dtype, ours.shape, ours.stype, ours.data) == (
        flowers.dtype,
        flowers.shape,
        flowers.stype,
        flowers.data,
    )
    np.testing.assert_array_equal(ours.numpy(), value)


def test_the_header_depends_on_dtype_and_shape_not_on_values() -> None:
    a = np.zeros((4, 5), np.float32)
    b = np.full((4, 5), 7.0, np.float32)
    c = np.zeros((5, 4), np.float32)
    assert npy_bytes(a)[:-80] == npy_bytes(b)[:-80]
    assert npy_bytes(a) != npy_bytes(b)
    assert npy_bytes(c) == _saved(c) and npy_bytes(c)[:-80] != npy_bytes(a)[:-80]
    view = read_npy(npy_bytes(b), "float32", (4, 5))
    assert view is not None
    np.testing.assert_array_equal(view, b)


def test_object_arrays_are_refused_as_numpy_save_refuses_them() -> None:
    with pytest.raises(ValueError, match="allow_pickle=False"):
        npy_bytes(np.array([object(), 1], dtype=object))


def test_a_plain_array_is_written_without_numpy_save_once_its_header_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    expected, other = _saved(value), _saved(value + 1)
    assert npy_bytes(value) == expected  # caches the header of this dtype/shape

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("numpy.save called for a plain C-ordered array")

    monkeypatch.setattr(np, "save", refuse)
    assert npy_bytes(value) == expected
    assert npy_bytes(value + 1) == other
    with pytest.raises(AssertionError, match=r"numpy\.save called"):
        npy_bytes(np.asfortranarray(np.ones((2, 3))))  # not C-ordered: numpy.save
