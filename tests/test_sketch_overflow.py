"""Sketch counters refuse to wrap around: they raise, naming the cell."""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.errors import DataError
from fedleak.sketches import CountMinSketch, CountSketch

BIG = 2**62


@pytest.mark.parametrize("kind", [CountMinSketch, CountSketch])
def test_merging_two_large_counters_raises_instead_of_wrapping(kind) -> None:
    a = kind(2, 8, seed=1)
    a.update([5], BIG)
    b = a.copy()
    before = a.table.copy()
    with pytest.raises(DataError, match=r"counter overflow at row \d+, column \d+"):
        a.merge(b)
    np.testing.assert_array_equal(a.table, before)  # nothing changed


def test_update_that_would_wrap_raises_and_leaves_the_table() -> None:
    sketch = CountMinSketch(3, 16, seed=2)
    sketch.update([7], BIG)
    before = sketch.table.copy()
    with pytest.raises(DataError, match="counter overflow"):
        sketch.update([7, 7], BIG)
    np.testing.assert_array_equal(sketch.table, before)


def test_large_counts_that_fit_are_exact() -> None:
    sketch = CountMinSketch(3, 16, seed=2)
    sketch.update([7], BIG)
    sketch.update([7], BIG - 1)  # exactly 2**63 - 1: the largest counter
    assert sketch.estimate([7])[0] == 2**63 - 1
    merged = CountMinSketch(3, 16, seed=2)
    merged.update([7], -BIG)
    assert (sketch + merged).estimate([7])[0] == BIG - 1


def test_counts_beyond_64_bits_are_refused() -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    with pytest.raises(DataError, match="64 bits"):
        sketch.update([1], 2**63)
    with pytest.raises(DataError, match="64 bits"):
        sketch.update([1, 2], np.array([1, 2**63], dtype=np.uint64))


@pytest.mark.parametrize("value", [1e30, -1e30, 2.0**63])
def test_with_table_refuses_values_outside_int64(value: float) -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    table = np.zeros(sketch.size)
    table[9] = value
    with pytest.raises(DataError, match="row 1, column 1"):
        sketch.with_table(table)


def test_with_table_accepts_integral_floats_in_range() -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    table = np.arange(sketch.size, dtype=np.float64)
    np.testing.assert_array_equal(
        sketch.with_table(table).table.reshape(-1), np.arange(sketch.size)
    )
