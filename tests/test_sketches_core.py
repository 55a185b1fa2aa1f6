"""Count-Min and Count Sketch: Definition 7, linearity, unbiasedness, bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError, DataError
from fedleak.sketches import CountMinSketch, CountSketch


def zipf_stream(n: int, universe: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weights = np.arange(1, universe + 1, dtype=np.float64) ** -1.1
    return rng.choice(universe, size=n, p=weights / weights.sum())


def test_sizing_follows_definition_7_and_the_seed_settings() -> None:
    assert CountMinSketch.from_error(0.01, 0.01, n_items=245_000).size == 4896
    assert CountMinSketch.from_error(0.01, 0.01, n_items=100 * 100).size == 3808
    median = CountSketch.from_error(0.05, 0.05)
    assert (median.depth, median.width) == (3, 56)  # w = 55 rounded up to even
    with pytest.raises(ConfigError):
        CountSketch(3, 55)
    with pytest.raises(ConfigError):
        CountMinSketch.from_error(0.0, 0.1)


def test_count_min_never_underestimates_and_meets_its_bound() -> None:
    """Definition 7 over 40 seeded hash draws: c <= c_hat always, and the
    fraction of items with c_hat > c + eps ||c||_1 stays below delta."""
    stream = zipf_stream(20_000, 5_000, seed=1)
    truth = np.bincount(stream, minlength=5_000)
    items = np.arange(5_000)
    failures = []
    for seed in range(40):
        sketch = CountMinSketch.from_error(0.02, 0.1, seed=seed)
        sketch.update(stream)
        est = sketch.estimate(items)
        assert np.all(est >= truth)
        failures.append(np.mean(est > truth + sketch.epsilon * stream.size))
    assert float(np.mean(failures)) <= math.exp(-sketch.depth) <= 0.1


def test_count_sketch_is_unbiased() -> None:
    stream = zipf_stream(5_000, 500, seed=2)
    truth = np.bincount(stream, minlength=500)
    items = np.array([0, 3, 50, 499])
    estimates = []
    for seed in range(300):
        sketch = CountSketch(1, 32, seed=seed)
        sketch.update(stream)
        estimates.append(sketch.estimate(items))
    est = np.array(estimates)
    stderr = est.std(axis=0) / math.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - truth[items]) < 4 * stderr + 1e-9)


def test_count_sketch_row_estimates_use_paired_buckets() -> None:
    sketch = CountSketch(2, 8, seed=3)
    sketch.update([7, 7, 7])
    buckets = sketch.buckets(7)[:, 0]
    table = sketch.table
    for row, b in enumerate(buckets):
        assert table[row, b] == 3 and table[row, b ^ 1] == 0
    assert sketch.estimate_sum(7) == 6
    assert sketch.estimate(7) == 3.0


def test_range_coefficients_equal_summed_point_estimates() -> None:
    sketch = CountSketch(3, 20, seed=4)
    sketch.update(zipf_stream(2_000, 300, seed=4))
    coef = sketch.coefficients(np.arange(10, 140))
    assert int(np.sum(coef * sketch.table)) == int(
        sketch.estimate_sum(np.arange(10, 140)).sum()
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), max_size=60),
    st.lists(st.integers(0, 10_000), max_size=60),
    st.sampled_from([CountMinSketch, CountSketch]),
)
def test_sketch_of_a_union_is_the_sum_of_sketches(
    left: list[int], right: list[int], kind: type[CountMinSketch]
) -> None:
    a, b, both = kind(3, 16, seed=9), kind(3, 16, seed=9), kind(3, 16, seed=9)
    a.update(np.array(left, dtype=np.int64))
    b.update(np.array(right, dtype=np.int64))
    both.update(np.array(left + right, dtype=np.int64))
    assert a + b == both
    assert a.merge(b) == both


def test_batch_update_matches_item_by_item_with_weights() -> None:
    rng = np.random.default_rng(5)
    items = rng.integers(0, 1_000, 20_000)
    counts = rng.integers(0, 5, 20_000)
    batch, single = CountMinSketch(4, 50, seed=1), CountMinSketch(4, 50, seed=1)
    batch.update(items, counts)
    for item, count in zip(items[:300].tolist(), counts[:300].tolist(), strict=True):
        single.update(item, count)
    partial = CountMinSketch(4, 50, seed=1)
    partial.update(items[:300], counts[:300])
    assert partial == single
    assert batch.total == int(counts.sum())


def test_serialisation_round_trips_and_rejects_other_bytes() -> None:
    for kind in (CountMinSketch, CountSketch):
        sketch = kind(5, 42, seed=123)
        sketch.update(zipf_stream(3_000, 800, seed=6))
        again = kind.from_bytes(sketch.to_bytes())
        assert again == sketch
        assert np.array_equal(again.estimate([1, 2, 3]), sketch.estimate([1, 2, 3]))
    blob = CountMinSketch(2, 4).to_bytes()
    with pytest.raises(DataError):
        CountSketch.from_bytes(blob)
    with pytest.raises(DataError):
        CountMinSketch.from_bytes(blob[:-1])


def test_incompatible_merges_and_bad_items_fail_clearly() -> None:
    with pytest.raises(ConfigError, match="seed"):
        CountMinSketch(2, 8, seed=1).merge(CountMinSketch(2, 8, seed=2))
    sketch = CountMinSketch(2, 8)
    with pytest.raises(DataError, match="integers"):
        sketch.update([0.5])
    with pytest.raises(DataError, match="lie in"):
        sketch.update([-1])
    before = sketch.table.copy()
    with pytest.raises(DataError):
        sketch.update([1, 2], [1, 2, 3])
    assert np.array_equal(sketch.table, before)


def test_bounds_bracket_the_truth() -> None:
    stream = zipf_stream(10_000, 2_000, seed=7)
    truth = np.bincount(stream, minlength=2_000)
    sketch = CountMinSketch.from_error(0.01, 0.01, n_items=2_000, seed=7)
    sketch.update(stream)
    items = np.arange(2_000)
    assert np.all(sketch.lower_bound(items) <= truth)
    assert np.all(sketch.upper_bound(items) >= truth)
    cs = CountSketch(5, 200, seed=7)
    cs.update(stream)
    err = np.abs(cs.estimate(items) - truth)
    assert np.mean(err <= cs.error_bound(0.05)) >= 0.95


def test_count_mean_min_is_bounded_by_the_minimum_and_nearly_unbiased() -> None:
    stream = zipf_stream(50_000, 5_000, seed=8)
    truth = np.bincount(stream, minlength=5_000)
    sketch = CountMinSketch(7, 200, seed=8)
    sketch.update(stream)
    items = np.arange(5_000)
    plain = sketch.estimate(items)
    debiased = sketch.estimate_debiased(items)
    assert np.all(debiased <= plain) and np.all(debiased >= 0)
    rare = truth < 3
    assert np.mean(np.abs(debiased - truth)[rare]) < 0.2 * np.mean(
        np.abs(plain - truth)[rare]
    )
