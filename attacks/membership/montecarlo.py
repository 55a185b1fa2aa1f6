"""Monte Carlo and reconstruction membership inference on generative models.

Seed 004 Ch. 4.4.2-4.4.3. Both attacks need only what a model releases:
samples (Monte Carlo) or the VAE itself (reconstruction).

Monte Carlo attack (Ch. 4.4.2)
    A generator that overfits puts more of its samples close to its training
    records. With ``g_1..g_n`` samples of the model and an epsilon-neighbourhood
    ``U_eps(x) = {x' : d(x, x') < eps}``:

    * MC-epsilon, Eq. (4.3): ``f(x) = 1/n sum_i 1[g_i in U_eps(x)]``;
    * MC-d, Eq. (4.4): ``f(x) = 1/n sum_i 1[g_i in U_eps(x)] (-log d(g_i, x))``.

    In MC-d, fedleak measures distances in units of epsilon and clips them
    at ``delta`` (``-log max(d / eps, delta)``): every sample inside the
    neighbourhood then adds a positive amount, whatever the scale of ``d``.
    The seed's statement that with the median heuristic "there are always
    exactly M records with f > 0" for both variants, so that MC-epsilon and
    MC-d agree, holds only with that normalisation (with raw distances above
    1 the logarithm changes sign).
Distances (Ch. 4.4.2 "Distance Measures")
    Euclidean distance between feature vectors: :class:`PCAFeatures` (top 40
    principal components fitted on reference data disjoint from the
    candidates), :class:`HOGFeatures` (scikit-image's histogram of oriented
    gradients), :class:`ColorHistogramFeatures` (per-channel intensity
    histograms) or raw pixels (:class:`PixelFeatures`).
Heuristics for epsilon
    Percentile heuristic: a fixed percentile (e.g. 0.1%) of all pairwise
    distances. Median heuristic, Eq. (4.6): the median over the presented
    records of each record's minimum distance to the samples.
Conditional models (Ch. 4.4.4)
    With record and sample labels, only samples of a record's own class
    count (their distance to other classes is infinite).
Reconstruction attack (Ch. 4.4.3, Eq. 4.7)
    ``f_rec(x) = 1/n sum_i ||D(z_i) - x||^2`` with ``z_i ~ N(E_mu(x), E_sigma(x))``;
    training records are reconstructed more precisely, so the score is
    ``-f_rec(x)`` (:func:`reconstruction_scores`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from scipy.spatial.distance import cdist
from skimage.feature import hog
from sklearn.decomposition import PCA

from fedleak.errors import ConfigError, DataError
from fedleak.generative import VAE, as_tensor
from fedleak.validation import (
    Interval,
    check_int,
    check_option,
    check_positive,
    check_real,
)

from .metrics import ScoreFunction

__all__ = [
    "FEATURE_NAMES",
    "ColorHistogramFeatures",
    "FeatureMap",
    "HOGFeatures",
    "MonteCarloAttack",
    "PCAFeatures",
    "PixelFeatures",
    "make_feature_map",
    "mc_distance_scores",
    "mc_epsilon_scores",
    "median_heuristic",
    "pairwise_distances",
    "percentile_heuristic",
    "reconstruction_scores",
]

FEATURE_NAMES: tuple[str, ...] = ("pca", "hog", "chist", "pixels")
Variant = Literal["epsilon", "distance"]


def _images(images: np.ndarray) -> np.ndarray:
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim == 3:
        arr = arr[:, None]
    if arr.ndim != 4:
        raise DataError(
            f"images must have shape (n, C, H, W) or (n, H, W), got {arr.shape}"
        )
    return arr


class FeatureMap(Protocol):
    """Maps images ``(n, C, H, W)`` to feature vectors ``(n, k)``.

    The feature maps below are fixed transforms with ``transform`` only, not
    scikit-learn estimators: :class:`PCAFeatures` fits its PCA on the
    reference images when it is built, the others need no fitting.
    """

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Return the feature vectors of ``images``."""
        ...


class PixelFeatures:
    """Raw pixel intensities, flattened (the naive Euclidean distance)."""

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Return the flattened images."""
        arr = _images(images)
        return arr.reshape(arr.shape[0], -1)


class PCAFeatures:
    """Top principal components of pixel vectors (seed 004 Ch. 4.4.2, PCA-40).

    Parameters
    ----------
    reference : numpy.ndarray
        Images the PCA is fitted on; the seed uses data disjoint from both
        the training and the test candidates (the MNIST test split).
    n_components : int, default=40
        Components kept (capped at the number of pixels and references).
    seed : int, default=0
        Seed of scikit-learn's randomised solver.
    """

    def __init__(
        self, reference: np.ndarray, n_components: int = 40, *, seed: int = 0
    ) -> None:
        ref = PixelFeatures().transform(reference)
        k = min(int(n_components), ref.shape[0], ref.shape[1])
        if k < 1:
            raise ConfigError(f"PCA needs n_components >= 1 and references, got {k}")
        self.pca = PCA(n_components=k, random_state=seed).fit(ref)

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Project flattened images onto the kept components."""
        out: np.ndarray = self.pca.transform(PixelFeatures().transform(images))
        return out


@dataclass(frozen=True)
class HOGFeatures:
    """Histogram of oriented gradients (scikit-image; seed 004 Ch. 4.4.2).

    Attributes
    ----------
    orientations : int
        Orientation bins.
    cells : int
        Cells per image side (``pixels_per_cell = H // cells``); 4 gives
        7x7-pixel cells on 28x28 images and 2x2 on 8x8 digits.
    cells_per_block : int
        Cells per normalisation block side.
    """

    orientations: int = 9
    cells: int = 4
    cells_per_block: int = 2

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Return the block-normalised HOG vector of each image (channels averaged)."""
        arr = _images(images)
        height, width = arr.shape[2:]
        ppc = (max(1, height // self.cells), max(1, width // self.cells))
        gray = arr.mean(axis=1)
        return np.stack(
            [
                hog(
                    image,
                    orientations=self.orientations,
                    pixels_per_cell=ppc,
                    cells_per_block=(self.cells_per_block, self.cells_per_block),
                    feature_vector=True,
                )
                for image in gray
            ]
        )


@dataclass(frozen=True)
class ColorHistogramFeatures:
    """Per-channel intensity histograms, normalised (seed 004 Ch. 4.4.2, CHIST).

    Attributes
    ----------
    bins : int
        Bins per channel over ``value_range``.
    value_range : tuple of float
        Range of pixel values.
    """

    bins: int = 16
    value_range: tuple[float, float] = (0.0, 1.0)

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Return the concatenated per-channel histograms (each summing to 1)."""
        arr = _images(images)
        low, high = self.value_range
        edges = np.linspace(low, high, self.bins + 1)
        flat = arr.reshape(arr.shape[0], arr.shape[1], -1)
        idx = np.clip(np.searchsorted(edges, flat, side="right") - 1, 0, self.bins - 1)
        counts = np.zeros((arr.shape[0], arr.shape[1], self.bins))
        for channel in range(arr.shape[1]):
            for b in range(self.bins):
                counts[:, channel, b] = (idx[:, channel] == b).sum(axis=1)
        return (counts / flat.shape[2]).reshape(arr.shape[0], -1)


def make_feature_map(
    name: str, reference: np.ndarray | None = None, *, seed: int = 0
) -> FeatureMap:
    """Build a feature map from its name, one of :data:`FEATURE_NAMES`.

    ``pca`` is fitted on ``reference``; ``pixels`` compares raw pixels.
    """
    if name == "pca":
        if reference is None:
            raise ConfigError("the PCA distance needs reference images to fit on")
        return PCAFeatures(reference, seed=seed)
    if name == "hog":
        return HOGFeatures()
    if name == "chist":
        return ColorHistogramFeatures()
    if name == "pixels":
        return PixelFeatures()
    raise ConfigError(f"unknown distance {name!r}; choose one of {list(FEATURE_NAMES)}")


def pairwise_distances(
    record_features: np.ndarray,
    sample_features: np.ndarray,
    record_labels: np.ndarray | None = None,
    sample_labels: np.ndarray | None = None,
    *,
    chunk: int = 512,
) -> np.ndarray:
    """Euclidean distances ``d(x_i, g_j)`` (scipy ``cdist``), float32, chunked.

    With labels, distances between different classes are ``inf`` (only
    samples of a record's own class count, seed 004 Ch. 4.4.4).
    """
    rec = np.asarray(record_features, dtype=np.float64)
    smp = np.asarray(sample_features, dtype=np.float64)
    if rec.ndim != 2 or smp.ndim != 2 or rec.shape[1] != smp.shape[1]:
        raise DataError(
            f"features must be 2-d with equal widths, got {rec.shape} and {smp.shape}"
        )
    if (record_labels is None) != (sample_labels is None):
        raise ConfigError("give labels for both records and samples, or for neither")
    out = np.empty((rec.shape[0], smp.shape[0]), dtype=np.float32)
    for start in range(0, rec.shape[0], chunk):
        out[start : start + chunk] = cdist(rec[start : start + chunk], smp)
    if record_labels is not None and sample_labels is not None:
        mismatch = (
            np.asarray(record_labels)[:, None] != np.asarray(sample_labels)[None, :]
        )
        out[mismatch] = np.inf
    return out


def median_heuristic(distances: np.ndarray) -> float:
    """Epsilon of Eq. (4.6): median over records of the nearest-sample distance."""
    d = np.asarray(distances)
    if d.ndim != 2 or 0 in d.shape:
        raise DataError(
            f"need a non-empty (records, samples) distance matrix, got {d.shape}"
        )
    return float(np.median(d.min(axis=1)))


def percentile_heuristic(distances: np.ndarray, percent: float) -> float:
    """Epsilon as the ``percent``-th percentile of all finite pairwise distances.

    ``percent`` is in percent: the seed's 0.1% percentile is ``percent=0.1``.
    """
    check_real("percent", percent, Interval(0, 100, closed="right"))
    d = np.asarray(distances)
    finite = d[np.isfinite(d)]
    if finite.size == 0:
        raise DataError("no finite distances: check the labels of records and samples")
    return float(np.percentile(finite, percent))


def mc_epsilon_scores(distances: np.ndarray, epsilon: float) -> np.ndarray:
    """MC-epsilon, Eq. (4.3): fraction of samples strictly within ``epsilon``."""
    d = np.asarray(distances)
    scores: np.ndarray = (d < epsilon).mean(axis=1).astype(np.float64)
    return scores


def mc_distance_scores(
    distances: np.ndarray, epsilon: float, *, delta: float = 1e-6
) -> np.ndarray:
    """MC-d, Eq. (4.4): ``1/n sum 1[d < eps] (-log max(d / eps, delta))``.

    Distances are in units of epsilon so each sample inside the
    neighbourhood contributes a positive amount; ``delta`` clips the
    logarithm at distance 0 (the seed's "avoid log(0)").
    """
    check_positive("epsilon", epsilon)  # a distance here, not a privacy level
    check_positive("delta", delta)
    d = np.asarray(distances, dtype=np.float64)
    inside = d < epsilon
    with np.errstate(invalid="ignore"):
        contrib = -np.log(np.maximum(d / epsilon, delta))
    scores: np.ndarray = np.where(inside, contrib, 0.0).mean(axis=1)
    return scores


class MonteCarloAttack:
    """The Monte Carlo attack of seed 004 Ch. 4.4.2 on samples of any generative model.

    Parameters
    ----------
    features : FeatureMap
        Defines the distance (Euclidean between feature vectors).
    variant : {"epsilon", "distance"}, default="epsilon"
        MC-epsilon (Eq. 4.3) or MC-d (Eq. 4.4).
    heuristic : "median" or float, default="median"
        The median heuristic (Eq. 4.6) or a percentile in percent (0.1 for
        the seed's 0.1% percentile).
    delta : float, default=1e-6
        Clip of MC-d's logarithm.
    """

    def __init__(
        self,
        features: FeatureMap,
        *,
        variant: Variant = "epsilon",
        heuristic: Literal["median"] | float = "median",
        delta: float = 1e-6,
    ) -> None:
        check_option("variant", variant, ("epsilon", "distance"))
        if heuristic != "median" and not (
            isinstance(heuristic, float | int) and 0 < float(heuristic) <= 100
        ):
            raise ConfigError(
                "heuristic must be 'median' or a percentile in (0, 100], got "
                f"{heuristic!r}"
            )
        self.features = features
        self.variant: Variant = variant
        self.heuristic = heuristic
        self.delta = float(delta)

    def epsilon(self, distances: np.ndarray) -> float:
        """Return epsilon for the presented records' distance matrix."""
        if self.heuristic == "median":
            return median_heuristic(distances)
        return percentile_heuristic(distances, float(self.heuristic))

    def scores_from_distances(self, distances: np.ndarray) -> np.ndarray:
        """Score the presented records (rows) from their distances to the samples."""
        # epsilon 0 (samples copying records): count exact copies only
        eps = max(self.epsilon(distances), float(np.finfo(np.float32).tiny))
        if self.variant == "epsilon":
            return mc_epsilon_scores(distances, eps)
        return mc_distance_scores(distances, eps, delta=self.delta)

    def distances(
        self,
        records: np.ndarray,
        samples: np.ndarray,
        record_labels: np.ndarray | None = None,
        sample_labels: np.ndarray | None = None,
    ) -> np.ndarray:
        """Return the record-sample distances in this attack's feature space."""
        return pairwise_distances(
            self.features.transform(records),
            self.features.transform(samples),
            record_labels,
            sample_labels,
        )

    def scores(
        self,
        records: np.ndarray,
        samples: np.ndarray,
        record_labels: np.ndarray | None = None,
        sample_labels: np.ndarray | None = None,
    ) -> np.ndarray:
        """Score records against samples of the target (epsilon from these records)."""
        return self.scores_from_distances(
            self.distances(records, samples, record_labels, sample_labels)
        )

    def trial_scorer(
        self, member_distances: np.ndarray, nonmember_distances: np.ndarray
    ) -> ScoreFunction:
        """Return a scorer for :func:`fedleak.attacks.membership.metrics.mi_trials`.

        Each trial presents a subset of member and non-member rows; epsilon
        is recomputed from those rows, as the heuristics are defined on the
        records shown to the attacker.
        """

        def score(i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            rows = np.concatenate([member_distances[i], nonmember_distances[j]])
            s = self.scores_from_distances(rows)
            return s[: i.shape[0]], s[i.shape[0] :]

        return score


@torch.no_grad()
def reconstruction_scores(
    vae: VAE,
    records: np.ndarray,
    labels: np.ndarray | None = None,
    *,
    num_samples: int = 300,
    batch_size: int = 256,
    seed: int = 0,
) -> np.ndarray:
    """Reconstruction attack of seed 004 Ch. 4.4.3, Eq. (4.7); returns ``-f_rec(x)``.

    ``f_rec(x) = 1/n sum_i ||D(z_i) - x||^2`` with ``z_i`` drawn from the
    encoder's posterior ``N(mu(x), sigma(x)^2)``; members are reconstructed
    more precisely, so the membership score is the negated error.

    Parameters
    ----------
    vae : VAE
        The target VAE (white-box: encoder and decoder).
    records : numpy.ndarray
        Candidate records with ``vae.input_dim`` features each.
    labels : numpy.ndarray, optional
        Their labels, for a conditional VAE.
    num_samples : int, default=300
        ``n`` latent draws per record (the seed finds 300 already accurate).
    batch_size : int, default=256
        Records per forward pass.
    seed : int, default=0
        Seeds the latent draws.

    Returns
    -------
    numpy.ndarray
        ``-f_rec(x)`` per record.
    """
    check_int("num_samples", num_samples, low=1)
    vae.eval()
    device = next(vae.parameters()).device
    data = as_tensor(records, device=str(device)).reshape(len(records), -1)
    ys = (
        None
        if labels is None
        else as_tensor(labels, dtype=torch.long, device=str(device))
    )
    gen = torch.Generator().manual_seed(seed)
    out = np.empty(data.shape[0])
    for start in range(0, data.shape[0], batch_size):
        x = data[start : start + batch_size]
        y = None if ys is None else ys[start : start + batch_size]
        mu, logvar = vae.encode(x, y)
        error = torch.zeros(x.shape[0], device=device)
        for _ in range(num_samples):
            z = vae.reparameterize(mu, logvar, gen)
            error += ((vae.decode(z, y) - x) ** 2).sum(dim=1)
        out[start : start + x.shape[0]] = (-error / num_samples).cpu().numpy()
    return out
