"""Private kernel k-means (Alg. 4) and standard DP k-means (the baseline).

Both run the noisy Lloyd iteration of Blum et al. (SuLQ, PODS 2005), the
"standard DP k-means" the seed compares against (000 Sec. 5.1.1):

1. assign every (clipped) vector to its nearest centre;
2. release noisy sizes ``n_i + N(0, 2 sigma_K^2)`` (L2-sensitivity
   ``sqrt(2)``: one changed record moves between two clusters);
3. release noisy sums ``sum + N(0, 2 C_b^2 sigma_K^2 I)`` (sensitivity
   ``sqrt(2) C_b``) and set each centre to noisy sum / noisy size.

Private kernel k-means first maps the records through random Fourier features
(:class:`~fedleak.dpgm.rff.RandomFourierFeatures`) and clips them at ``C_b``:
1 for the RBF kernel by Theorem 3 (no budget spent), or the DPNorm bound
(Alg. 6) when ``sigma_c`` is given. Standard DP k-means works on the raw
vectors clipped at ``C_b = sqrt(m)`` (binary or [0, 1] data, seed Sec. 5.3.2).
Centres start on ``k`` random *public* records (Alg. 4 line 7, footnote 3).
The epsilon of ``T_K`` iterations is Eq. 5.2
(:func:`fedleak.privacy.accounting.kmeans_log_moment`).

scikit-learn's ``KMeans`` has no noisy update, hence this small loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse
from scipy.optimize import linear_sum_assignment

from ..errors import ConfigError, DataError
from ..privacy.accounting import (
    DEFAULT_LAMBDAS,
    epsilon_from_log_moments,
    kmeans_log_moment,
)
from ..privacy.dpnorm import dp_norm
from ..privacy.randomness import RngLike, check_rng, noise_normal
from ..validation import check_epsilon, check_int
from .rff import RandomFourierFeatures, median_gamma

__all__ = [
    "KMeansResult",
    "clip_rows",
    "clustering_accuracy",
    "dp_kmeans",
    "kmeans_epsilon",
    "kmeans_sigma",
    "noisy_lloyd",
    "private_kernel_kmeans",
]


@dataclass(frozen=True)
class KMeansResult:
    """Outcome of a private k-means run.

    A released result, not a scikit-learn estimator: the clustering itself
    is a function (:func:`private_kernel_kmeans`, :func:`dp_kmeans`) whose
    noise spends budget once; :meth:`assign` labels new records with the
    released centres.

    Attributes
    ----------
    centers : numpy.ndarray
        ``(k, dim)`` noisy centres (the released output).
    labels : numpy.ndarray
        Cluster of every training record under the final centres.
    clip_norm : float
        ``C_b``.
    iterations : int
        ``T_K``.
    sigma_k : float
        Noise multiplier of sizes and sums.
    sigma_c : float or None
        DPNorm noise multiplier, if DPNorm chose ``C_b``.
    feature_map : RandomFourierFeatures or None
        The RFF map (kernel k-means) or ``None`` (raw features).
    noisy_sizes : numpy.ndarray
        The noisy cluster sizes released by the last iteration (released
        output too, so free to use, e.g. as the mixture weights of 5.1.4).
    """

    centers: NDArray[np.float64]
    labels: NDArray[np.int64]
    clip_norm: float
    iterations: int
    sigma_k: float
    sigma_c: float | None
    feature_map: RandomFourierFeatures | None
    noisy_sizes: NDArray[np.float64]

    def features(self, x: ArrayLike) -> NDArray[np.float64]:
        """Return the clipped vectors the clustering works on."""
        data = np.asarray(x, dtype=np.float64)
        mapped = data if self.feature_map is None else self.feature_map.transform(data)
        return clip_rows(mapped, self.clip_norm)

    def assign(self, x: ArrayLike) -> NDArray[np.int64]:
        """Return the nearest centre of every row of ``x``."""
        return _nearest(self.features(x), self.centers)

    def epsilon(self, delta: float) -> float:
        """Return the epsilon these iterations spent (Eq. 5.2, Theorem 2)."""
        return kmeans_epsilon(self.iterations, self.sigma_k, delta, self.sigma_c)

    def epsilon_on(self, delta: float, lambdas: ArrayLike) -> float:
        """Return :meth:`epsilon` over a custom ``lambda`` grid."""
        return kmeans_epsilon(
            self.iterations, self.sigma_k, delta, self.sigma_c, lambdas
        )


def clip_rows(x: NDArray[np.float64], bound: float) -> NDArray[np.float64]:
    """Scale rows to L2-norm at most ``bound``: ``x / max(1, ||x|| / bound)``."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    clipped: NDArray[np.float64] = x / np.maximum(1.0, norms / bound)
    return clipped


def _nearest(x: NDArray[np.float64], centers: NDArray[np.float64]) -> NDArray[np.int64]:
    # ||x||^2 is the same for every centre, so it does not change the argmin
    distances = (centers**2).sum(axis=1) - 2.0 * x @ centers.T
    nearest: NDArray[np.int64] = np.argmin(distances, axis=1).astype(np.int64)
    return nearest


def noisy_lloyd(
    features: NDArray[np.float64],
    init_centers: NDArray[np.float64],
    *,
    iterations: int,
    sigma_k: float,
    clip_norm: float,
    rng: RngLike = None,
    secure_mode: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """Run ``iterations`` noisy Lloyd steps (Alg. 4 lines 8-15).

    Parameters
    ----------
    features : numpy.ndarray
        ``(n, dim)`` vectors, already clipped to ``clip_norm``.
    init_centers : numpy.ndarray
        ``(k, dim)`` starting centres (from public data).
    iterations : int
        ``T_K``.
    sigma_k : float
        Noise multiplier; 0 gives (non-private) Lloyd.
    clip_norm : float
        ``C_b``, the bound the features were clipped to.
    rng : numpy.random.Generator, int or None
        Seed of the noise.
    secure_mode : bool
        OS-CSPRNG noise (``rng`` must then be ``None``: a seed is refused
        with :class:`~fedleak.errors.ConfigError` at the first draw).

    Returns
    -------
    tuple
        ``(centres, labels, noisy_sizes)``: the final noisy centres, the
        assignment of every vector to them and the last noisy sizes (all
        sizes are exact counts and the centres the start when
        ``iterations == 0``).
    """
    # in secure mode the seed goes to noise_normal, which refuses one
    generator = rng if secure_mode else check_rng(rng)
    centers = np.array(init_centers, dtype=np.float64, copy=True)
    k, dim = centers.shape
    if features.ndim != 2 or features.shape[1] != dim:
        raise DataError(
            f"features have shape {features.shape}; centres {centers.shape}."
        )
    noisy_sizes = np.bincount(_nearest(features, centers), minlength=k).astype(float)
    for _ in range(iterations):
        labels = _nearest(features, centers)
        sizes = np.bincount(labels, minlength=k).astype(np.float64)
        members = sparse.csr_matrix(
            (np.ones(labels.size), (labels, np.arange(labels.size))),
            shape=(k, labels.size),
        )
        sums = np.asarray(members @ features)
        noisy_sizes = sizes + noise_normal(
            math.sqrt(2.0) * sigma_k, k, generator, secure_mode=secure_mode
        )
        noisy_sums = sums + noise_normal(
            math.sqrt(2.0) * clip_norm * sigma_k,
            (k, dim),
            generator,
            secure_mode=secure_mode,
        )
        centers = noisy_sums / np.maximum(noisy_sizes, 1.0)[:, None]
    return centers, _nearest(features, centers), noisy_sizes


def _check_inputs(
    x: ArrayLike, public: ArrayLike, k: int
) -> tuple[np.ndarray, np.ndarray]:
    data = np.asarray(x, dtype=np.float64)
    pub = np.asarray(public, dtype=np.float64)
    if data.ndim != 2 or data.shape[0] == 0:
        raise DataError(f"x must be a non-empty 2-d array; got shape {data.shape}.")
    if pub.ndim != 2 or pub.shape[1] != data.shape[1]:
        raise DataError(
            f"public data must be 2-d with {data.shape[1]} columns like x; "
            f"got shape {pub.shape}."
        )
    # centres start on k public records
    check_int("k (at most the number of public records)", k, low=1, high=pub.shape[0])
    return data, pub


def private_kernel_kmeans(
    x: ArrayLike,
    k: int,
    *,
    public: ArrayLike,
    sigma_k: float,
    iterations: int = 20,
    d: int = 200,
    gamma: float | None = None,
    sigma_c: float | None = None,
    c_max: float = 10.0,
    bins: int = 100,
    seed: RngLike = None,
) -> KMeansResult:
    """Private kernel k-means with random Fourier features (Alg. 4).

    Parameters
    ----------
    x : array_like
        ``(n, m)`` private records.
    k : int
        Number of clusters.
    public : array_like
        Public records from the same distribution: the initial centres (and
        ``gamma`` when not given) come from them.
    sigma_k : float
        Noise multiplier of sizes and sums.
    iterations : int
        ``T_K`` (seed: 20).
    d : int
        Number of random features (seed: 200).
    gamma : float, optional
        RBF width; the median heuristic on ``public`` when omitted.
    sigma_c : float, optional
        Use DPNorm with this noise multiplier for ``C_b``; by default
        ``C_b = 1`` (Theorem 3), which costs nothing.
    c_max, bins : float, int
        DPNorm's ``C_max`` and ``w``.
    seed : numpy.random.Generator, int or None
        Seed of the features, the initial centres and the noise.

    Returns
    -------
    KMeansResult
    """
    data, pub = _check_inputs(x, public, k)
    rng = check_rng(seed)
    width = median_gamma(pub, rng) if gamma is None else gamma
    feature_map = RandomFourierFeatures(data.shape[1], d, width, rng)
    mapped = feature_map.transform(data)
    if sigma_c is None:
        clip_norm = 1.0
    else:
        norms = np.linalg.norm(mapped, axis=1)
        clip_norm = dp_norm(norms, sigma_c, c_max=c_max, bins=bins, rng=rng)
    features = clip_rows(mapped, clip_norm)
    start = pub[rng.choice(pub.shape[0], size=k, replace=False)]
    init = clip_rows(feature_map.transform(start), clip_norm)
    centers, labels, sizes = noisy_lloyd(
        features,
        init,
        iterations=iterations,
        sigma_k=sigma_k,
        clip_norm=clip_norm,
        rng=rng,
    )
    return KMeansResult(
        centers, labels, clip_norm, iterations, sigma_k, sigma_c, feature_map, sizes
    )


def dp_kmeans(
    x: ArrayLike,
    k: int,
    *,
    public: ArrayLike,
    sigma_k: float,
    iterations: int = 20,
    clip_norm: float | None = None,
    seed: RngLike = None,
) -> KMeansResult:
    """Run standard DP k-means on raw features (Blum et al.; the baseline).

    Parameters
    ----------
    x : array_like
        ``(n, m)`` private records.
    k : int
        Number of clusters.
    public : array_like
        Public records; the initial centres are ``k`` of them.
    sigma_k : float
        Noise multiplier of sizes and sums.
    iterations : int
        ``T_K``.
    clip_norm : float, optional
        ``C_b``; ``sqrt(m)`` by default (the seed's choice: records in
        ``[0, 1]^m`` never exceed it).
    seed : numpy.random.Generator, int or None
        Seed of the initial centres and the noise.

    Returns
    -------
    KMeansResult
    """
    data, pub = _check_inputs(x, public, k)
    rng = check_rng(seed)
    bound = math.sqrt(data.shape[1]) if clip_norm is None else float(clip_norm)
    features = clip_rows(data, bound)
    init = clip_rows(pub[rng.choice(pub.shape[0], size=k, replace=False)], bound)
    centers, labels, sizes = noisy_lloyd(
        features, init, iterations=iterations, sigma_k=sigma_k, clip_norm=bound, rng=rng
    )
    return KMeansResult(centers, labels, bound, iterations, sigma_k, None, None, sizes)


def kmeans_epsilon(
    iterations: int,
    sigma_k: float,
    delta: float,
    sigma_c: float | None = None,
    lambdas: ArrayLike | None = None,
) -> float:
    """Return the epsilon of ``iterations`` noisy Lloyd steps (Eq. 5.2).

    ``lambdas`` defaults to the seed's integer ``lambda <= 32``, which cannot
    certify ``epsilon < -log(delta) / 32``; pass a longer grid (e.g.
    ``range(1, 1025)``) for small budgets.
    """
    moments = kmeans_log_moment(iterations, sigma_k, sigma_c, lambdas)
    return epsilon_from_log_moments(moments, delta, lambdas)[0]


def kmeans_sigma(
    epsilon: float,
    delta: float,
    iterations: int,
    sigma_c: float | None = None,
    lambdas: ArrayLike | None = None,
) -> float:
    """Return the smallest ``sigma_K`` with :func:`kmeans_epsilon` <= ``epsilon``.

    Bisection; the upper end is returned, so the budget is never exceeded.

    Raises
    ------
    ConfigError
        If the budget cannot be met (e.g. DPNorm alone exceeds it, or the
        ``lambda`` grid is too short for so small an epsilon).
    """
    check_epsilon("epsilon", epsilon)
    low, high = 1e-3, 1.0
    floor = kmeans_epsilon(iterations, 1e12, delta, sigma_c, lambdas)
    if floor >= epsilon:
        raise ConfigError(
            f"k-means cannot meet epsilon={epsilon} at delta={delta}: even "
            f"infinite count/sum noise leaves epsilon={floor:.4g} (DPNorm "
            f"sigma_c={sigma_c}, largest lambda {_largest(lambdas)}). "
            "Use a longer lambda grid, a larger delta or more DPNorm noise."
        )
    while kmeans_epsilon(iterations, high, delta, sigma_c, lambdas) > epsilon:
        low, high = high, high * 2.0
        if high > 1e7:
            raise ConfigError(f"k-means cannot meet epsilon={epsilon}.")
    for _ in range(60):
        middle = 0.5 * (low + high)
        if kmeans_epsilon(iterations, middle, delta, sigma_c, lambdas) > epsilon:
            low = middle
        else:
            high = middle
    return high


def _largest(lambdas: ArrayLike | None) -> float:
    return float(np.max(np.asarray(DEFAULT_LAMBDAS if lambdas is None else lambdas)))


def clustering_accuracy(labels_true: ArrayLike, labels_pred: ArrayLike) -> float:
    """Unsupervised clustering accuracy (ACC) with the Hungarian matching.

    ``max_u |{x : label(x) = u(cluster(x))}| / n`` over one-to-one maps ``u``
    from clusters to labels (Yang et al. 2010; seed Sec. 5.3.2), solved by
    :func:`scipy.optimize.linear_sum_assignment`.

    Parameters
    ----------
    labels_true, labels_pred : array_like
        Ground-truth labels and cluster ids (any integers), same length.

    Returns
    -------
    float
    """
    truth = np.asarray(labels_true)
    pred = np.asarray(labels_pred)
    if truth.shape != pred.shape or truth.ndim != 1 or truth.size == 0:
        raise DataError("labels_true and labels_pred must be 1-d of the same length.")
    _, t = np.unique(truth, return_inverse=True)
    _, p = np.unique(pred, return_inverse=True)
    confusion = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(confusion, (p, t), 1)
    rows, cols = linear_sum_assignment(confusion, maximize=True)
    return float(confusion[rows, cols].sum() / truth.size)
