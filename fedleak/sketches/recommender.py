"""Private ItemKNN recommender from sketched co-views (seed 000 Ch. 4.1, Eq. 2.1).

Each user's interests are a binary item-to-item matrix ``I``: ``I_ab = 1``
if the user watched both ``a`` and ``b``, ``I_aa = 1`` if it watched ``a``
(upper triangle with the diagonal, ``T = M (M + 1) / 2`` entries). The user
inserts the pairs it watched into a Count-Min Sketch
(:func:`user_sketch`); the tally sums the masked sketches
(:func:`fedleak.sketches.masked.aggregate_sketches`) and obtains the sketch of
the global co-view matrix ``C``, from which everyone estimates ``C``
(:func:`estimate_coviews`), the cosine similarities ``Sim_ab = C_ab /
sqrt(C_aa C_bb)`` (Eq. 2.1) and ItemKNN recommendations
(:func:`recommend`).

The seed's population (BBC iPlayer viewers) is not public; benchmarks use
:func:`zipf_population`, documented there. Since sketches are linear, the
sketch of a million users is the sketch of their summed co-view counts
(:func:`population_sketch`), which the bench uses for the accuracy figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..validation import Interval, check_int, check_positive, check_real
from .count_min import CountMinSketch

__all__ = [
    "CoviewPopulation",
    "coview_error",
    "cosine_similarity",
    "estimate_coviews",
    "pair_ids",
    "population_sketch",
    "recommend",
    "user_sketch",
    "zipf_population",
]


@dataclass
class CoviewPopulation:
    """Users' watched items as a sparse binary ``(n_users, n_items)`` matrix.

    Attributes
    ----------
    watched : scipy.sparse.csr_matrix
        ``watched[u, a] = 1`` if user ``u`` watched item ``a``.
    n_items : int
        ``M``.
    """

    watched: sp.csr_matrix
    n_items: int

    @property
    def n_users(self) -> int:
        """Number of users ``N``."""
        return int(self.watched.shape[0])

    def items_of(self, user: int) -> np.ndarray:
        """Return the items user ``user`` watched, sorted."""
        row = self.watched[user]
        return np.sort(row.indices.astype(np.int64))

    def coviews(self, users: slice | None = None) -> np.ndarray:
        """Return the exact co-views ``C = sum_u I_u`` (upper triangle + diagonal).

        Returns
        -------
        numpy.ndarray
            int64 ``(M, M)``; entries below the diagonal are zero.
        """
        w = self.watched if users is None else self.watched[users]
        full = (w.T @ w).toarray().astype(np.int64)
        return np.triu(full)


def zipf_population(
    n_users: int,
    n_items: int = 700,
    *,
    mean_views: float = 8.0,
    exponent: float = 1.0,
    seed: int = 0,
) -> CoviewPopulation:
    """Draw a synthetic viewing population with Zipf item popularity.

    Item ``a`` (0-based) is chosen with probability proportional to ``(a +
    1)**(-exponent)``; user ``u`` makes ``1 + Poisson(mean_views - 1)``
    draws, duplicates removed. The seed's evaluation (Ch. 4.1.4) samples a
    million users from a zipfian distribution over ``M = 700`` programs.

    Parameters
    ----------
    n_users : int
        ``N`` >= 1.
    n_items : int, default=700
        ``M`` >= 1; ``M * M < 2**31 - 1``.
    mean_views : float, default=8.0
        Mean draws per user, >= 1.
    exponent : float, default=1.0
        Zipf exponent, >= 0.
    seed : int, default=0
        Random seed.

    Returns
    -------
    CoviewPopulation
    """
    check_int("n_users", n_users, low=1)
    # pair ids i * M + j must stay below the hash prime 2^31 - 1
    check_int("n_items", n_items, low=1, high=math.isqrt((1 << 31) - 2))
    check_real("mean_views", mean_views, Interval(1, None))
    check_positive("exponent", exponent, allow_zero=True)
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** (-exponent)
    weights /= weights.sum()
    draws = 1 + rng.poisson(mean_views - 1.0, size=n_users)
    users = np.repeat(np.arange(n_users, dtype=np.int64), draws)
    items = rng.choice(n_items, size=users.size, p=weights)
    matrix = sp.csr_matrix(
        (np.ones(users.size, dtype=np.int64), (users, items)),
        shape=(n_users, n_items),
    )
    matrix.data[:] = 1  # duplicates were summed: watched is binary
    return CoviewPopulation(watched=matrix, n_items=n_items)


def pair_ids(items: np.ndarray, n_items: int) -> np.ndarray:
    """Ids ``a * M + b`` of all pairs ``a <= b`` of the given watched items.

    Parameters
    ----------
    items : numpy.ndarray
        Distinct item ids in ``[0, M)``.
    n_items : int
        ``M``.

    Returns
    -------
    numpy.ndarray
        int64 pair ids, ``k (k + 1) / 2`` of them for ``k`` items.
    """
    arr = np.unique(np.asarray(items, dtype=np.int64))
    if arr.size and (arr[0] < 0 or arr[-1] >= n_items):
        raise DataError(f"item ids must lie in [0, {n_items}).")
    a, b = np.triu_indices(arr.size)
    return arr[a] * n_items + arr[b]


def user_sketch(
    items: np.ndarray, n_items: int, template: CountMinSketch
) -> CountMinSketch:
    """One user's co-view matrix in a Count-Min Sketch (Ch. 4.1.2, construction).

    Parameters
    ----------
    items : numpy.ndarray
        The items the user watched.
    n_items : int
        ``M``.
    template : CountMinSketch
        Gives depth, width and hash seed (shared by all users).
    """
    sketch = template.with_table(np.zeros(template.size, dtype=np.int64))
    sketch.update(pair_ids(items, n_items))
    return sketch


def population_sketch(coviews: np.ndarray, template: CountMinSketch) -> CountMinSketch:
    """Return the sum of all users' sketches, computed from the summed co-views.

    By linearity, updating each pair once by its total count gives exactly
    the table the tally obtains by summing every user's sketch.
    """
    m = coviews.shape[0]
    a, b = np.nonzero(np.triu(coviews))
    sketch = template.with_table(np.zeros(template.size, dtype=np.int64))
    sketch.update(a * m + b, coviews[a, b])
    return sketch


def estimate_coviews(
    sketch: CountMinSketch, n_items: int, *, debias: bool = False
) -> np.ndarray:
    """Estimate the global co-view matrix from the aggregate sketch.

    Every entry is the Count-Min estimate, then capped at ``min(C_hat_aa,
    C_hat_bb)``: nobody co-viewed ``a`` and ``b`` more often than either
    alone, and since ``C_ab <= min(C_aa, C_bb) <= min(C_hat_aa, C_hat_bb)``
    the cap keeps estimates from ever falling below the truth.

    Parameters
    ----------
    sketch : CountMinSketch
        The aggregate sketch.
    n_items : int
        ``M``.
    debias : bool, default=False
        Use :meth:`CountMinSketch.estimate_debiased` (count-mean-min, rounded)
        instead of the seed's minimum: far smaller errors on unpopular pairs,
        hence usable similarities for ItemKNN, but estimates may fall below
        the truth.

    Returns
    -------
    numpy.ndarray
        int64 ``(M, M)``, symmetric (the upper triangle mirrored).
    """
    a, b = np.triu_indices(n_items)
    ids = a * n_items + b
    upper = np.zeros((n_items, n_items), dtype=np.int64)
    if debias:
        upper[a, b] = np.rint(sketch.estimate_debiased(ids)).astype(np.int64)
    else:
        upper[a, b] = sketch.estimate(ids)
    diag = np.diag(upper).copy()
    upper = np.minimum(upper, np.minimum.outer(diag, diag))
    out: np.ndarray = np.triu(upper) + np.triu(upper, 1).T
    return out


def cosine_similarity(coviews: np.ndarray) -> np.ndarray:
    """Eq. 2.1: ``Sim_ab = C_ab / sqrt(C_aa C_bb)`` (0 where an item is unseen).

    Parameters
    ----------
    coviews : numpy.ndarray
        Symmetric ``(M, M)`` co-view counts (or the upper triangle).
    """
    c = np.asarray(coviews, dtype=np.float64)
    sym = c if not np.allclose(np.tril(c, -1), 0.0) else c + np.triu(c, 1).T
    diag = np.sqrt(np.clip(np.diag(sym), 0.0, None))
    denom = np.outer(diag, diag)
    out: np.ndarray = np.divide(sym, denom, out=np.zeros_like(sym), where=denom > 0)
    return out


def recommend(
    similarity: np.ndarray, watched: np.ndarray, *, neighbors: int = 20, top: int = 10
) -> np.ndarray:
    """ItemKNN recommendations for one user (seed 000 Ch. 2.3.1).

    Every watched item adds the similarity of each of its ``neighbors``
    nearest items to that item's score; watched items are excluded and the
    ``top`` highest scores are returned.

    Returns
    -------
    numpy.ndarray
        Item ids, best first (ties by id).
    """
    sim = np.array(similarity, dtype=np.float64)
    np.fill_diagonal(sim, -np.inf)
    m = sim.shape[0]
    k = min(neighbors, m - 1)
    seen = np.unique(np.asarray(watched, dtype=np.int64))
    scores = np.zeros(m)
    for item in seen if k > 0 else []:
        for j in np.argpartition(-sim[item], k - 1)[:k]:
            if np.isfinite(sim[item, j]):
                scores[j] += sim[item, j]
    scores[seen] = -np.inf
    order = np.lexsort((np.arange(m), -scores))
    return order[: min(top, m - seen.size)]


def coview_error(
    true: np.ndarray, estimate: np.ndarray, *, top: int = 50
) -> dict[str, float | list[int]]:
    """Accuracy over the ``top`` most frequent co-view entries (Fig. 4.5).

    Returns
    -------
    dict
        ``average_error``: mean of ``|c_hat_i - c_i| / sum_j |c_j|`` over the
        top entries (Fig. 4.5b); ``max_relative_error``: largest
        ``|c_hat_i - c_i| / c_i``; ``true`` and ``estimated``: the counts of
        the top entries (Fig. 4.5a).
    """
    t = np.triu(true).reshape(-1)
    e = np.triu(estimate).reshape(-1)
    idx = np.argsort(-t, kind="stable")[:top]
    l1 = float(np.abs(t).sum())
    diff = np.abs(e[idx] - t[idx]).astype(np.float64)
    return {
        "average_error": float(np.mean(diff) / l1) if l1 else 0.0,
        "max_relative_error": float(np.max(diff / np.maximum(t[idx], 1))),
        "true": [int(v) for v in t[idx]],
        "estimated": [int(v) for v in e[idx]],
    }
