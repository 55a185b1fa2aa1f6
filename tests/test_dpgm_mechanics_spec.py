"""MWEM, the counting queries, the RFF map and the synthetic data, case by
case: every refusal with its full text, the defaults, the empty and boundary
inputs, one MWEM round recomputed by hand (Hardt et al. 2012, Alg. 1), and
the structure the synthetic generators document (000 Table 5.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import sparse

from fedleak.dpgm.components import VAEComponent, make_component
from fedleak.dpgm.estimator import DPGM, calibrate_sigma_g
from fedleak.dpgm.kmeans import (
    clustering_accuracy,
    dp_kmeans,
    kmeans_epsilon,
    kmeans_sigma,
    noisy_lloyd,
    private_kernel_kmeans,
)
from fedleak.dpgm.mwem import MWEMResult, clip_records, mwem
from fedleak.dpgm.queries import (
    QueryWorkload,
    random_item_queries,
    relative_errors,
)
from fedleak.dpgm.rff import RandomFourierFeatures, median_gamma
from fedleak.dpgm.synthetic import cdr_like, transit_like
from fedleak.errors import ConfigError, DataError
from fedleak.privacy.accounting import dpgm_epsilon


class _LaplaceRecorder(np.random.Generator):
    """A numpy Generator that records every Laplace call: (loc, scale, value)."""

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.PCG64(seed))
        self.laplace_calls: list[tuple[float, float, float]] = []

    def laplace(self, loc=0.0, scale=1.0, size=None):  # type: ignore[override]
        value = super().laplace(loc, scale, size)
        self.laplace_calls.append((float(loc), float(scale), float(value)))
        return value


def _small_data(seed: int = 4) -> tuple[np.ndarray, QueryWorkload]:
    rng = np.random.default_rng(seed)
    records = (rng.random((200, 12)) < 0.2).astype(float)
    records[:, 0] = 1.0
    records[records.sum(axis=1) > 3, 5:] = 0  # at most 5 items: no clipping draws
    return records, random_item_queries(12, 4, n_queries=20, seed=1)


# -------------------------------------------------------------------- MWEM


def test_one_mwem_round_by_hand() -> None:
    """T = 1, one update pass: ``A_0 = mass / m``; the measured query ``q``
    gets ``m = q(B) + Lap``; ``A_1 = A_0 exp(q (m - q(A_0)) / (2 mass))``
    renormalised to ``mass``; the release is ``A_1``. Every Laplace draw is
    centred at 0."""
    records, workload = _small_data()
    recorder = _LaplaceRecorder(11)
    result = mwem(
        records, workload, 3.0, iterations=1, clip=5, update_passes=1, seed=recorder
    )
    assert [loc for loc, _, _ in recorder.laplace_calls] == [0.0, 0.0]
    truth = records.sum(axis=0)
    mass = max(truth.sum() + recorder.laplace_calls[0][2], 1.0)
    queries = workload.matrix().toarray()
    row = queries[result.selected[0]]
    measured = row @ truth + recorder.laplace_calls[1][2]
    start = np.full(12, mass / 12)
    updated = start * np.exp(row * (measured - row @ start) / (2.0 * mass))
    updated *= mass / updated.sum()
    np.testing.assert_allclose(result.histogram, updated, rtol=1e-12)
    assert result.n_records == 200 and result.epsilon == 3.0


def test_mwem_mass_is_at_least_one() -> None:
    """A total visit count that the noise drives below 1 is released as 1."""
    records = np.zeros((50, 6))
    records[0, 2] = 1.0
    workload = random_item_queries(6, 1, n_queries=5, seed=0)
    for seed in range(20):
        recorder = _LaplaceRecorder(seed)
        result = mwem(records, workload, 0.05, iterations=1, clip=1, seed=recorder)
        mass = 1.0 + recorder.laplace_calls[0][2]
        if mass < 1.0:
            assert result.histogram.sum() == pytest.approx(1.0, rel=1e-12)
            return
    pytest.fail("no seed drew a negative mass noise")  # pragma: no cover


def test_mwem_defaults_are_the_seed_settings() -> None:
    """T = 50, clip 12, 5% of the budget on the mass, 10 update passes."""
    records, workload = _small_data()
    default = mwem(records, workload, 1.0, seed=3)
    explicit = mwem(
        records,
        workload,
        1.0,
        iterations=50,
        clip=12,
        total_share=0.05,
        update_passes=10,
        seed=3,
    )
    assert len(default.selected) == 50
    assert default.selected == explicit.selected
    np.testing.assert_array_equal(default.histogram, explicit.histogram)
    recorder = _LaplaceRecorder(0)
    mwem(records, workload, 1.0, iterations=1, seed=recorder)
    assert recorder.laplace_calls[0][1] == pytest.approx(12 / 0.05)


def test_a_large_budget_does_not_overflow_the_exponential_mechanism() -> None:
    records, workload = _small_data()
    result = mwem(records, workload, 1e4, iterations=2, clip=5, seed=0)
    assert np.isfinite(result.histogram).all() and len(result.selected) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 0.0}, r"^epsilon must be a finite number > 0; got 0\.0\.$"),
        ({"iterations": 0}, r"^iterations must be an integer >= 1; got 0\.$"),
        ({"clip": 0}, r"^clip must be an integer >= 1; got 0\.$"),
        ({"total_share": 0.0}, r"^total_share must be in \(0, 1\); got 0\.0\.$"),
        ({"total_share": 1.0}, r"^total_share must be in \(0, 1\); got 1\.0\.$"),
    ],
)
def test_mwem_refusals(kwargs: dict[str, float], message: str) -> None:
    records, workload = _small_data()
    options = dict(kwargs)  # the parameter set is shared between runs
    epsilon = options.pop("epsilon", 1.0)
    with pytest.raises(ConfigError, match=message):
        mwem(records, workload, epsilon, **options)  # type: ignore[arg-type]


def test_mwem_boundaries_and_item_mismatch() -> None:
    records, workload = _small_data()
    one = mwem(records, workload, 1.0, iterations=1, clip=1, seed=0)
    assert len(one.selected) == 1
    with pytest.raises(DataError, match=r"^records have 11 items; the workload 12\.$"):
        mwem(records[:, :11], workload, 1.0)


def test_clipping_keeps_distinct_items_and_draws_only_when_needed() -> None:
    records = np.zeros((30, 10))
    records[:20, :8] = 1  # twenty records above the clip
    records[20:, :3] = 1  # ten exactly at the clip
    clipped = clip_records(records, 3, np.random.default_rng(0)).toarray()
    assert clipped.max() == 1.0
    assert (np.count_nonzero(clipped, axis=1) == 3).all()
    rng = np.random.default_rng(5)
    at_clip = clip_records(records[20:], 3, rng)
    np.testing.assert_array_equal(at_clip.toarray(), records[20:])
    assert rng.random() == np.random.default_rng(5).random()  # nothing drawn
    empty = clip_records(np.zeros((0, 4)), 2, np.random.default_rng(0))
    assert empty.shape == (0, 4) and empty.nnz == 0
    sparse_in = clip_records(sparse.csr_matrix(records[20:]), 3, rng)
    np.testing.assert_array_equal(sparse_in.toarray(), records[20:])


def test_answers_assume_independent_items() -> None:
    """``all = |X| prod p_i``, ``any = |X| (1 - prod (1 - p_i))`` with the item
    frequencies clipped to [0, 1]."""
    result = MWEMResult(
        histogram=np.array([50.0, 25.0, 0.0, 100.0, 150.0, -10.0]),
        n_records=100,
        epsilon=1.0,
        selected=[],
    )
    np.testing.assert_array_equal(
        result.item_frequencies(), [0.5, 0.25, 0.0, 1.0, 1.0, 0.0]
    )
    workload = QueryWorkload(
        items=[np.array([0, 1]), np.array([2]), np.array([3]), np.array([0, 4])],
        groups=np.ones(4, np.int64),
        n_items=6,
    )
    all_ = result.answer(workload, "all")
    any_ = result.answer(workload, "any")
    assert all_[0] == pytest.approx(12.5) and all_[3] == pytest.approx(50.0)
    assert all_[1] < 1e-200 and all_[2] == pytest.approx(100.0)
    assert any_[0] == pytest.approx(62.5) and any_[1] == 0.0
    assert any_[2] == pytest.approx(100.0) and any_[3] == pytest.approx(100.0)
    with pytest.raises(
        ConfigError, match=r"^mode must be 'all' or 'any'; got 'most'\.$"
    ):
        result.answer(workload, "most")  # type: ignore[arg-type]


# ----------------------------------------------------------------- queries


def test_workload_matrix_marks_each_query_items() -> None:
    workload = QueryWorkload(
        items=[np.array([0, 1]), np.array([2])],
        groups=np.array([1, 1]),
        n_items=10,
    )
    matrix = workload.matrix()
    assert matrix.shape == (2, 10)
    expected = np.zeros((2, 10))
    expected[0, [0, 1]] = expected[1, 2] = 1
    np.testing.assert_array_equal(matrix.toarray(), expected)
    empty = QueryWorkload(items=[], groups=np.zeros(0, np.int64), n_items=5).matrix()
    assert empty.shape == (0, 5) and empty.nnz == 0


def test_workload_defaults_and_short_bounds() -> None:
    """Seed 0 by default; a group whose length bound rounds down to 0 still
    gets one-item queries."""
    default = random_item_queries(30, 6, n_queries=10)
    seeded = random_item_queries(30, 6, n_queries=10, seed=0)
    assert [q.tolist() for q in default.items] == [q.tolist() for q in seeded.items]
    short = random_item_queries(30, 1, n_queries=50, n_groups=5, seed=2)
    assert all(q.size == 1 for q in short.items)


def test_relative_error_bound_for_small_data_sets() -> None:
    """The sanity bound is 0.1% of |X| even below one record (10 records:
    0.01), and 1e-12 for an empty data set."""
    np.testing.assert_allclose(relative_errors([0], [0.5], 10), [50.0])
    np.testing.assert_allclose(relative_errors([0], [0.5], 0), [0.5e12])
    with pytest.raises(DataError, match=r"^shapes differ: \(2,\) and \(1,\)\.$"):
        relative_errors([1, 2], [1], 10)


# --------------------------------------------------------------------- RFF


def test_median_gamma_of_two_records_and_of_byte_records() -> None:
    """Two records suffice; uint8 records (as the synthetic data come) give
    the same gamma as floats, not wrapped-around differences."""
    two = np.array([[0.0, 0.0], [1.0, 1.0]])
    assert median_gamma(two, seed=0) == 0.5
    with pytest.raises(
        DataError,
        match=r"^median_gamma needs at least two public records \(2-d array\)\.$",
    ):
        median_gamma(two[:1])
    records = transit_like(60, seed=1)
    assert median_gamma(records, seed=3) == median_gamma(records.astype(float), seed=3)
    far = np.array([[0], [20]], np.uint8)  # 20**2 = 400 wraps to 144 in uint8
    assert median_gamma(far, seed=0) == 1 / 400


def test_rff_map_of_byte_records_equals_the_float_map() -> None:
    records = transit_like(20, seed=0)
    rff = RandomFourierFeatures(342, 16, 0.1, seed=2)
    np.testing.assert_allclose(rff.transform(records), rff.transform(records * 1.0))


# ----------------------------------------------------------- synthetic data


def test_synthetic_defaults_are_table_5_2() -> None:
    assert cdr_like().shape == (20_000, 1303)
    assert transit_like().shape == (20_000, 342)
    np.testing.assert_array_equal(
        cdr_like(150),
        cdr_like(
            150, n_cells=1303, mean_cells=11.4, communities=8, max_items=422, seed=0
        ),
    )
    np.testing.assert_array_equal(
        transit_like(300),
        transit_like(
            300, n_stations=342, mean_stations=5.3, lines=12, max_items=57, seed=0
        ),
    )
    np.testing.assert_array_equal(cdr_like(40, seed=3), cdr_like(40, seed=3))


def test_cdr_records_average_the_seed_length_and_favour_popular_cells() -> None:
    """8,000 records: the mean ||x||_1 is 11.4 within 0.55 (about five
    standard errors: the variance of the lengths is about 100, so the mean's
    error is 0.11; measured 11.38 on seed 0, 11.1-12.1 over seeds 0-3 at
    2,000 records). Zipf popularity: the 13 most visited cells (1%) hold
    about 18% of the visits (17.7-20.2% over seeds 0-3); asserted above 10%
    (uniform cells would hold about 1%)."""
    records = cdr_like(8000, seed=0)
    assert records.dtype == np.uint8
    assert records.sum(axis=1).mean() == pytest.approx(11.4, abs=0.55)
    visits = np.sort(records.sum(axis=0))[::-1]
    assert visits[:13].sum() / visits.sum() > 0.10


def test_transit_records_leave_the_home_and_work_lines_sometimes() -> None:
    """30% of the further trips go anywhere: among records of 4 or more
    stations, about 72-75% touch 3 or more lines (seeds 0-2); asserted above
    30%. With every trip local it would be 0."""
    records = transit_like(2000, seed=0)
    assert records.dtype == np.uint8
    line_of = np.minimum(np.arange(342) * 12 // 342, 11)
    big = records[records.sum(axis=1) >= 4]
    spans = np.array([np.unique(line_of[np.flatnonzero(r)]).size for r in big])
    assert (spans >= 3).mean() > 0.3


def test_transit_below_two_stations_on_average_makes_no_trips() -> None:
    records = transit_like(300, mean_stations=1.5, seed=0)
    assert records.sum(axis=1).max() <= 2


def test_transit_refusals_and_boundaries() -> None:
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 1; got 0\.$"):
        transit_like(0)
    with pytest.raises(
        ConfigError, match=r"^n_stations must be an integer >= 2; got 1\.$"
    ):
        transit_like(5, n_stations=1, mean_stations=1.0, lines=1)
    assert transit_like(1, seed=0).shape == (1, 342)
    assert transit_like(4, n_stations=2, mean_stations=1.0, lines=1).shape == (4, 2)


# ------------------------------------------------------------------ k-means


def _blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(0, 0.1, (40, 3)), rng.normal(3, 0.1, (40, 3))])
    return x, x[[0, 1, 40, 41]]


def test_secure_lloyd_draws_its_noise_from_the_os(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Secure mode: every size and sum noise comes from the CSPRNG (two
    uniforms per Box-Muller draw), and a seed given with it is refused (it
    used to be dropped silently)."""
    from fedleak.privacy import randomness

    calls: list[object] = []
    original = randomness.secure_uniform

    def spy(size: int | tuple[int, ...]) -> np.ndarray:
        calls.append(size)
        return original(size)

    monkeypatch.setattr(randomness, "secure_uniform", spy)
    x, _ = _blobs()
    start = x[[0, 40]]
    centers, labels, sizes = noisy_lloyd(
        x, start, iterations=2, sigma_k=0.5, clip_norm=5.0, secure_mode=True
    )
    assert calls == [2, 2, (2, 3), (2, 3)] * 2
    assert centers.shape == (2, 3) and labels.shape == (80,) and sizes.shape == (2,)
    with pytest.raises(
        ConfigError, match=r"^Passing seed is prohibited in secure mode"
    ):
        noisy_lloyd(
            x, start, iterations=1, sigma_k=0.5, clip_norm=5.0, rng=1, secure_mode=True
        )


def test_lloyd_without_noise_is_lloyd() -> None:
    """sigma_K = 0: a one-point cluster's centre is that point (noisy size 1,
    not the floor's); with no iteration the start comes back as float64 and
    every cluster has a (possibly zero) size."""
    x = np.array([[0.0, 0.0], [0.2, 0.0], [10.0, 10.0]])
    centers, labels, sizes = noisy_lloyd(
        x, np.array([[0.0, 0.0], [9.0, 9.0]]), iterations=1, sigma_k=0.0, clip_norm=20
    )
    np.testing.assert_allclose(centers, [[0.1, 0.0], [10.0, 10.0]])
    assert labels.tolist() == [0, 0, 1] and sizes.tolist() == [2.0, 1.0]
    start = np.array([[0, 0], [50, 50], [60, 60]])
    same, _, counts = noisy_lloyd(x, start, iterations=0, sigma_k=1.0, clip_norm=20)
    assert same.dtype == np.float64
    np.testing.assert_array_equal(same, start)
    assert counts.tolist() == [3.0, 0.0, 0.0]


def test_raw_results_assign_without_a_feature_map() -> None:
    x, public = _blobs()
    result = dp_kmeans(x, 2, public=public, sigma_k=0.0, iterations=2, seed=0)
    assert result.feature_map is None
    assert result.assign(x).tolist() == result.labels.tolist()
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(
        result.features(x), x / np.maximum(1.0, norms / np.sqrt(3))
    )
    kernel = private_kernel_kmeans(
        x, 2, public=public, sigma_k=0.0, iterations=2, d=32, seed=0
    )
    assert kernel.features(x).shape == (80, 32)


def test_dpnorm_is_counted_in_every_epsilon() -> None:
    """With DPNorm (sigma_c) the result's epsilon, on the default and on a
    custom lambda grid, is Eq. 5.2 with the DPNorm term: larger than
    without it."""
    x, public = _blobs()
    result = private_kernel_kmeans(
        x, 2, public=public, sigma_k=2.0, iterations=3, d=16, sigma_c=1.5, seed=1
    )
    grid = np.array([1.0, 2.0])  # coarser than the default: a larger epsilon
    assert result.epsilon(1e-5) == kmeans_epsilon(3, 2.0, 1e-5, 1.5)
    assert result.epsilon(1e-5) > kmeans_epsilon(3, 2.0, 1e-5)
    assert result.epsilon_on(1e-5, grid) == kmeans_epsilon(3, 2.0, 1e-5, 1.5, grid)
    assert result.epsilon_on(1e-5, grid) != result.epsilon(1e-5)
    assert kmeans_epsilon(3, 2.0, 1e-5, 1.5, grid) > kmeans_epsilon(
        3, 2.0, 1e-5, None, grid
    )
    explicit = private_kernel_kmeans(
        x,
        2,
        public=public,
        sigma_k=2.0,
        iterations=3,
        d=16,
        sigma_c=1.5,
        c_max=10.0,
        bins=100,
        seed=1,
    )
    assert explicit.clip_norm == result.clip_norm  # DPNorm's defaults
    other = private_kernel_kmeans(
        x,
        2,
        public=public,
        sigma_k=2.0,
        iterations=3,
        d=16,
        sigma_c=1.5,
        c_max=3.0,
        bins=7,
        seed=1,
    )
    assert other.clip_norm != result.clip_norm


def test_kmeans_sigma_with_dpnorm_meets_the_budget() -> None:
    """The bracket grows and the bisection runs on the epsilon with DPNorm:
    at 0.8 (DPNorm alone spends 0.54) the doubling search without it would
    stop at 32, which spends more."""
    sigma = kmeans_sigma(0.8, 1e-5, 10, sigma_c=30.0)
    assert kmeans_epsilon(10, sigma, 1e-5, 30.0) <= 0.8
    assert kmeans_epsilon(10, sigma * 0.999, 1e-5, 30.0) > 0.8
    assert sigma > kmeans_sigma(0.8, 1e-5, 10)


def test_kmeans_sigma_refusals_name_the_reason() -> None:
    grid = np.arange(1.0, 9.0)
    floor = kmeans_epsilon(5, 1e12, 1e-5, None, grid)
    with pytest.raises(
        ConfigError,
        match=rf"^k-means cannot meet epsilon={floor} at delta=1e-05: even infinite "
        rf"count/sum noise leaves epsilon={floor:.4g} \(DPNorm sigma_c=None, largest "
        r"lambda 8\.0\)\. Use a longer lambda grid, a larger delta or more DPNorm "
        r"noise\.$",
    ):
        kmeans_sigma(floor, 1e-5, 5, lambdas=grid)
    dpnorm_floor = kmeans_epsilon(5, 1e12, 1e-5, 0.5)
    with pytest.raises(ConfigError, match=r"sigma_c=0\.5, largest lambda 32\.0\)"):
        kmeans_sigma(dpnorm_floor * 0.999, 1e-5, 5, sigma_c=0.5)
    # between the floor and the epsilon at sigma_K = 2**24 (past 1e7)
    just_above = (floor + kmeans_epsilon(5, 2.0**24, 1e-5, None, grid)) / 2
    assert floor < just_above < kmeans_epsilon(5, 2.0**23, 1e-5, None, grid)
    with pytest.raises(
        ConfigError, match=rf"^k-means cannot meet epsilon={just_above}\.$"
    ):
        kmeans_sigma(just_above, 1e-5, 5, lambdas=grid)


def test_clustering_accuracy_refusals_and_one_record() -> None:
    assert clustering_accuracy([3], [7]) == 1.0
    message = r"^labels_true and labels_pred must be 1-d of the same length\.$"
    for truth, pred in (([1, 2], [1]), ([[1, 2]], [[1, 2]]), ([], [])):
        with pytest.raises(DataError, match=message):
            clustering_accuracy(truth, pred)


# --------------------------------------------------------------- components


def _weights(component: object) -> list[np.ndarray]:
    module = component.module  # type: ignore[attr-defined]
    return [p.detach().numpy().copy() for p in module.parameters()]


def test_components_default_to_the_seed_and_seed_zero() -> None:
    """The VAE's latent dimension is 2 and every initialisation is seeded
    (seed 0 unless given): two builds are identical."""
    for a, b in (
        (VAEComponent(12), VAEComponent(12, (200,), 2, 0)),
        (make_component("vae", 12), make_component("vae", 12, seed=0)),
        (make_component("rbm", 12), make_component("rbm", 12, seed=0)),
    ):
        wa, wb = _weights(a), _weights(b)
        assert [w.shape for w in wa] == [w.shape for w in wb]
        for x, y in zip(wa, wb, strict=True):
            np.testing.assert_array_equal(x, y)
    assert not np.array_equal(
        _weights(VAEComponent(12, seed=1))[0], _weights(VAEComponent(12))[0]
    )


# ------------------------------------------------------------------- DPGM


def _binary(n: int = 40, m: int = 6, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, m)) < 0.3).astype(np.float32)


def _small(**kwargs: object) -> DPGM:
    settings: dict[str, object] = dict(
        sigma_g=1.0,
        sigma_k=5.0,
        epochs=1,
        batch_size=8,
        hidden=4,
        rff_dim=8,
        kmeans_iterations=2,
        seed=3,
    )
    settings.update(kwargs)
    return DPGM(**settings)  # type: ignore[arg-type]


def test_dpgm_defaults_are_stored_as_given() -> None:
    params = DPGM().get_params()
    assert params["progress"] is False and params["k"] == 10
    assert (params["sigma_k"], params["sigma_c"]) == (60.0, 8.0)
    given = DPGM(gamma=0.5, density_prior=0.2, lambdas=[1.0, 2.0]).get_params()
    assert (given["gamma"], given["density_prior"], given["lambdas"]) == (
        0.5,
        0.2,
        [1.0, 2.0],
    )


def test_a_seeded_fit_with_clustering_is_reproducible() -> None:
    """k = 2: the clustering, the initial weights, the DP-SGD noise, the VAE's
    draws and the sampling all come from the seed."""
    x, public = _binary(), _binary(10, seed=1)
    a = _small(k=2).fit(x, public)
    b = _small(k=2).fit(x, public)
    np.testing.assert_array_equal(a.weights_, b.weights_)
    assert a.clip_norms_ == b.clip_norms_
    np.testing.assert_array_equal(a.sample(30), b.sample(30))
    np.testing.assert_array_equal(a.sample_component(1, 5), b.sample_component(1, 5))
    for pa, pb in zip(
        a.components_[0].module.parameters(),
        b.components_[0].module.parameters(),
        strict=True,
    ):
        torch.testing.assert_close(pa, pb)


def test_dpgm_passes_its_settings_on() -> None:
    x, public = _binary(), _binary(10, seed=1)
    model = _small(
        k=2, gamma=0.25, rff_dim=12, kmeans_iterations=3, hidden=5, latent_dim=3
    ).fit(x, public)
    clustering = model.clustering_
    assert clustering is not None and clustering.iterations == 3
    assert clustering.feature_map is not None
    assert (clustering.feature_map.d, clustering.feature_map.gamma) == (12, 0.25)
    vae = model.components_[0].vae
    assert vae.to_output.bias.shape == (6,)
    shapes = [tuple(p.shape) for p in vae.parameters()]
    assert (5, 6) in shapes and (3, 5) in shapes  # hidden 5, latent 3
    assert model.epsilon_ == dpgm_epsilon(
        q=8 / 40,
        sgd_steps=5,
        sigma_g=1.0,
        sigma_c=8.0,
        kmeans_iterations=3,
        sigma_k=5.0,
        delta=1 / 40,
    )


def test_the_density_prior_starts_the_output_bias() -> None:
    model = _small(k=1, density_prior=0.1, lr=1e-12).fit(_binary())
    bias = model.components_[0].vae.to_output.bias.detach().numpy()
    np.testing.assert_allclose(bias, math.log(0.1 / 0.9), atol=1e-6)


def test_a_custom_lambda_grid_is_used_for_calibration_and_the_report() -> None:
    grid = np.array([20.0, 32.0])  # without the best order (2)
    budget = dict(q=0.2, sgd_steps=5, delta=1 / 40, sigma_c=8.0, kmeans_iterations=0)
    coarse = calibrate_sigma_g(4.0, sigma_k=5.0, lambdas=grid, **budget)  # type: ignore[arg-type]
    fine = calibrate_sigma_g(4.0, sigma_k=5.0, **budget)  # type: ignore[arg-type]
    assert coarse > fine
    model = DPGM(
        k=1, epsilon=4.0, epochs=1, batch_size=8, hidden=4, lambdas=grid, seed=0
    ).fit(_binary())
    assert model.sigma_g_ == coarse
    assert model.epsilon_ == dpgm_epsilon(
        q=0.2,
        sgd_steps=5,
        sigma_g=coarse,
        sigma_c=8.0,
        kmeans_iterations=0,
        sigma_k=60.0,
        delta=1 / 40,
        lambdas=grid,
    )
    assert model.epsilon_ <= 4.0


def test_calibration_refusal_in_full() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^DPGM cannot meet epsilon=0\.5 at delta=0\.01: with 20 k-means "
        r"iterations at sigma_k=1\.0 and DPNorm at sigma_c=1\.0 over 100 steps, the "
        r"spend is already \d+\.\d{3} before any gradient noise\. Raise sigma_k or "
        r"sigma_c, use fewer k-means iterations, fewer epochs or a smaller batch, "
        r"fixed clipping, k=1, or a larger epsilon\.$",
    ):
        calibrate_sigma_g(
            0.5,
            q=0.1,
            sgd_steps=100,
            delta=0.01,
            sigma_c=1.0,
            kmeans_iterations=20,
            sigma_k=1.0,
        )


def test_dpgm_refusals_in_full() -> None:
    x = _binary()
    with pytest.raises(
        ConfigError,
        match=r"^give exactly one of epsilon \(a target budget\) and sigma_g "
        r"\(a gradient noise multiplier\)\.$",
    ):
        DPGM(k=1).fit(x)
    with pytest.raises(
        ConfigError,
        match=r"^private kernel k-means starts its centres on public records "
        r"\(Alg\. 4 line 7\): pass public=\.\.\. \(records from the same "
        r"distribution, not in X\), or use k=1\.$",
    ):
        _small(k=2).fit(x)
    with pytest.raises(
        DataError,
        match=r"^X must hold values in \[0, 1\] \(binary or binarised data\)\.$",
    ):
        _small(k=1).fit(x * 1.5)
    with pytest.raises(ConfigError, match=r"^epsilon must be a finite number > 0"):
        DPGM(k=1, epsilon=0.0, epochs=1, batch_size=8, hidden=4).fit(x)


def test_dpgm_takes_two_records_and_any_numeric_dtype() -> None:
    two = _small(k=1, batch_size=1).fit(np.array([[0, 1, 1], [1, 0, 0]]))
    assert two.n_samples_fit_ == 2
    wide = _small(k=1).fit(_binary().astype(np.float64))
    assert wide.sample(4).dtype == np.float32


def test_samples_are_binary_float32_by_default_and_components_give_probabilities() -> (
    None
):
    model = _small(k=1).fit(_binary())
    records = model.sample(50)
    assert records.dtype == np.float32 and set(np.unique(records)) <= {0.0, 1.0}
    probabilities = model.sample_component(0, 20)
    assert probabilities.dtype == np.float32
    assert ((probabilities > 0) & (probabilities < 1)).any()
    draws = model.sample_component(0, 20, binary=True)
    assert set(np.unique(draws)) <= {0.0, 1.0}


def test_progress_is_reported_every_ten_steps_and_at_the_end() -> None:
    calls: list[tuple[str, int, int]] = []
    model = _small(k=1, epochs=5, batch_size=2, progress=lambda *a: calls.append(a))
    model.fit(_binary(n=10))
    assert model.steps_ == 25
    assert calls == [("train", 10, 25), ("train", 20, 25), ("train", 25, 25)]


def test_progress_bar_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``progress`` nothing goes to stderr; with ``True`` the rich bar
    does (transient: off a terminal only its closing line is left)."""
    _small(k=1).fit(_binary())
    assert capsys.readouterr().err == ""
    _small(k=1, progress=True).fit(_binary())
    assert capsys.readouterr().err != ""


def test_components_are_weighted_evenly_when_every_noisy_size_is_negative() -> None:
    """The mixture weights are the noisy cluster sizes floored at 0 and
    normalised; when all of them are negative, every component weighs 1/k."""
    x, public = _binary(), _binary(10, seed=1)
    for seed in range(40):
        model = _small(k=2, sigma_k=1e6, kmeans_iterations=1, seed=seed).fit(x, public)
        assert model.clustering_ is not None
        sizes = model.clustering_.noisy_sizes
        if (sizes <= 0).all():
            np.testing.assert_array_equal(model.weights_, [0.5, 0.5])
            return
        floored = np.maximum(sizes, 0.0)
        np.testing.assert_allclose(model.weights_, floored / floored.sum())
    pytest.fail("no seed gave two negative noisy sizes")  # pragma: no cover


def test_a_one_step_fit_reports_its_step() -> None:
    calls: list[tuple[str, int, int]] = []
    _small(k=1, batch_size=40, progress=lambda *a: calls.append(a)).fit(_binary())
    assert calls == [("train", 1, 1)]


def test_the_package_loads_its_torch_names_on_first_use() -> None:
    import fedleak.dpgm as package
    from fedleak.dpgm import components, estimator

    assert package.DPGM is estimator.DPGM
    assert package.calibrate_sigma_g is estimator.calibrate_sigma_g
    assert package.VAEComponent is components.VAEComponent
    with pytest.raises(
        AttributeError, match=r"^module 'fedleak\.dpgm' has no attribute 'Missing'$"
    ):
        package.Missing  # noqa: B018
