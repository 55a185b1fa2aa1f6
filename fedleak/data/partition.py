"""Splitting a pool of records among federated clients.

Every partitioner returns a list of ``num_partitions`` sorted int64 arrays of
indices into the pool; the arrays are pairwise disjoint. Randomness comes only
from the ``seed`` argument (an int or a :class:`numpy.random.Generator`): the
same seed gives the same partitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError, DataError
from ..validation import check_int, check_positive, check_probability

__all__ = [
    "partition_dirichlet",
    "partition_iid",
    "partition_property",
    "partition_sizes",
]


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def partition_iid(
    num_records: int, num_partitions: int, seed: int | np.random.Generator
) -> list[np.ndarray]:
    """Split records uniformly at random into near-equal parts.

    Parameters
    ----------
    num_records : int
        Size of the pool; indices run over ``range(num_records)``.
    num_partitions : int
        Number of parts.
    seed : int or numpy.random.Generator
        Source of randomness.

    Returns
    -------
    list of numpy.ndarray
        ``num_partitions`` sorted int64 index arrays whose sizes differ by at
        most one; disjoint, and together they cover every record.

    Raises
    ------
    ConfigError
        If ``num_records < 0`` or ``num_partitions < 1``.
    DataError
        If there are fewer records than partitions.
    """
    n = check_int("num_records", num_records, low=0)
    k = check_int("num_partitions", num_partitions, low=1)
    if n < k:
        raise DataError(
            f"cannot split {n} records into {k} non-empty partitions; "
            "use fewer partitions or a larger pool."
        )
    rng = np.random.default_rng(seed)
    return _finish(np.array_split(rng.permutation(n), k))


def _dirichlet_once(
    classes: list[np.ndarray], k: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray] | None:
    """Draw one Dirichlet split; ``None`` if the proportions are degenerate."""
    buckets: list[list[np.ndarray]] = [[] for _ in range(k)]
    for members in classes:
        shuffled = rng.permutation(members)
        proportions = rng.dirichlet(np.full(k, alpha))
        if not np.all(np.isfinite(proportions)):
            return None
        cuts = (np.cumsum(proportions)[:-1] * shuffled.size).astype(np.int64)
        for bucket, piece in zip(buckets, np.split(shuffled, cuts), strict=True):
            bucket.append(piece)
    return [np.concatenate(b) if b else np.empty(0, np.int64) for b in buckets]


def partition_dirichlet(
    labels: np.ndarray,
    num_partitions: int,
    alpha: float,
    seed: int | np.random.Generator,
    *,
    min_partition_size: int = 1,
    max_retries: int = 100,
) -> list[np.ndarray]:
    """Split records with label skew drawn from a Dirichlet distribution.

    For each class, its records are shuffled and divided among the partitions
    in proportions drawn from ``Dirichlet(alpha * 1)``. Small ``alpha`` gives
    each partition few classes; large ``alpha`` approaches an IID split.

    Parameters
    ----------
    labels : numpy.ndarray
        Label of every record in the pool, shape ``(n,)``.
    num_partitions : int
        Number of parts.
    alpha : float
        Dirichlet concentration, > 0.
    seed : int or numpy.random.Generator
        Source of randomness.
    min_partition_size : int, optional
        Every partition must get at least this many records (default 1). A
        draw that violates it is discarded and drawn again.
    max_retries : int, optional
        How many times to draw again after the first draw (default 100).

    Returns
    -------
    list of numpy.ndarray
        ``num_partitions`` sorted int64 index arrays; disjoint, and together
        they cover every record.

    Raises
    ------
    ConfigError
        If ``alpha <= 0``, ``labels`` is not one-dimensional, or an integer
        argument is out of range.
    DataError
        If no draw within ``max_retries`` retries gives every partition
        ``min_partition_size`` records, or the pool is too small for that.
    """
    k = check_int("num_partitions", num_partitions, low=1)
    min_size = check_int("min_partition_size", min_partition_size, low=0)
    retries = check_int("max_retries", max_retries, low=0)
    check_positive("alpha", alpha)
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ConfigError(f"labels must be one-dimensional, got shape {labels.shape}.")
    n = labels.shape[0]
    if k * min_size > n:
        raise DataError(
            f"cannot give each of {k} partitions at least {min_size} records: "
            f"the pool has {n} records but {k * min_size} are needed."
        )
    classes = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    rng = np.random.default_rng(seed)
    for _ in range(retries + 1):
        parts = _dirichlet_once(classes, k, float(alpha), rng)
        if parts is not None and min(p.size for p in parts) >= min_size:
            return _finish(parts)
    raise DataError(
        f"no Dirichlet(alpha={alpha}) split of {n} records into {k} partitions "
        f"gave every partition >= {min_size} records in {retries + 1} draws; "
        "raise alpha, lower num_partitions or min_partition_size, or raise "
        "max_retries."
    )


def _property_needs(size: int, fractions: Sequence[float]) -> tuple[int, int]:
    """Return the records with and without the property the partitions need.

    One partition of ``size`` records per fraction.
    """
    needed_with = sum(round(size * f) for f in fractions)
    return needed_with, len(fractions) * size - needed_with


def partition_property(
    has_property: np.ndarray,
    num_partitions: int,
    *,
    target: int,
    target_fraction: float,
    others_fraction: float = 0.0,
    partition_size: int | None = None,
    seed: int | np.random.Generator,
    adversary: int | None = None,
    adversary_fraction: float = 0.0,
) -> list[np.ndarray]:
    """Split records so that one partition is rich in a property.

    Partition ``target`` gets ``round(partition_size * target_fraction)``
    records with the property and the rest without; every other partition
    gets ``round(partition_size * others_fraction)`` records with it and the
    rest without. ``others_fraction=0`` is the control setting in which no
    other client holds the property. ``round`` is Python's (halves to even).

    Parameters
    ----------
    has_property : numpy.ndarray
        Boolean mask over the pool, shape ``(n,)``: which records have the
        property.
    num_partitions : int
        Number of parts, >= 1.
    target : int
        Index of the property-rich partition, in ``[0, num_partitions)``.
    target_fraction : float
        Fraction of the target partition with the property, in ``[0, 1]``.
    others_fraction : float, optional
        Fraction of every other partition with the property, in ``[0, 1]``
        (default 0.0).
    partition_size : int or None, optional
        Records per partition. ``None`` (the default) uses the largest size
        the pool allows: the binding constraint is the supply of records with
        the property or of records without it.
    seed : int or numpy.random.Generator
        Source of randomness.
    adversary : int or None, optional
        A partition (not ``target``) that gets ``adversary_fraction`` of its
        records with the property instead of ``others_fraction``: a property
        adversary holding "the same number of inputs with the property as the
        target" (seed 000 Ch. 7.2.7).
    adversary_fraction : float, optional
        Its fraction with the property, in ``[0, 1]`` (default 0.0).

    Returns
    -------
    list of numpy.ndarray
        ``num_partitions`` sorted int64 index arrays of ``partition_size``
        records each; disjoint (records left over stay unused).

    Raises
    ------
    ConfigError
        If a fraction is outside ``[0, 1]``, ``target`` is out of range,
        ``partition_size < 1``, or ``has_property`` is not one-dimensional.
    DataError
        If the pool has too few records with or without the property; the
        message says how many are needed and how many are available.
    """
    k = check_int("num_partitions", num_partitions, low=1)
    t = check_int("target", target, low=0, high=k - 1)
    fractions = _property_fractions(
        k, t, target_fraction, others_fraction, adversary, adversary_fraction
    )
    mask = np.asarray(has_property)
    if mask.ndim != 1:
        raise ConfigError(
            f"has_property must be a one-dimensional mask, got shape {mask.shape}."
        )
    mask = mask.astype(bool)
    with_idx = np.flatnonzero(mask)
    without_idx = np.flatnonzero(~mask)
    size = _property_partition_size(
        (with_idx.size, without_idx.size), mask.size, fractions, partition_size
    )
    rng = np.random.default_rng(seed)
    with_pool = rng.permutation(with_idx)
    without_pool = rng.permutation(without_idx)
    parts: list[np.ndarray] = []
    w_at = wo_at = 0
    for i in range(k):
        n_with = round(size * fractions[i])
        n_without = size - n_with
        parts.append(
            np.concatenate(
                [
                    with_pool[w_at : w_at + n_with],
                    without_pool[wo_at : wo_at + n_without],
                ]
            )
        )
        w_at += n_with
        wo_at += n_without
    return _finish(parts)


def _property_fractions(
    k: int,
    target: int,
    target_fraction: float,
    others_fraction: float,
    adversary: int | None,
    adversary_fraction: float,
) -> list[float]:
    """Check the fractions of :func:`partition_property`; return one per partition."""
    tf = check_probability("target_fraction", target_fraction)
    of = check_probability("others_fraction", others_fraction)
    af = check_probability("adversary_fraction", adversary_fraction)
    if adversary is not None:
        check_int("adversary", adversary, low=0, high=k - 1)
        if adversary == target:
            raise ConfigError(f"adversary partition {adversary} is the target's")
    return [tf if i == target else af if i == adversary else of for i in range(k)]


def _property_partition_size(
    available: tuple[int, int],
    pool: int,
    fractions: Sequence[float],
    partition_size: int | None,
) -> int:
    """Check or find the records per partition of :func:`partition_property`.

    ``available`` counts the pool's records with and without the property.
    A given ``partition_size`` is checked against that supply; ``None`` finds
    the largest size it allows (the needs grow with the size, so a binary
    search finds it). Raises :class:`DataError` naming the needs and the
    supply when not even the size asked for (or one record) fits.
    """

    def fits(size: int) -> bool:
        need_with, need_without = _property_needs(size, fractions)
        return need_with <= available[0] and need_without <= available[1]

    if partition_size is None:
        k = len(fractions)
        lo, hi = 0, pool // k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        if lo == 0:
            need_with, need_without = _property_needs(1, fractions)
            raise DataError(
                f"the pool cannot fill {k} partitions of even one record: "
                f"needs {need_with} records with the property and "
                f"{need_without} without, available {available[0]} with and "
                f"{available[1]} without."
            )
        return lo
    size = check_int("partition_size", partition_size, low=1)
    k = len(fractions)
    if not fits(size):
        need_with, need_without = _property_needs(size, fractions)
        raise DataError(
            f"not enough records for {k} partitions of {size}: needs "
            f"{need_with} records with the property and {need_without} "
            f"without, available {available[0]} with and {available[1]} "
            "without; lower partition_size or num_partitions, or leave "
            "partition_size unset to use the largest size that fits."
        )
    return size


def partition_sizes(parts: list[np.ndarray]) -> list[int]:
    """Return the number of records in each partition.

    Parameters
    ----------
    parts : list of numpy.ndarray
        Index arrays, as returned by the partitioners.

    Returns
    -------
    list of int
        ``len(p)`` for every ``p`` in ``parts``.
    """
    return [len(p) for p in parts]
