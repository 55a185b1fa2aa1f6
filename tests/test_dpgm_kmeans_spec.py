"""Private k-means (Alg. 4), its random features (Eq. 5.1) and the counting
queries, replayed by hand from the same seeded generators."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedleak.dpgm.kmeans import (
    clip_rows,
    dp_kmeans,
    kmeans_epsilon,
    kmeans_sigma,
    noisy_lloyd,
    private_kernel_kmeans,
)
from fedleak.dpgm.queries import (
    answer_queries,
    group_errors,
    random_item_queries,
    relative_errors,
)
from fedleak.dpgm.rff import RandomFourierFeatures, median_gamma
from fedleak.dpgm.synthetic import cdr_like, transit_like
from fedleak.errors import ConfigError, DataError
from fedleak.privacy.dpnorm import dp_norm


def _nearest(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    return np.argmin(((x[:, None, :] - centers[None]) ** 2).sum(axis=2), axis=1)


def _lloyd_by_hand(features, centers, iterations, sigma_k, clip_norm, rng):
    """Alg. 4 lines 8-15: sizes + N(0, 2 sigma^2), sums + N(0, 2 C^2 sigma^2 I)."""
    k = centers.shape[0]
    sizes = np.bincount(_nearest(features, centers), minlength=k).astype(float)
    for _ in range(iterations):
        labels = _nearest(features, centers)
        counts = np.bincount(labels, minlength=k).astype(float)
        sums = np.stack([features[labels == j].sum(axis=0) for j in range(k)])
        sizes = counts + rng.normal(0.0, math.sqrt(2) * sigma_k, k)
        sums = sums + rng.normal(0.0, math.sqrt(2) * clip_norm * sigma_k, sums.shape)
        centers = sums / np.maximum(sizes, 1.0)[:, None]
    return centers, _nearest(features, centers), sizes


def _blobs(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 3, n)
    centres = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return np.clip(centres[truth] + rng.normal(0, 0.1, (n, 3)), 0, 1), truth


def test_noisy_lloyd_is_alg_4_with_the_seeded_noise() -> None:
    x, _ = _blobs()
    features = clip_rows(x, 1.0)
    start = features[:3]
    for iterations in (0, 1, 3):
        got = noisy_lloyd(
            features, start, iterations=iterations, sigma_k=2.0, clip_norm=1.0, rng=7
        )
        expected = _lloyd_by_hand(
            features, start, iterations, 2.0, 1.0, np.random.default_rng(7)
        )
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b)
    with pytest.raises(
        DataError, match=r"^features have shape \(90, 3\); centres \(3, 2\)\.$"
    ):
        noisy_lloyd(features, start[:, :2], iterations=1, sigma_k=1.0, clip_norm=1.0)


def test_clip_rows_scales_only_long_rows() -> None:
    rows = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    np.testing.assert_allclose(
        clip_rows(rows, 1.0), [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]
    )
    np.testing.assert_allclose(clip_rows(rows, 10.0), rows)


def test_private_kernel_kmeans_replays_its_pipeline() -> None:
    """Alg. 4 with one generator: the median-heuristic gamma, the RFF map, the
    public starting centres, then the noisy Lloyd steps; C_b = 1 (Theorem 3)
    or DPNorm's bound."""
    x, _ = _blobs(60, seed=1)
    public, _ = _blobs(20, seed=2)
    for sigma_c in (None, 3.0):
        result = private_kernel_kmeans(
            x,
            3,
            public=public,
            sigma_k=1.5,
            iterations=2,
            d=16,
            sigma_c=sigma_c,
            c_max=4.0,
            bins=8,
            seed=11,
        )
        rng = np.random.default_rng(11)
        gamma = median_gamma(public, rng)
        rff = RandomFourierFeatures(3, 16, gamma, rng)
        mapped = rff.transform(x)
        bound = (
            1.0
            if sigma_c is None
            else dp_norm(
                np.linalg.norm(mapped, axis=1), sigma_c, c_max=4.0, bins=8, rng=rng
            )
        )
        start = public[rng.choice(20, size=3, replace=False)]
        expected = _lloyd_by_hand(
            clip_rows(mapped, bound),
            clip_rows(rff.transform(start), bound),
            2,
            1.5,
            bound,
            rng,
        )
        np.testing.assert_allclose(result.centers, expected[0])
        np.testing.assert_array_equal(result.labels, expected[1])
        np.testing.assert_allclose(result.noisy_sizes, expected[2])
        assert result.clip_norm == bound and result.iterations == 2
        assert result.sigma_k == 1.5 and result.sigma_c == sigma_c
        np.testing.assert_allclose(result.features(x), clip_rows(mapped, bound))
        np.testing.assert_array_equal(result.assign(x), result.labels)
        assert result.feature_map.gamma == gamma
    fixed = private_kernel_kmeans(
        x, 3, public=public, sigma_k=1.0, d=8, gamma=0.7, seed=0
    )
    assert fixed.feature_map.gamma == 0.7 and fixed.feature_map.d == 8
    assert fixed.iterations == 20  # the seed's T_K
    assert (
        private_kernel_kmeans(x, 2, public=public, sigma_k=1.0, seed=0).feature_map.d
        == 200
    )


def test_dp_kmeans_replays_its_pipeline_with_the_sqrt_m_bound() -> None:
    x, _ = _blobs(60, seed=3)
    public, _ = _blobs(10, seed=4)
    result = dp_kmeans(x, 3, public=public, sigma_k=0.5, iterations=2, seed=5)
    rng = np.random.default_rng(5)
    bound = math.sqrt(3)
    start = clip_rows(public[rng.choice(10, size=3, replace=False)], bound)
    expected = _lloyd_by_hand(clip_rows(x, bound), start, 2, 0.5, bound, rng)
    np.testing.assert_allclose(result.centers, expected[0])
    np.testing.assert_allclose(result.noisy_sizes, expected[2])
    assert (
        result.clip_norm == bound
        and result.feature_map is None
        and result.sigma_c is None
    )
    assert (
        dp_kmeans(x, 3, public=public, sigma_k=0.5, clip_norm=0.5, seed=5).clip_norm
        == 0.5
    )
    assert dp_kmeans(x, 3, public=public, sigma_k=0.5, seed=5).iterations == 20
    assert result.epsilon(1e-5) == pytest.approx(kmeans_epsilon(2, 0.5, 1e-5))
    lam = np.arange(1.0, 200.0)
    assert result.epsilon_on(1e-5, lam) == pytest.approx(
        kmeans_epsilon(2, 0.5, 1e-5, None, lam)
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda x, p: dp_kmeans(np.zeros((0, 3)), 2, public=p, sigma_k=1.0),
            DataError,
            r"^x must be a non-empty 2-d array; got shape \(0, 3\)\.$",
        ),
        (
            lambda x, p: dp_kmeans(x, 2, public=p[:, :2], sigma_k=1.0),
            DataError,
            r"^public data must be 2-d with 3 columns like x; got shape \(10, 2\)\.$",
        ),
        (
            lambda x, p: dp_kmeans(x, 0, public=p, sigma_k=1.0),
            ConfigError,
            r"^k \(at most the number of public records\) must be an integer in "
            r"\[1, 10\]; got 0\.$",
        ),
        (
            lambda x, p: dp_kmeans(x, 11, public=p, sigma_k=1.0),
            ConfigError,
            r"^k \(at most the number of public records\) must be an integer in "
            r"\[1, 10\]; got 11\.$",
        ),
        (
            lambda x, p: RandomFourierFeatures(0, 4, 1.0, 0),
            ConfigError,
            r"^n_features must be an integer >= 1; got 0\.$",
        ),
        (
            lambda x, p: RandomFourierFeatures(3, 0, 1.0, 0),
            ConfigError,
            r"^d must be an integer >= 1; got 0\.$",
        ),
        (
            lambda x, p: RandomFourierFeatures(3, 4, 0.0, 0),
            ConfigError,
            r"^gamma must be a finite number > 0; got 0\.0\.$",
        ),
        (
            lambda x, p: RandomFourierFeatures(3, 4, 1.0, 0).transform(
                np.zeros((2, 4))
            ),
            DataError,
            r"^expected records with 3 features; got shape \(2, 4\)\.$",
        ),
        (
            lambda x, p: median_gamma(np.zeros((1, 3))),
            DataError,
            r"^median_gamma needs at least two public records \(2-d array\)\.$",
        ),
        (
            lambda x, p: kmeans_sigma(0.0, 1e-5, 20),
            ConfigError,
            r"^epsilon must be a finite number > 0; got 0\.0\.$",
        ),
        (
            lambda x, p: kmeans_sigma(0.01, 1e-5, 20),
            ConfigError,
            r"^k-means cannot meet epsilon=0\.01 at delta=1e-05: even infinite count/sum noise leaves epsilon=\S+ \(DPNorm sigma_c=None, largest lambda 32\.0\)\. Use a longer lambda grid",
        ),
    ],
)
def test_kmeans_and_rff_refusals(call, error, message) -> None:
    x, _ = _blobs(20)
    public, _ = _blobs(10, seed=5)
    with pytest.raises(error, match=message):
        call(x, public)


def test_rff_and_median_gamma_follow_their_seeds() -> None:
    from sklearn.kernel_approximation import RBFSampler

    rng = np.random.default_rng(3)
    state = int(np.random.default_rng(3).integers(0, 2**31 - 1))
    rff = RandomFourierFeatures(4, 6, 0.5, rng)
    reference = RBFSampler(gamma=0.5, n_components=6, random_state=state).fit(
        np.zeros((1, 4))
    )
    x = np.random.default_rng(0).random((5, 4))
    np.testing.assert_allclose(rff.transform(x), reference.transform(x))
    assert (rff.n_features, rff.d, rff.gamma) == (4, 6, 0.5)
    public = np.random.default_rng(1).random((30, 4))
    replay = np.random.default_rng(2)
    i, j = replay.integers(0, 30, 50), replay.integers(0, 30, 50)
    d2 = ((public[i] - public[j]) ** 2).sum(axis=1)
    assert median_gamma(public, 2, pairs=50) == pytest.approx(1 / np.median(d2[d2 > 0]))
    assert median_gamma(np.ones((3, 4))) == 1.0  # all pairs identical
    default = np.random.default_rng(0)
    i, j = default.integers(0, 30, 2000), default.integers(0, 30, 2000)
    d2 = ((public[i] - public[j]) ** 2).sum(axis=1)
    assert median_gamma(public) == pytest.approx(1 / np.median(d2[d2 > 0]))


def test_kmeans_sigma_is_the_tightest_noise_for_the_budget() -> None:
    for eps, sigma_c in ((1.0, None), (3.0, 20.0)):
        sigma = kmeans_sigma(eps, 1e-5, 20, sigma_c)
        assert kmeans_epsilon(20, sigma, 1e-5, sigma_c) <= eps
        assert kmeans_epsilon(20, sigma * (1 - 1e-6), 1e-5, sigma_c) > eps
    lam = np.arange(1.0, 1025.0)
    small = kmeans_sigma(0.25, 1e-5, 20, lambdas=lam)
    assert kmeans_epsilon(20, small, 1e-5, lambdas=lam) <= 0.25
    assert kmeans_epsilon(20, small * (1 - 1e-6), 1e-5, lambdas=lam) > 0.25
    loose = kmeans_sigma(1e3, 1e-5, 1)  # below the starting bracket
    assert (
        kmeans_epsilon(1, loose, 1e-5) <= 1e3 < kmeans_epsilon(1, loose * 0.999, 1e-5)
    )


def test_query_workload_follows_its_seed_and_groups() -> None:
    workload = random_item_queries(30, 10, n_queries=12, n_groups=4, seed=9)
    assert workload.groups.tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    rng = np.random.default_rng(9)
    for items, group in zip(workload.items, workload.groups, strict=True):
        longest = max(1, min(30, int(group * 10 / 4)))
        length = int(rng.integers(1, longest + 1))
        np.testing.assert_array_equal(
            items, np.sort(rng.choice(30, size=length, replace=False))
        )
    uneven = random_item_queries(30, 10, n_queries=7, n_groups=3, seed=1)
    assert uneven.groups.tolist() == [
        1,
        1,
        2,
        2,
        3,
        3,
        3,
    ]  # the rest go to the last group
    assert uneven.groups.dtype == np.int64 and uneven.n_items == 30
    capped = random_item_queries(3, 100, n_queries=5, n_groups=1, seed=2)
    assert all(q.size <= 3 for q in capped.items)
    default = random_item_queries(30, 10)
    assert len(default.items) == 1000 and default.groups.max() == 5
    matrix = workload.matrix().toarray()
    for row, items in zip(matrix, workload.items, strict=True):
        assert set(np.flatnonzero(row)) == set(items.tolist())
    for bad, message in (
        (dict(n_items=0), r"^n_items must be an integer >= 1; got 0\.$"),
        (
            dict(max_record_length=0),
            r"^max_record_length must be an integer >= 1; got 0\.$",
        ),
        (dict(n_queries=3), r"^n_queries must be an integer >= 4; got 3\.$"),
        (dict(n_groups=0), r"^n_groups must be an integer >= 1; got 0\.$"),
    ):
        args = dict(n_items=30, max_record_length=10, n_queries=12, n_groups=4)
        args.update(bad)
        n_items, length = args.pop("n_items"), args.pop("max_record_length")
        with pytest.raises(ConfigError, match=message):
            random_item_queries(n_items, length, **args)


def test_errors_and_groups() -> None:
    np.testing.assert_allclose(
        relative_errors([10, 0], [12, 3], n_records=1000), [0.2, 3.0]
    )  # the sanity bound 0.001 n = 1 replaces a zero answer
    np.testing.assert_allclose(relative_errors([0], [2], 1000, sanity=0.01), [0.2])
    with pytest.raises(DataError, match=r"^shapes differ: \(2,\) and \(3,\)\.$"):
        relative_errors([1, 2], [1, 2, 3], 10)
    workload = random_item_queries(10, 5, n_queries=4, n_groups=2, seed=0)
    assert group_errors([1.0, 3.0, 10.0, 20.0], workload) == {"50%": 2.0, "100%": 15.0}
    records = np.array([[1, 1, 0], [0, 1, 1]])
    small = random_item_queries(3, 2, n_queries=1, n_groups=1, seed=0)
    small.items[0] = np.array([0, 1])
    assert answer_queries(records, small, "all").dtype == np.int64
    with pytest.raises(
        ConfigError, match=r"^mode must be one of 'all', 'any'; got 'most'\.$"
    ):
        answer_queries(records, small, "most")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"^records have 2 items; the workload 3\.$"):
        answer_queries(records[:, :2], small, "all")


def test_synthetic_generators_check_their_sizes() -> None:
    for make, kwargs, message in (
        (cdr_like, dict(n=0), r"^n must be an integer >= 1; got 0\.$"),
        (
            cdr_like,
            dict(n=5, n_cells=1),
            r"^n_cells must be an integer >= 2; got 1\.$",
        ),
        (
            cdr_like,
            dict(n=5, mean_cells=0.5),
            r"^mean_cells must be in \[1, 1303\); got 0\.5\.$",
        ),
        (
            transit_like,
            dict(n=5, mean_stations=342.0),
            r"^mean_stations must be in \[1, 342\); got 342\.0\.$",
        ),
        (
            transit_like,
            dict(n=5, lines=0),
            r"^lines must be an integer in \[1, 342\]; got 0\.$",
        ),
        (
            transit_like,
            dict(n=5, lines=343),
            r"^lines must be an integer in \[1, 342\]; got 343\.$",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            make(**kwargs)
    small = cdr_like(300, n_cells=50, mean_cells=4.0, max_items=6, seed=1)
    assert small.shape == (300, 50) and small.dtype == np.uint8
    assert small.sum(axis=1).max() <= 6 and small.sum(axis=1).min() >= 1
    transit = transit_like(
        300, n_stations=40, mean_stations=3.0, lines=4, max_items=5, seed=1
    )
    assert transit.shape == (300, 40) and transit.sum(axis=1).max() <= 5
    assert transit.sum(axis=1).min() >= 1
