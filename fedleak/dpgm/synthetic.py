"""Synthetic stand-ins for the seed's CDR and transit data (000 Table 5.2).

The real data sets (4.4M subscribers' visited cell towers in a city, 1.2M
passengers' visited stations) are private; these generators produce binary
records ``x in {0, 1}^m`` (the set of visited cells/stations) with the same
sizes of universe and the same sparsity, and with the structure that makes
counting queries interesting: popular items, and items that are visited
together.

CDR-like (``m = 1303`` cells, average ``||x||_1`` about 11.4)
    Cells are scattered uniformly in a unit square and have Zipf(1)
    popularity. Subscribers live in one of ``communities`` districts (a
    Gaussian blob of homes around a random centre); a subscriber's number
    of distinct cells is ``1 + NegativeBinomial(r=1.2, mean=mean - 1)``
    (heavy tailed, capped at ``max_items``), and the cells are drawn without
    replacement with probability proportional to popularity times
    ``exp(-dist(home, cell)^2 / (2 * 0.12^2))``.

Transit-like (``m = 342`` stations, average ``||x||_1`` about 5.3)
    Stations lie on ``lines`` metro lines (consecutive runs of station ids)
    and have Zipf(1) popularity. A passenger has a home and a work station
    (by popularity) and makes ``Poisson(1.55 (mean - 2))`` further trips (the
    factor makes up for repeated stations), each to a
    station on the home or work line with probability 0.7 (by popularity)
    or anywhere otherwise; the record is the set of stations used.

Both return ``numpy`` ``uint8`` arrays and are deterministic for a seed.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..privacy.randomness import RngLike, check_rng
from ..validation import Interval, check_int, check_real

__all__ = ["cdr_like", "transit_like"]


def _zipf_weights(m: int, rng: np.random.Generator) -> NDArray[np.float64]:
    weights = 1.0 / np.arange(1, m + 1)
    return rng.permutation(weights / weights.sum())


def cdr_like(
    n: int = 20_000,
    *,
    n_cells: int = 1303,
    mean_cells: float = 11.4,
    communities: int = 8,
    max_items: int = 422,
    seed: RngLike = 0,
) -> NDArray[np.uint8]:
    """Generate CDR-like records: the cells each subscriber visited.

    Parameters
    ----------
    n : int
        Number of subscribers.
    n_cells : int
        Number of cell towers ``m`` (seed: 1303).
    mean_cells : float
        Target average number of visited cells (seed: 11.42).
    communities : int
        Number of residential districts.
    max_items : int
        Largest record (seed: 422).
    seed : numpy.random.Generator, int or None

    Returns
    -------
    numpy.ndarray
        ``(n, n_cells)`` 0/1 matrix.
    """
    check_int("n", n, low=1)
    check_real(
        "mean_cells",
        mean_cells,
        Interval(1, check_int("n_cells", n_cells, low=2), closed="left"),
    )
    rng = check_rng(seed)
    cells = rng.random((n_cells, 2))
    popularity = _zipf_weights(n_cells, rng)
    centres = rng.random((communities, 2))
    district = rng.integers(0, communities, n)
    homes = np.clip(centres[district] + rng.normal(0, 0.05, (n, 2)), 0, 1)
    r = 1.2
    extra = rng.negative_binomial(r, r / (r + mean_cells - 1.0), n)
    lengths = np.minimum(1 + extra, min(max_items, n_cells))
    records = np.zeros((n, n_cells), dtype=np.uint8)
    for i in range(n):
        dist2 = ((cells - homes[i]) ** 2).sum(axis=1)
        weights = popularity * np.exp(-dist2 / (2 * 0.12**2)) + 1e-12
        support = np.count_nonzero(weights > 1e-12)
        size = int(min(lengths[i], support))
        chosen = rng.choice(
            n_cells, size=size, replace=False, p=weights / weights.sum()
        )
        records[i, chosen] = 1
    return records


def transit_like(
    n: int = 20_000,
    *,
    n_stations: int = 342,
    mean_stations: float = 5.3,
    lines: int = 12,
    max_items: int = 57,
    seed: RngLike = 0,
) -> NDArray[np.uint8]:
    """Generate transit-like records: the stations each passenger used.

    Parameters
    ----------
    n : int
        Number of passengers.
    n_stations : int
        Number of stations ``m`` (seed: 342).
    mean_stations : float
        Target average number of stations per record (seed: 5.26).
    lines : int
        Number of lines; station ids are split into ``lines`` runs.
    max_items : int
        Largest record (seed: 57).
    seed : numpy.random.Generator, int or None

    Returns
    -------
    numpy.ndarray
        ``(n, n_stations)`` 0/1 matrix.
    """
    check_int("n", n, low=1)
    stations = check_int("n_stations", n_stations, low=2)
    check_real("mean_stations", mean_stations, Interval(1, stations, closed="left"))
    check_int("lines", lines, low=1, high=n_stations)
    rng = check_rng(seed)
    popularity = _zipf_weights(n_stations, rng)
    line_of = np.minimum(np.arange(n_stations) * lines // n_stations, lines - 1)
    records = np.zeros((n, n_stations), dtype=np.uint8)
    ends = rng.choice(n_stations, size=(n, 2), p=popularity)
    trips = rng.poisson(max(mean_stations - 2.0, 0.0) * 1.55, n)
    for i in range(n):
        home, work = ends[i]
        records[i, [home, work]] = 1
        local = (line_of == line_of[home]) | (line_of == line_of[work])
        local_p = np.where(local, popularity, 0.0)
        local_p /= local_p.sum()
        for _ in range(int(trips[i])):
            p = local_p if rng.random() < 0.7 else popularity
            records[i, rng.choice(n_stations, p=p)] = 1
            if records[i].sum() >= max_items:
                break
    return records
