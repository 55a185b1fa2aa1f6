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


def _message(row: int, column: int, value: int) -> str:
    return (
        rf"^counter overflow at row {row}, column {column}: {value} does not fit in "
        r"a 64-bit counter; the sketch is left unchanged$"
    )


def _holding(value: int, item: int = 7) -> CountMinSketch:
    """A Count-Min sketch (depth 3, width 16, seed 2) whose item's counters
    (columns 0, 12, 13 of rows 0, 1, 2 for item 7) hold ``value``."""
    sketch = CountMinSketch(3, 16, seed=2)
    for part in (value // 2, value - value // 2):
        sketch.update([item], part)
    return sketch


def test_merges_reach_both_ends_of_int64_exactly() -> None:
    """2**62 + (2**62 - 1) = 2**63 - 1 and -2**62 - 2**62 = -2**63 fit; one
    more in either direction does not, and the message names the first cell
    in row-major order with the exact sum."""
    top = _holding(BIG).merge(_holding(BIG - 1))
    np.testing.assert_array_equal(top.table[[0, 1, 2], [0, 12, 13]], [2**63 - 1] * 3)
    assert top.table.dtype == np.int64
    bottom = _holding(-BIG).merge(_holding(-BIG))
    np.testing.assert_array_equal(bottom.table[[0, 1, 2], [0, 12, 13]], [-(2**63)] * 3)
    with pytest.raises(DataError, match=_message(0, 0, 2**63)):
        _holding(BIG).merge(_holding(BIG))
    with pytest.raises(DataError, match=_message(0, 0, -(2**63) - 1)):
        _holding(-BIG).merge(_holding(-BIG - 1))
    # the other counters of the merged tables are added exactly too
    mixed = _holding(BIG).merge(_holding(BIG - 1, item=5))
    assert mixed.table[1, 3] == BIG - 1 and mixed.table[1, 12] == BIG
    assert mixed.table[0, 0] == 2 * BIG - 1  # item 5 and 7 share row 0, column 0


@pytest.mark.parametrize("order", ["table first", "increment first"])
def test_a_counter_at_the_int64_minimum_is_not_mistaken_for_a_small_one(
    order: str,
) -> None:
    """|-2**63| does not exist in int64: the bound is taken in float64, so
    -2**63 + (-1) is caught rather than wrapped to 2**63 - 1."""
    low, minus_one = _holding(-(2**63)), _holding(-1)
    a, b = (low, minus_one) if order == "table first" else (minus_one, low)
    with pytest.raises(DataError, match=_message(0, 0, -(2**63) - 1)):
        a.merge(b)


def test_an_update_past_the_limit_names_the_cell_and_the_sum() -> None:
    sketch = _holding(BIG)
    with pytest.raises(DataError, match=_message(0, 0, 2 * BIG + BIG // 2)):
        sketch.update([7], BIG + BIG // 2)  # one count for one item, exact path
    with pytest.raises(DataError, match=_message(0, 0, BIG + 2 * (BIG - 1))):
        sketch.update(np.array([7, 7]), np.array([BIG - 1, BIG - 1]))
    np.testing.assert_array_equal(sketch.table, _holding(BIG).table)
    # in range, the exact path adds repeated items and per-item counts
    sketch.update(np.array([7, 5, 7]), np.array([3, 10, -4]))
    assert sketch.table[0, 0] == BIG + 3 + 10 - 4
    assert sketch.table[1, 3] == 10 and sketch.table[2, 13] == BIG - 1
    sketch.update([5, 5], 2)
    assert sketch.table[1, 3] == 14 and sketch.table.dtype == np.int64


def test_with_table_names_the_cell_of_a_value_outside_int64() -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    table = np.zeros(sketch.size, dtype=np.uint64)
    table[11] = np.uint64(2**63)
    with pytest.raises(DataError, match=_message(1, 3, 2**63)):
        sketch.with_table(table)
    table[11] = np.uint64(2**63 - 1)
    assert sketch.with_table(table).table[1, 3] == 2**63 - 1
    floats = np.zeros(sketch.size)
    floats[5] = -(2.0**64)
    with pytest.raises(DataError, match=_message(0, 5, -(2**64))):
        sketch.with_table(floats)
    floats[5] = -(2.0**63)  # the minimum itself fits
    assert sketch.with_table(floats).table[0, 5] == -(2**63)


def test_counts_at_both_int64_ends_are_accepted_and_exact() -> None:
    for count in (2**63 - 1, -(2**63)):
        sketch = CountMinSketch(3, 16, seed=2)
        sketch.update([7], count)
        assert sketch.table[0, 0] == count
    sketch = CountMinSketch(3, 16, seed=2)
    sketch.update([7], np.array([2**63 - 1], dtype=np.uint64))
    assert sketch.table[0, 0] == 2**63 - 1
    # a per-item count beyond float64's 53 bits stays exact
    sketch = CountMinSketch(3, 16, seed=2)
    sketch.update([7, 5], np.array([2**53 + 1, 1]))
    assert sketch.table[1, 12] == 2**53 + 1
    # small unsigned counts and an empty update are fine
    sketch.update([5, 5], np.array([1, 2], dtype=np.uint64))
    assert sketch.table[1, 3] == 4
    sketch.update(np.array([], dtype=np.int64), np.array([], dtype=np.uint64))
    assert sketch.table[1, 3] == 4


@pytest.mark.parametrize(
    "counts", [2**63, -(2**63) - 1, np.array([3, 2**63], dtype=np.uint64)]
)
def test_a_count_outside_int64_is_named(counts: object) -> None:
    value = 2**63 if not isinstance(counts, int) or counts > 0 else -(2**63) - 1
    items = [1, 2] if isinstance(counts, np.ndarray) else [1]
    with pytest.raises(
        DataError, match=rf"^a count must fit in 64 bits, got {value}\.$"
    ):
        CountMinSketch(2, 8, seed=0).update(items, counts)  # type: ignore[arg-type]


def test_per_item_counts_whose_sum_passes_2_63_are_caught() -> None:
    """Two per-item counts of 2**62 on one item: their sum is taken in float64,
    so the update goes the exact way and refuses the 2**63 counter."""
    with pytest.raises(DataError, match=_message(0, 0, 2**63)):
        CountMinSketch(3, 16, seed=2).update([7, 7], np.array([BIG, BIG]))


def test_an_update_below_a_counter_at_the_minimum_is_caught() -> None:
    sketch = _holding(-(2**63))
    with pytest.raises(DataError, match=_message(0, 0, -(2**63) - 1)):
        sketch.update([7], -1)
    with pytest.raises(DataError, match=_message(0, 0, -(2**63) - 1)):
        sketch.update([7], np.array([-1]))


def test_with_table_refuses_booleans_and_text_and_accepts_large_floats() -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    with pytest.raises(
        DataError, match=r"^a sketch table must hold integers, got bool\.$"
    ):
        sketch.with_table(np.ones(16, dtype=bool))
    with pytest.raises(
        DataError, match=r"^a sketch table must hold integers, got <U1\.$"
    ):
        sketch.with_table(np.array(["a"] * 16))
    floats = np.zeros(16)
    floats[3] = 1e18
    assert sketch.with_table(floats).table[0, 3] == 10**18


def test_one_count_for_repeated_items_is_summed_exactly() -> None:
    """Two items in the same cells with one count of 2**62 each: 2**63 in
    exact integers (no int64 wrap-around to -2**63 on the way)."""
    with pytest.raises(DataError, match=_message(0, 0, 2**63)):
        CountMinSketch(3, 16, seed=2).update([7, 7], BIG)


@pytest.mark.parametrize(
    ("dtype", "value"), [(np.float64, 2.0**64), (np.uint64, np.uint64(2**63))]
)
def test_a_two_dimensional_table_names_the_cell_too(dtype: type, value: object) -> None:
    sketch = CountMinSketch(2, 8, seed=0)
    table = np.zeros((2, 8), dtype=dtype)
    table[1, 3] = value
    with pytest.raises(DataError, match=_message(1, 3, int(value))):  # type: ignore[call-overload]
        sketch.with_table(table)
