from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.data import (
    partition_dirichlet,
    partition_iid,
    partition_property,
    partition_sizes,
)
from fedleak.errors import ConfigError, DataError


def assert_disjoint_cover(parts: list[np.ndarray], n: int) -> None:
    for p in parts:
        assert p.dtype == np.int64
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
    joined = np.concatenate(parts)
    assert joined.size == n
    np.testing.assert_array_equal(np.sort(joined), np.arange(n))


def assert_disjoint(parts: list[np.ndarray]) -> None:
    joined = np.concatenate(parts)
    assert np.unique(joined).size == joined.size


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x, y) for x, y in zip(a, b, strict=True)
    )


def labels_for(n: int, num_classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_classes, n)


# ------------------------------------------------------------------------ iid


def test_iid_sizes_and_cover() -> None:
    parts = partition_iid(103, 10, seed=0)
    assert len(parts) == 10
    sizes = partition_sizes(parts)
    assert sum(sizes) == 103
    assert max(sizes) - min(sizes) <= 1
    assert_disjoint_cover(parts, 103)


def test_iid_determinism() -> None:
    assert same(partition_iid(100, 4, 7), partition_iid(100, 4, 7))
    assert not same(partition_iid(100, 4, 7), partition_iid(100, 4, 8))
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert same(partition_iid(50, 3, g1), partition_iid(50, 3, g2))


def test_iid_is_shuffled() -> None:
    parts = partition_iid(1000, 2, seed=0)
    assert not np.array_equal(parts[0], np.arange(500))


def test_iid_bad_args() -> None:
    with pytest.raises(ConfigError):
        partition_iid(10, 0, seed=0)
    with pytest.raises(ConfigError):
        partition_iid(-1, 2, seed=0)
    with pytest.raises(ConfigError):
        partition_iid(10, 2.5, seed=0)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="3 records into 5"):
        partition_iid(3, 5, seed=0)


@settings(max_examples=50, deadline=None)
@given(
    k=st.integers(1, 12),
    extra=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_iid_invariants(k: int, extra: int, seed: int) -> None:
    n = k + extra
    parts = partition_iid(n, k, seed)
    assert len(parts) == k
    assert_disjoint_cover(parts, n)
    sizes = partition_sizes(parts)
    assert max(sizes) - min(sizes) <= 1


# ------------------------------------------------------------------ dirichlet


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(0, 300),
    k=st.integers(1, 10),
    num_classes=st.integers(1, 6),
    alpha=st.floats(0.05, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_invariants(
    n: int, k: int, num_classes: int, alpha: float, seed: int
) -> None:
    labels = labels_for(n, num_classes, seed=seed % 1000)
    parts = partition_dirichlet(labels, k, alpha, seed, min_partition_size=0)
    assert len(parts) == k
    assert_disjoint_cover(parts, n)


def test_dirichlet_min_size_and_determinism() -> None:
    labels = labels_for(1000)
    parts = partition_dirichlet(labels, 10, 0.5, seed=1, min_partition_size=20)
    assert min(partition_sizes(parts)) >= 20
    assert_disjoint_cover(parts, 1000)
    assert same(parts, partition_dirichlet(labels, 10, 0.5, 1, min_partition_size=20))
    assert not same(
        parts, partition_dirichlet(labels, 10, 0.5, 2, min_partition_size=20)
    )


def _mean_label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    entropies = []
    for p in parts:
        counts = np.bincount(labels[p], minlength=10).astype(float)
        probs = counts[counts > 0] / counts.sum()
        entropies.append(float(-(probs * np.log(probs)).sum()))
    return float(np.mean(entropies))


def test_small_alpha_is_more_skewed() -> None:
    labels = labels_for(5000)
    skewed = partition_dirichlet(labels, 10, 0.1, seed=0)
    near_iid = partition_dirichlet(labels, 10, 100.0, seed=0)
    h_skewed = _mean_label_entropy(labels, skewed)
    h_iid = _mean_label_entropy(labels, near_iid)
    assert h_iid > 0.95 * np.log(10)
    assert h_skewed < 0.7 * h_iid


def test_dirichlet_impossible_min_size() -> None:
    labels = labels_for(50)
    with pytest.raises(DataError, match="50 records"):
        partition_dirichlet(labels, 10, 1.0, seed=0, min_partition_size=6)


def test_dirichlet_gives_up_after_retries() -> None:
    # One class, tiny alpha: nearly all records land in one partition.
    labels = np.zeros(100, dtype=np.int64)
    with pytest.raises(DataError, match="max_retries"):
        partition_dirichlet(
            labels, 5, 0.001, seed=0, min_partition_size=15, max_retries=3
        )


def test_dirichlet_bad_args() -> None:
    labels = labels_for(100)
    for alpha in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="alpha"):
            partition_dirichlet(labels, 5, alpha, seed=0)
    with pytest.raises(ConfigError):
        partition_dirichlet(labels, 0, 1.0, seed=0)
    with pytest.raises(ConfigError):
        partition_dirichlet(labels.reshape(10, 10), 5, 1.0, seed=0)
    with pytest.raises(ConfigError):
        partition_dirichlet(labels, 5, 1.0, seed=0, max_retries=-1)


# ------------------------------------------------------------------- property


def test_property_split_fractions_exact() -> None:
    has = np.zeros(1000, dtype=bool)
    has[np.random.default_rng(0).permutation(1000)[:300]] = True
    parts = partition_property(
        has,
        5,
        target=2,
        target_fraction=0.5,
        others_fraction=0.1,
        partition_size=100,
        seed=0,
    )
    assert partition_sizes(parts) == [100] * 5
    assert_disjoint(parts)
    counts = [int(has[p].sum()) for p in parts]
    assert counts == [10, 10, 50, 10, 10]


def test_property_split_gives_the_adversary_its_own_fraction() -> None:
    has = np.zeros(1000, dtype=bool)
    has[np.random.default_rng(0).permutation(1000)[:300]] = True
    parts = partition_property(
        has,
        4,
        target=0,
        target_fraction=0.8,
        others_fraction=0.1,
        partition_size=100,
        seed=0,
        adversary=3,
        adversary_fraction=0.6,
    )
    assert [int(has[p].sum()) for p in parts] == [80, 10, 10, 60]
    assert partition_sizes(parts) == [100] * 4
    assert_disjoint(parts)
    # the largest size that fits counts the adversary's needs too: with
    # 300 records with the property, round(0.8 s) + round(0.6 s) <= 300
    # holds up to s = 214 (171 + 128 = 299), fails at 215 (172 + 129)
    widest = partition_property(
        has, 4, target=0, target_fraction=0.8, seed=0, adversary=3,
        adversary_fraction=0.6,
    )  # fmt: skip
    assert partition_sizes(widest) == [214] * 4
    with pytest.raises(DataError, match="needs 301 records with the property"):
        partition_property(
            has, 4, target=0, target_fraction=0.8, partition_size=215, seed=0,
            adversary=3, adversary_fraction=0.6,
        )  # fmt: skip
    # named without a fraction, the adversary holds none
    plain = partition_property(
        has, 4, target=0, target_fraction=0.8, partition_size=100, seed=0,
        adversary=3,
    )  # fmt: skip
    assert [int(has[p].sum()) for p in plain] == [80, 0, 0, 0]
    for adversary, text in (
        (0, r"^adversary partition 0 is the target's$"),
        (4, r"^adversary must be an integer in \[0, 3\]; got 4\.$"),
        (-1, r"^adversary must be an integer in \[0, 3\]; got -1\.$"),
    ):
        with pytest.raises(ConfigError, match=text):
            partition_property(
                has, 4, target=0, target_fraction=0.8, seed=0,
                adversary=adversary, adversary_fraction=0.6,
            )  # fmt: skip
    with pytest.raises(ConfigError, match=r"^adversary_fraction must be in"):
        partition_property(
            has, 4, target=0, target_fraction=0.8, seed=0, adversary=1,
            adversary_fraction=1.5,
        )  # fmt: skip


def test_property_control_setting() -> None:
    has = np.arange(600) % 3 == 0  # 200 with, 400 without
    parts = partition_property(
        has, 4, target=0, target_fraction=0.3, partition_size=50, seed=1
    )
    assert int(has[parts[0]].sum()) == 15
    for p in parts[1:]:
        assert not has[p].any()
    assert_disjoint(parts)


def test_property_default_size_bound_by_property_records() -> None:
    has = np.zeros(1000, dtype=bool)
    has[:40] = True  # 40 with, 960 without
    parts = partition_property(has, 4, target=0, target_fraction=0.5, seed=0)
    # The target needs round(s / 2) <= 40 records with the property: s = 81
    # fits (round(40.5) == 40), s = 82 does not; 4 * 81 - 40 without is ample.
    assert partition_sizes(parts) == [81] * 4
    assert int(has[parts[0]].sum()) == 40
    assert not any(has[p].any() for p in parts[1:])
    assert_disjoint(parts)
    with pytest.raises(DataError):
        partition_property(
            has, 4, target=0, target_fraction=0.5, partition_size=82, seed=0
        )


def test_property_default_size_bound_by_non_property_records() -> None:
    has = np.zeros(110, dtype=bool)
    has[:100] = True  # 100 with, 10 without
    parts = partition_property(
        has, 2, target=1, target_fraction=1.0, others_fraction=0.8, seed=0
    )
    # Without: s - round(0.8 s) <= 10 holds up to s = 52 (52 - 42), fails at 53;
    # with: s + round(0.8 s) <= 100 would allow up to s = 55.
    assert partition_sizes(parts) == [52, 52]
    assert int(has[parts[1]].sum()) == 52
    assert int(has[parts[0]].sum()) == 42
    assert_disjoint(parts)


def test_property_determinism() -> None:
    has = np.arange(500) % 4 == 0
    kwargs = {"target": 1, "target_fraction": 0.6, "partition_size": 40}
    a = partition_property(has, 3, seed=5, **kwargs)  # type: ignore[arg-type]
    b = partition_property(has, 3, seed=5, **kwargs)  # type: ignore[arg-type]
    c = partition_property(has, 3, seed=6, **kwargs)  # type: ignore[arg-type]
    assert same(a, b)
    assert not same(a, c)


def test_property_not_enough_records() -> None:
    has = np.zeros(200, dtype=bool)
    has[:10] = True
    with pytest.raises(DataError) as info:
        partition_property(
            has, 2, target=0, target_fraction=0.5, partition_size=40, seed=0
        )
    message = str(info.value)
    assert "needs 20" in message and "available 10" in message
    with pytest.raises(DataError):
        partition_property(np.zeros(10, bool), 2, target=0, target_fraction=1.0, seed=0)


def test_property_bad_args() -> None:
    has = np.arange(100) % 2 == 0
    with pytest.raises(ConfigError, match=r"^target_fraction must be in"):
        partition_property(has, 2, target=0, target_fraction=1.5, seed=0)
    with pytest.raises(ConfigError, match=r"^others_fraction must be in"):
        partition_property(
            has, 2, target=0, target_fraction=0.5, others_fraction=-0.1, seed=0
        )
    with pytest.raises(ConfigError, match=r"^target must be an integer in \[0, 1\]"):
        partition_property(has, 2, target=2, target_fraction=0.5, seed=0)
    with pytest.raises(ConfigError, match=r"^num_partitions must be an integer"):
        partition_property(has, 0, target=0, target_fraction=0.5, seed=0)
    (alone,) = partition_property(has, 1, target=0, target_fraction=0.5, seed=0)
    assert alone.size == 100  # one partition is allowed: all 50 + 50 records
    with pytest.raises(
        ConfigError, match=r"^has_property must be a one-dimensional mask, got shape"
    ):
        partition_property(
            has.reshape(10, 10), 2, target=0, target_fraction=0.5, seed=0
        )
    with pytest.raises(ConfigError, match="target"):
        partition_property(has, 2, target=-1, target_fraction=0.5, seed=0)
    with pytest.raises(ConfigError, match="partition_size"):
        partition_property(
            has, 2, target=0, target_fraction=0.5, partition_size=0, seed=0
        )


def test_partition_sizes() -> None:
    assert partition_sizes([np.arange(3), np.arange(0), np.arange(5)]) == [3, 0, 5]


@pytest.mark.parametrize("with_", [0, 1, 7, 40, 99])
@pytest.mark.parametrize("without", [3, 25, 200])
@pytest.mark.parametrize(
    "fractions", [(0.5, 0.0, 0.0), (0.9, 0.3), (1.0, 0.0, 0.1, 0.25)]
)
def test_the_largest_partition_size_is_the_largest_that_fits(with_, without, fractions):
    from fedleak.data.partition import _property_needs, _property_partition_size

    pool = with_ + without

    def fits(size: int) -> bool:
        need_with, need_without = _property_needs(size, fractions)
        return need_with <= with_ and need_without <= without

    largest = max(
        (s for s in range(1, pool // len(fractions) + 1) if fits(s)), default=0
    )
    if largest:
        assert (
            _property_partition_size((with_, without), pool, fractions, None) == largest
        )
        assert (
            _property_partition_size((with_, without), pool, fractions, largest)
            == largest
        )
        return
    need_with, need_without = _property_needs(1, fractions)
    message = (
        f"the pool cannot fill {len(fractions)} partitions of even one record: needs "
        f"{need_with} records with the property and {need_without} without, "
        f"available {with_} with and {without} without."
    )
    with pytest.raises(DataError) as caught:
        _property_partition_size((with_, without), pool, fractions, None)
    assert str(caught.value) == message


def test_a_partition_size_that_does_not_fit_names_needs_and_supply():
    from fedleak.data.partition import _property_partition_size

    fractions = (0.5, 0.0, 0.25)
    assert _property_partition_size((3, 9), 12, fractions, 1) == 1
    assert _property_partition_size((3, 9), 12, fractions, 4) == 4  # needs (3, 9)
    with pytest.raises(DataError) as caught:
        _property_partition_size((2, 9), 12, fractions, 4)
    assert str(caught.value) == (
        "not enough records for 3 partitions of 4: needs 3 records with the "
        "property and 9 without, available 2 with and 9 without; lower "
        "partition_size or num_partitions, or leave partition_size unset to use "
        "the largest size that fits."
    )
    with pytest.raises(
        ConfigError, match=r"^partition_size must be an integer >= 1; got 0\.$"
    ):
        _property_partition_size((3, 9), 12, fractions, 0)
