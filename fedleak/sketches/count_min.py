"""The Count-Min Sketch (seed 000 Ch. 2.2, Definition 7; Cormode and Muthukrishnan).

Sized from ``(epsilon, delta)`` by :meth:`CountMinSketch.from_error` or
from ``(depth, width)`` directly. The estimate of ``c_i`` is the minimum of
its ``d`` counters: ``c_i <= c_hat_i`` always, and ``c_hat_i <= c_i +
epsilon * ||c||_1`` with probability ``>= 1 - delta`` (for non-negative
counts).
"""

from __future__ import annotations

import math
from typing import Self

import numpy as np

from .base import ItemsLike, LinearSketch, as_items

__all__ = ["CountMinSketch"]


class CountMinSketch(LinearSketch):
    """Count-Min Sketch with integer counters (Definition 7).

    Parameters
    ----------
    depth : int
        Rows ``d`` (hash functions), >= 1.
    width : int
        Buckets per row ``w``, >= 1.
    seed : int, default=0
        Seed of the pairwise-independent hashes; sketches that are merged or
        aggregated must share it.

    Examples
    --------
    >>> sketch = CountMinSketch.from_error(0.01, 0.01)
    >>> sketch.update([3, 3, 7])
    >>> int(sketch.estimate(3))
    2
    """

    _KIND = 1

    @classmethod
    def from_error(
        cls, epsilon: float, delta: float, *, n_items: int = 1, seed: int = 0
    ) -> Self:
        """Size a sketch from its error target (Definition 7).

        ``w = ceil(e / epsilon)`` and ``d = ceil(ln(n_items / delta))``; e.g.
        ``epsilon = delta = 0.01`` with the seed's ``T = 245,000`` co-view
        pairs give ``d = 18, w = 272`` (``L = 4,896``, Ch. 4.1.4).

        Parameters
        ----------
        epsilon : float
            Additive error as a fraction of ``||c||_1``, in ``(0, 1)``.
        delta : float
            Failure probability, in ``(0, 1)``.
        n_items : int, default=1
            ``T``: how many items the guarantee covers at once.
        seed : int, default=0
            Hash seed.
        """
        return cls(
            cls.suggest_depth(delta, n_items), cls.suggest_width(epsilon), seed=seed
        )

    @property
    def epsilon(self) -> float:
        """The error factor this width gives: ``e / w``."""
        return math.e / self.width

    @property
    def delta(self) -> float:
        """The per-item failure probability this depth gives: ``exp(-d)``."""
        return math.exp(-self.depth)

    def estimate(self, items: ItemsLike) -> np.ndarray:
        """Estimate counts: ``c_hat_i = min_j X[j, h_j(i)]`` (Definition 7).

        Parameters
        ----------
        items : int or array_like of int
            Items to query (vectorised).

        Returns
        -------
        numpy.ndarray
            int64 estimates, one per item (a 0-d array for a single item).
        """
        values = as_items(items)
        out = np.empty(values.size, dtype=np.int64)
        flat_table = self._table.reshape(-1)
        offsets = self._offsets.astype(np.uint64)
        for start, block in self._chunks(values):
            flat = self._raw_buckets(block)
            flat += offsets
            np.min(flat_table[flat], axis=0, out=out[start : start + block.size])
        return out.reshape(np.shape(items))

    def estimate_debiased(self, items: ItemsLike) -> np.ndarray:
        """Estimate counts with the count-mean-min correction (Deng and Rafiei).

        Each row's counter holds ``c_i`` plus, in expectation, ``(N -
        c_i) / (w - 1)`` of the other items' mass (``N`` the total count); the
        estimate is the median over rows of ``X[j, h_j(i)] - (N - X[j,
        h_j(i)]) / (w - 1)``, kept within ``[0, c_hat_i]``. Not part of the
        seed: it gives up Definition 7's one-sided guarantee for much smaller
        errors on rare items (co-views of unpopular pairs, Ch. 4.1), where
        the plain minimum is dominated by collisions.

        Returns
        -------
        numpy.ndarray
            float64 estimates, one per item.
        """
        values = as_items(items)
        flat = self._buckets(values)
        flat += self._offsets
        rows = self._table.reshape(-1)[flat].astype(np.float64)
        noise = (float(self.total) - rows) / max(1, self.width - 1)
        debiased = np.median(rows - noise, axis=0)
        upper = rows.min(axis=0)
        out: np.ndarray = np.clip(debiased, 0.0, upper)
        return out.reshape(np.shape(items))

    def error_bound(self) -> float:
        """``epsilon * ||c||_1``: the additive error bound of Definition 7."""
        return self.epsilon * float(np.abs(self._table[0]).sum())

    def lower_bound(self, items: ItemsLike) -> np.ndarray:
        """Return a bound below the true counts, holding w.p. ``>= 1 - delta``.

        ``c_hat_i - epsilon * ||c||_1`` (clipped at 0 for counts >= 0).
        """
        est = self.estimate(items).astype(np.float64)
        return np.maximum(est - self.error_bound(), 0.0)

    def upper_bound(self, items: ItemsLike) -> np.ndarray:
        """Return a bound above the true counts: the estimate itself (counts >= 0)."""
        return self.estimate(items)
