"""The Count Sketch with the seed's paired-bucket estimator (seed 000 Ch. 2.2, 4.3).

The update is the Count-Min update. For row ``j`` the estimate of ``c_i``
is ``X[j, h_j(i)] - X[j, h'_j(i)]``, where ``h'_j(i)`` is the bucket paired
with ``h_j(i)`` (buckets ``2k`` and ``2k + 1`` form a pair, i.e. the seed's
1-based rule "``h - 1`` if ``h`` is even, ``h + 1`` if odd"). Item ``i`` adds
only to ``h_j(i)``, and every other item lands in either bucket of the pair
with the same probability, so each row estimate is unbiased. The seed sums
the row estimates; that sum is linear in the table (what the private median
decrypts, Ch. 4.3) and estimates ``d * c_i``, so :meth:`CountSketch.estimate`
divides it by ``d``.

The pairing needs an even width: :meth:`CountSketch.from_error` rounds
``w = ceil(e / epsilon)`` up to the next even number (the seed's
``epsilon = delta = 0.05`` give ``d = 3`` and ``w = 55 -> 56``).
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from ..errors import ConfigError
from ..validation import check_probability
from .base import ItemsLike, LinearSketch, as_items

__all__ = ["CountSketch"]


class CountSketch(LinearSketch):
    """Count Sketch with the paired-bucket estimator of seed 000 Ch. 2.2.

    Parameters
    ----------
    depth : int
        Rows ``d``, >= 1.
    width : int
        Buckets per row ``w``: even, >= 2.
    seed : int, default=0
        Seed of the pairwise-independent hashes.

    Raises
    ------
    ConfigError
        If the width is odd.
    """

    _KIND = 2

    def __init__(self, depth: int, width: int, *, seed: int = 0) -> None:
        super().__init__(depth, width, seed=seed)
        if self.width % 2:
            raise ConfigError(
                f"a Count Sketch pairs buckets (2k, 2k+1), so its width must be "
                f"even; got {self.width}, use {self.width + 1}."
            )

    @classmethod
    def from_error(
        cls, epsilon: float, delta: float, *, n_items: int = 1, seed: int = 0
    ) -> Self:
        """Size from ``(epsilon, delta)`` as in Definition 7, width rounded to even.

        Parameters
        ----------
        epsilon, delta : float
            In ``(0, 1)``.
        n_items : int, default=1
            How many items the guarantee covers at once.
        seed : int, default=0
            Hash seed.
        """
        width = cls.suggest_width(epsilon)
        return cls(cls.suggest_depth(delta, n_items), width + width % 2, seed=seed)

    def row_estimates(self, items: ItemsLike) -> np.ndarray:
        """``X[j, h_j(i)] - X[j, h'_j(i)]`` for every row, shape ``(depth, n)``."""
        values = as_items(items)
        flat = self._buckets(values)
        partner = flat ^ 1
        flat += self._offsets
        partner += self._offsets
        table = self._table.reshape(-1)
        out: np.ndarray = table[flat] - table[partner]
        return out

    def estimate_sum(self, items: ItemsLike) -> np.ndarray:
        """Return the seed's estimator: the row estimates summed (``~ d c_i``)."""
        out: np.ndarray = self.row_estimates(items).sum(axis=0)
        return out.reshape(np.shape(items))

    def estimate(self, items: ItemsLike) -> np.ndarray:
        """Unbiased estimates of the counts: :meth:`estimate_sum` divided by ``d``.

        Returns
        -------
        numpy.ndarray
            float64, one per item.
        """
        return self.estimate_sum(items) / self.depth

    def coefficients(self, items: ItemsLike) -> np.ndarray:
        """Coefficients ``a`` with ``sum(a * X) = sum_{i in items} estimate_sum(i)``.

        The estimated number of occurrences of a set of items is a fixed
        integer combination of the counters, so it can be evaluated on an
        encrypted table by homomorphic additions (seed 000 Ch. 4.3).

        Parameters
        ----------
        items : array_like of int
            Distinct items.

        Returns
        -------
        numpy.ndarray
            int64 coefficients, shape ``(depth, width)``.
        """
        coef = np.zeros(self.size, dtype=np.int64)
        values = as_items(items)
        if values.size:
            flat = self._buckets(values)
            partner = (flat ^ 1) + self._offsets
            flat += self._offsets
            np.add.at(coef, flat.reshape(-1), 1)
            np.subtract.at(coef, partner.reshape(-1), 1)
        return coef.reshape(self.depth, self.width)

    def standard_error(self) -> float:
        """Bound the standard deviation of :meth:`estimate`.

        Under ideal hashing, another item ``k`` adds ``c_k`` to a row estimate
        with probability ``1/w`` and ``-c_k`` with probability ``1/w``, so
        the variance of the mean of ``d`` rows is at most ``2 F2 / (w d)``,
        where ``F2 = ||c||_2^2 <= min_j sum_b X[j, b]^2`` (counts >= 0).
        """
        f2 = float(np.min(np.sum(self._table.astype(np.float64) ** 2, axis=1)))
        return math.sqrt(2.0 * f2 / (self.width * self.depth))

    def error_bound(self, delta: float = 0.05) -> float:
        """Bound ``|c_hat - c|`` w.p. ``1 - delta`` (Chebyshev).

        Returns ``standard_error() / sqrt(delta)``.
        """
        p = check_probability("delta", delta, closed="neither")
        return self.standard_error() / math.sqrt(p)
