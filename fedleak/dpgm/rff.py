"""Random Fourier features for the RBF kernel (seed 000 Sec. 5.1.1, Eq. 5.1).

``z(x) = sqrt(2/d) [cos(<w_1, x> + b_1), ..., cos(<w_d, x> + b_d)]`` with
``w_i ~ N(0, 2 gamma I)`` (the Fourier transform of ``exp(-gamma ||x - y||^2)``)
and ``b_i ~ U[0, 2 pi)`` (Rahimi and Recht 2007), so that ``<z(x), z(y)>``
approximates the kernel. scikit-learn's ``RBFSampler`` draws exactly this map;
fedleak wraps it so that the map never looks at the data (``fit`` only needs
the number of columns), which keeps it free of privacy cost.

Theorem 3 of the seed: ``E ||z(x)||_2 <= 1`` for any ``x``, whatever ``gamma``
and ``d`` (``||z(x)||^2`` averages ``2 cos^2`` terms with mean 1), so private
kernel k-means may clip features at ``C_b = 1`` without spending budget on
DPNorm.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.kernel_approximation import RBFSampler

from ..errors import DataError
from ..privacy.randomness import RngLike, check_rng
from ..validation import check_int, check_positive

__all__ = ["RandomFourierFeatures", "median_gamma"]


class RandomFourierFeatures:
    """The map ``z`` of Eq. 5.1 for the RBF kernel ``exp(-gamma ||x - y||^2)``.

    Parameters
    ----------
    n_features : int
        ``m``, the input dimension.
    d : int
        Number of random features (the seed uses 200).
    gamma : float
        Kernel width, > 0.
    seed : numpy.random.Generator, int or None
        Seed of ``w`` and ``b``.

    Notes
    -----
    Not a scikit-learn estimator: the map is drawn at construction from the
    seed and never fitted to data (that is what keeps it free of privacy
    cost), so it offers :meth:`transform` only.
    """

    def __init__(self, n_features: int, d: int, gamma: float, seed: RngLike) -> None:
        self.n_features = check_int("n_features", n_features, low=1)
        self.d = check_int("d", d, low=1)
        self.gamma = check_positive("gamma", gamma)
        state = int(check_rng(seed).integers(0, 2**31 - 1))
        self._sampler = RBFSampler(
            gamma=self.gamma, n_components=self.d, random_state=state
        )
        self._sampler.fit(np.zeros((1, self.n_features)))

    def transform(self, x: ArrayLike) -> NDArray[np.float64]:
        """Return ``z(x)`` for every row of ``x`` (shape ``(n, d)``)."""
        data = np.asarray(x, dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != self.n_features:
            raise DataError(
                f"expected records with {self.n_features} features; "
                f"got shape {data.shape}."
            )
        out: NDArray[np.float64] = self._sampler.transform(data)
        return out


def median_gamma(public: ArrayLike, seed: RngLike = 0, pairs: int = 2000) -> float:
    """Median heuristic for ``gamma`` from public data: ``1 / median ||x - y||^2``.

    Parameters
    ----------
    public : array_like
        Public records (never the private ones: this choice is not private).
    seed : numpy.random.Generator, int or None
        Seed of the random pairs.
    pairs : int
        Number of random pairs to look at.

    Returns
    -------
    float
    """
    data = np.asarray(public, dtype=np.float64)
    if data.ndim != 2 or data.shape[0] < 2:
        raise DataError("median_gamma needs at least two public records (2-d array).")
    rng = check_rng(seed)
    i = rng.integers(0, data.shape[0], pairs)
    j = rng.integers(0, data.shape[0], pairs)
    distances = ((data[i] - data[j]) ** 2).sum(axis=1)
    positive = distances[distances > 0]
    return 1.0 / float(np.median(positive)) if positive.size else 1.0
