"""Counting queries over item sets and their relative error (000 Sec. 5.3.3).

A query is a set ``Q`` of items (cells, stations); its answer on a data set of
binary records is the number of records that contain *all* of ``Q``
(``mode="all"``) or *any* of ``Q`` (``mode="any"``). The seed's workload has
1,000 random queries in 5 groups: the lengths of group ``i`` are uniform in
``[1, i * max ||x||_1 / 5]`` and the items are uniform over the universe.
Accuracy is the relative error ``|Q(X_hat) - Q(X)| / max(Q(X), s)`` with the
sanity bound ``s`` = 0.1% of ``|X|`` (Xiao et al.), averaged per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse

from ..errors import DataError
from ..privacy.randomness import RngLike, check_rng
from ..validation import check_int, check_option

__all__ = [
    "QueryMode",
    "QueryWorkload",
    "answer_queries",
    "group_errors",
    "random_item_queries",
    "relative_errors",
]

QueryMode = Literal["all", "any"]


@dataclass(frozen=True)
class QueryWorkload:
    """Item-set queries and their length group.

    Attributes
    ----------
    items : list of numpy.ndarray
        The item ids of every query.
    groups : numpy.ndarray
        Group ``1..n_groups`` of every query.
    n_items : int
        Size of the item universe ``m``.
    """

    items: list[NDArray[np.int64]]
    groups: NDArray[np.int64]
    n_items: int

    def matrix(self) -> sparse.csr_matrix:
        """Return the ``(queries, m)`` 0/1 membership matrix."""
        rows = np.repeat(np.arange(len(self.items)), [q.size for q in self.items])
        cols = np.concatenate(self.items) if self.items else np.zeros(0, np.int64)
        data = np.ones(cols.size)
        return sparse.csr_matrix(
            (data, (rows, cols)), shape=(len(self.items), self.n_items)
        )


def random_item_queries(
    n_items: int,
    max_record_length: int,
    *,
    n_queries: int = 1000,
    n_groups: int = 5,
    seed: RngLike = 0,
) -> QueryWorkload:
    """Draw the seed's workload: ``n_queries`` item sets in ``n_groups`` groups.

    Parameters
    ----------
    n_items : int
        Universe size ``m``.
    max_record_length : int
        ``max ||x||_1`` of the data (public or bounded a priori).
    n_queries : int
        Total number of queries (split evenly over the groups).
    n_groups : int
        Number of length groups.
    seed : numpy.random.Generator, int or None

    Returns
    -------
    QueryWorkload
    """
    check_int("n_items", n_items, low=1)
    check_int("max_record_length", max_record_length, low=1)
    check_int("n_queries", n_queries, low=check_int("n_groups", n_groups, low=1))
    rng = check_rng(seed)
    items: list[NDArray[np.int64]] = []
    groups = np.repeat(np.arange(1, n_groups + 1), n_queries // n_groups)
    groups = np.concatenate([groups, np.full(n_queries - groups.size, n_groups)])
    for group in groups:
        longest = max(1, min(n_items, int(group * max_record_length / n_groups)))
        length = int(rng.integers(1, longest + 1))
        items.append(np.sort(rng.choice(n_items, size=length, replace=False)))
    return QueryWorkload(items=items, groups=groups.astype(np.int64), n_items=n_items)


def answer_queries(
    records: ArrayLike | sparse.spmatrix, workload: QueryWorkload, mode: QueryMode
) -> NDArray[np.int64]:
    """Count the records matching every query.

    Parameters
    ----------
    records : array_like or scipy sparse matrix
        ``(n, m)`` 0/1 records.
    workload : QueryWorkload
    mode : {"all", "any"}
        Records containing all items of the query, or at least one.

    Returns
    -------
    numpy.ndarray
        One count per query.
    """
    check_option("mode", mode, ("all", "any"))
    data = sparse.csc_matrix(records, dtype=np.float64)
    if data.shape[1] != workload.n_items:
        raise DataError(
            f"records have {data.shape[1]} items; the workload {workload.n_items}."
        )
    counts = np.empty(len(workload.items), dtype=np.int64)
    for i, query in enumerate(workload.items):
        hits = np.asarray(data[:, query].sum(axis=1)).ravel()
        counts[i] = np.count_nonzero(hits >= query.size if mode == "all" else hits > 0)
    return counts


def relative_errors(
    true: ArrayLike, estimate: ArrayLike, n_records: int, sanity: float = 0.001
) -> NDArray[np.float64]:
    """Return ``|estimate - true| / max(true, sanity * n_records)`` per query."""
    truth = np.asarray(true, dtype=np.float64)
    guess = np.asarray(estimate, dtype=np.float64)
    if truth.shape != guess.shape:
        raise DataError(f"shapes differ: {truth.shape} and {guess.shape}.")
    bound = max(sanity * n_records, 1e-12)
    errors: NDArray[np.float64] = np.abs(guess - truth) / np.maximum(truth, bound)
    return errors


def group_errors(errors: ArrayLike, workload: QueryWorkload) -> dict[str, float]:
    """Return the mean error of every length group, keyed ``"20%"``... ``"100%"``."""
    values = np.asarray(errors, dtype=np.float64)
    n_groups = int(workload.groups.max())
    return {
        f"{100 * g // n_groups}%": float(values[workload.groups == g].mean())
        for g in range(1, n_groups + 1)
    }
