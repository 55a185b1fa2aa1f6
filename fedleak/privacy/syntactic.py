"""Syntactic privacy metrics of a table (seed 004 Ch. 3.1) and randomised response.

A table is a set of records with quasi-identifying attributes (QI, e.g. date
of birth, sex, ZIP) and a sensitive attribute (e.g. disease). Records that
share the same QI values form an *equivalence class*; the metrics measure
how well each class hides its members:

k-anonymity (Ch. 3.1.1)
    Every QI combination occurs zero or at least ``k`` times;
    :func:`k_anonymity` returns the largest such ``k`` (the smallest class).
l-diversity (Ch. 3.1.2)
    Every class holds at least ``l`` "well-represented" sensitive values:
    *distinct* l-diversity counts distinct values (:func:`distinct_l_diversity`),
    *entropy* l-diversity asks ``H(class) >= ln l`` (Machanavajjhala et al.),
    so :func:`entropy_l_diversity` returns ``exp(min_class H)``.
t-closeness (Ch. 3.1.3)
    The distribution of the sensitive value in every class is within
    distance ``t`` of its distribution in the whole table, measured by the
    earth mover's distance (Li, Li and Venkatasubramanian 2007):
    :func:`t_closeness` returns the largest class distance. For categorical
    values (all values equally far apart) the EMD is the total variation
    distance; for ordered values it is the 1-Wasserstein distance between the
    two histograms over ranks ``0..m-1``, divided by ``m - 1``
    (``scipy.stats.wasserstein_distance``).

Randomised response (Ch. 3.2.3) is the local-DP mechanism of
:mod:`fedleak.privacy.ldp`, re-exported here with its epsilon.

There is no pandas dependency: :class:`Table` is a small column store of
numpy arrays (any hashable values), built from rows or columns.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import wasserstein_distance

from ..errors import ConfigError, DataError
from .ldp import (
    estimate_true_frequency,
    randomized_response,
    randomized_response_epsilon,
    randomized_response_probability,
)

__all__ = [
    "Table",
    "distinct_l_diversity",
    "earth_movers_distance",
    "entropy_l_diversity",
    "equivalence_classes",
    "estimate_true_frequency",
    "k_anonymity",
    "randomized_response",
    "randomized_response_epsilon",
    "randomized_response_probability",
    "t_closeness",
]


@dataclass(frozen=True)
class Table:
    """A pandas-free table: named columns of equal length.

    Parameters
    ----------
    columns : mapping of str to numpy.ndarray
        One 1-d array per attribute (object arrays are fine for strings).
    """

    columns: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        lengths = {name: len(col) for name, col in self.columns.items()}
        if not lengths:
            raise DataError("a table needs at least one column")
        if len(set(lengths.values())) != 1:
            raise DataError(f"columns have different lengths: {lengths}")

    @classmethod
    def from_rows(
        cls, rows: Sequence[Sequence[Hashable]], names: Sequence[str]
    ) -> Table:
        """Build a table from records, one value per name in ``names``."""
        if any(len(row) != len(names) for row in rows):
            raise DataError(
                f"every row must have {len(names)} values ({', '.join(names)})"
            )
        columns = {
            name: np.array([row[i] for row in rows], dtype=object)
            for i, name in enumerate(names)
        }
        return cls(columns)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def column(self, name: str) -> np.ndarray:
        """Return the column ``name``; raise ``ConfigError`` naming the known ones."""
        try:
            return np.asarray(self.columns[name])
        except KeyError:
            raise ConfigError(
                f"unknown attribute {name!r}; the table has {sorted(self.columns)}"
            ) from None


def equivalence_classes(
    table: Table, quasi_identifiers: Sequence[str]
) -> list[np.ndarray]:
    """Group the records by their quasi-identifier values (seed 004 Ch. 3.1.1).

    Parameters
    ----------
    table : Table
        The released table.
    quasi_identifiers : sequence of str
        The QI attributes.

    Returns
    -------
    list of numpy.ndarray
        Row indices of each equivalence class, in order of first appearance.
    """
    if not quasi_identifiers:
        raise ConfigError("give at least one quasi-identifier")
    if len(table) == 0:
        raise DataError("the table is empty")
    cols = [table.column(name) for name in quasi_identifiers]
    groups: dict[tuple[Hashable, ...], list[int]] = {}
    for i in range(len(table)):
        groups.setdefault(tuple(col[i] for col in cols), []).append(i)
    return [np.asarray(rows, dtype=np.int64) for rows in groups.values()]


def k_anonymity(table: Table, quasi_identifiers: Sequence[str]) -> int:
    """Return the ``k`` for which ``table`` is k-anonymous (seed 004 Ch. 3.1.1).

    A table is k-anonymous if each QI combination appears zero or at least
    ``k`` times, so the answer is the size of the smallest equivalence class
    (seed 004 Fig. 3.1 is 4-anonymous for QI = {DoB, Sex, ZIP}).
    """
    return min(len(rows) for rows in equivalence_classes(table, quasi_identifiers))


def _class_values(
    table: Table, quasi_identifiers: Sequence[str], sensitive: str
) -> list[np.ndarray]:
    values = table.column(sensitive)
    return [values[rows] for rows in equivalence_classes(table, quasi_identifiers)]


def distinct_l_diversity(
    table: Table, quasi_identifiers: Sequence[str], sensitive: str
) -> int:
    """Return the distinct ``l``: fewest distinct sensitive values in a class.

    Seed 004 Ch. 3.1.2, the simplest formulation: each class holds at least
    ``l`` different sensitive values (Fig. 3.3 is 3-diverse; Fig. 3.1 only
    1-diverse, its 1955/09 class being all "helicobacter").
    """
    return min(
        len(set(vals.tolist()))
        for vals in _class_values(table, quasi_identifiers, sensitive)
    )


def _entropy(values: np.ndarray) -> float:
    _, counts = np.unique(values.astype(str), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def entropy_l_diversity(
    table: Table, quasi_identifiers: Sequence[str], sensitive: str
) -> float:
    """Return the entropy ``l``: ``exp`` of the smallest class entropy.

    Entropy l-diversity (Machanavajjhala et al. 2007, the "well-represented"
    variant seed 004 Ch. 3.1.2 alludes to) requires ``-sum_s p(s) ln p(s) >=
    ln l`` in every class; the largest such ``l`` is ``exp(min H)``. It is at
    most the distinct ``l`` and equals it when every class is uniform.
    """
    return float(
        math.exp(
            min(_entropy(v) for v in _class_values(table, quasi_identifiers, sensitive))
        )
    )


def earth_movers_distance(
    p: np.ndarray, q: np.ndarray, *, ordered: bool = False
) -> float:
    """Earth mover's distance between two histograms over the same ``m`` values.

    Categorical ground distance (every pair of values at distance 1): the EMD
    is the total variation ``0.5 * sum |p - q|``. Ordered ground distance
    ``|i - j| / (m - 1)`` (Li et al. 2007): the 1-Wasserstein distance over
    the ranks, normalised to ``[0, 1]``.

    Parameters
    ----------
    p, q : numpy.ndarray
        Non-negative weights of length ``m`` (normalised here).
    ordered : bool, default=False
        Use the ordered ground distance.

    Returns
    -------
    float
        Distance in ``[0, 1]``.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1 or p.size == 0:
        raise DataError(
            f"histograms must be 1-d of equal length; got {p.shape}, {q.shape}"
        )
    if (p < 0).any() or (q < 0).any() or p.sum() <= 0 or q.sum() <= 0:
        raise DataError("histograms must be non-negative with positive mass")
    p, q = p / p.sum(), q / q.sum()
    if not ordered:
        return float(0.5 * np.abs(p - q).sum())
    if p.size == 1:
        return 0.0
    ranks = np.arange(p.size, dtype=np.float64)
    return float(wasserstein_distance(ranks, ranks, p, q) / (p.size - 1))


def t_closeness(
    table: Table,
    quasi_identifiers: Sequence[str],
    sensitive: str,
    *,
    order: Sequence[Hashable] | None = None,
) -> float:
    """Return the ``t`` for which ``table`` is t-close (seed 004 Ch. 3.1.3).

    The largest earth mover's distance between the sensitive-value
    distribution of an equivalence class and that of the whole table
    (:func:`earth_movers_distance`).

    Parameters
    ----------
    table : Table
        The released table.
    quasi_identifiers : sequence of str
        The QI attributes.
    sensitive : str
        The sensitive attribute.
    order : sequence, optional
        The sensitive values in their natural order (e.g. salary bands); when
        given, the ordered ground distance is used and every value of the
        column must be in it. Otherwise the values are categorical.

    Returns
    -------
    float
        ``t`` in ``[0, 1]``.
    """
    values = table.column(sensitive)
    domain = list(order) if order is not None else sorted(set(values.tolist()), key=str)
    index = {value: i for i, value in enumerate(domain)}
    missing = {v for v in values.tolist() if v not in index}
    if missing:
        raise DataError(f"sensitive values not in `order`: {sorted(missing, key=str)}")
    codes = np.array([index[v] for v in values.tolist()], dtype=np.int64)
    overall = np.bincount(codes, minlength=len(domain)).astype(np.float64)
    return max(
        earth_movers_distance(
            np.bincount(codes[rows], minlength=len(domain)).astype(np.float64),
            overall,
            ordered=order is not None,
        )
        for rows in equivalence_classes(table, quasi_identifiers)
    )
