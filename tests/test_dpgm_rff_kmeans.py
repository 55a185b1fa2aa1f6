"""Random Fourier features (Theorem 3) and private k-means (Alg. 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics.pairwise import rbf_kernel

from fedleak.dpgm.kmeans import (
    clip_rows,
    clustering_accuracy,
    dp_kmeans,
    kmeans_epsilon,
    kmeans_sigma,
    noisy_lloyd,
    private_kernel_kmeans,
)
from fedleak.dpgm.rff import RandomFourierFeatures, median_gamma
from fedleak.errors import ConfigError, DataError


def _binary(n: int, m: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, m)) < 0.2).astype(float)


def test_rff_approximates_the_rbf_kernel_better_with_more_features() -> None:
    x = _binary(60, 30, 0)
    exact = rbf_kernel(x, gamma=0.1)
    errors = []
    for d in (20, 200, 2000):
        trials = []
        for seed in range(3):
            z = RandomFourierFeatures(30, d, 0.1, seed).transform(x)
            trials.append(np.abs(z @ z.T - exact).mean())
        errors.append(np.mean(trials))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.05


@pytest.mark.parametrize("gamma", [0.01, 0.5, 5.0])
def test_expected_feature_norm_is_at_most_one(gamma: float) -> None:
    """Theorem 3: E ||z(x)|| <= 1 for binary x, any gamma (averaged over maps)."""
    x = _binary(20, 50, 1)
    norms = [
        np.linalg.norm(RandomFourierFeatures(50, 100, gamma, s).transform(x), axis=1)
        for s in range(30)
    ]
    assert np.mean(norms) <= 1.0 + 1e-9 + 3 * np.std(norms) / math.sqrt(600)
    assert np.mean(norms) == pytest.approx(1.0, abs=0.05)


def test_rff_is_data_independent_and_seeded() -> None:
    a = RandomFourierFeatures(5, 8, 1.0, 3).transform(np.eye(5))
    b = RandomFourierFeatures(5, 8, 1.0, 3).transform(np.eye(5))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(DataError):
        RandomFourierFeatures(5, 8, 1.0, 3).transform(np.ones((2, 4)))
    with pytest.raises(ConfigError):
        RandomFourierFeatures(5, 8, -1.0, 3)
    assert median_gamma(np.eye(5)) == pytest.approx(0.5)


def test_clustering_accuracy_is_invariant_to_relabelling() -> None:
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_accuracy(truth, np.array([5, 5, 3, 3, 9, 9])) == 1.0
    assert clustering_accuracy(truth, np.array([1, 1, 1, 1, 2, 2])) == pytest.approx(
        4 / 6
    )


def test_noise_free_lloyd_separates_blobs_and_clip_rows_bounds_norms() -> None:
    x, y = make_blobs(600, centers=3, n_features=4, cluster_std=0.5, random_state=0)
    clipped = clip_rows(x, 100.0)
    assert np.all(np.linalg.norm(clip_rows(x, 1.0), axis=1) <= 1.0 + 1e-12)
    init = x[[np.flatnonzero(y == c)[0] for c in range(3)]]
    _, labels, sizes = noisy_lloyd(
        clipped, init, iterations=5, sigma_k=0.0, clip_norm=100.0, rng=0
    )
    assert clustering_accuracy(y, labels) == 1.0
    np.testing.assert_allclose(np.sort(sizes), [200, 200, 200])


def test_private_kernel_kmeans_beats_raw_dp_kmeans_under_heavy_noise() -> None:
    """The seed's point: RFF noise does not grow with m; raw noise does (C_b = sqrt m)."""
    rng = np.random.default_rng(0)
    protos = (rng.random((3, 400)) < 0.3).astype(float)
    y = rng.integers(0, 3, 3000)
    flips = rng.random((3000, 400)) < 0.05
    x = np.abs(protos[y] - flips)
    public = np.abs(protos[[0, 1, 2, 0, 1, 2]] - (rng.random((6, 400)) < 0.05))
    sigma = 40.0
    kernel = np.mean(
        [
            clustering_accuracy(
                y,
                private_kernel_kmeans(
                    x, 3, public=public, sigma_k=sigma, d=10, iterations=5, seed=s
                ).labels,
            )
            for s in range(4)
        ]
    )
    raw = np.mean(
        [
            clustering_accuracy(
                y,
                dp_kmeans(
                    x, 3, public=public, sigma_k=sigma, iterations=5, seed=s
                ).labels,
            )
            for s in range(4)
        ]
    )
    assert kernel > raw + 0.2


def test_kmeans_epsilon_matches_eq_5_2_and_calibration_meets_it() -> None:
    lam = np.arange(1, 33)
    beta = 20 * lam * (lam + 1) / 30.0**2  # two Gaussians per iteration
    expected = float(np.min((beta + math.log(1e5)) / lam))
    assert kmeans_epsilon(20, 30.0, 1e-5) == pytest.approx(expected)
    sigma = kmeans_sigma(1.0, 1e-5, 20)
    assert kmeans_epsilon(20, sigma, 1e-5) <= 1.0
    assert kmeans_epsilon(20, sigma * 0.99, 1e-5) > 1.0
    with pytest.raises(ConfigError, match="lambda"):
        kmeans_sigma(0.2, 1e-5, 20)  # below -log(delta)/32
    assert (
        kmeans_epsilon(
            20,
            kmeans_sigma(0.2, 1e-5, 20, lambdas=range(1, 1025)),
            1e-5,
            lambdas=range(1, 1025),
        )
        <= 0.2
    )


def test_kmeans_inputs_are_checked() -> None:
    x = _binary(10, 4, 0)
    with pytest.raises(ConfigError, match="public"):
        private_kernel_kmeans(x, 5, public=x[:2], sigma_k=1.0)
    with pytest.raises(DataError):
        dp_kmeans(x, 2, public=np.ones((3, 5)), sigma_k=1.0)


def test_private_kernel_kmeans_is_deterministic_for_a_seed() -> None:
    x = _binary(200, 12, 3)
    a = private_kernel_kmeans(x, 3, public=x[:5], sigma_k=2.0, d=20, seed=4)
    b = private_kernel_kmeans(x, 3, public=x[:5], sigma_k=2.0, d=20, seed=4)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.centers, b.centers)
    np.testing.assert_array_equal(a.assign(x), a.labels)
    assert a.clip_norm == 1.0
