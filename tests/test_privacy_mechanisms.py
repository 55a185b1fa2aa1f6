"""Gaussian/Laplace mechanisms, secure noise and DPNorm (seed 000 Alg. 6)."""

from __future__ import annotations

import math
import re
from typing import Any

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from fedleak.errors import ConfigError
from fedleak.privacy.dpnorm import dp_norm, norm_histogram
from fedleak.privacy.mechanisms import (
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
)
from fedleak.privacy.randomness import check_rng, noise_generator, secure_uniform

N = 20_000


def _std_in_chi2_interval(sample: np.ndarray, std: float, alpha: float = 1e-4) -> bool:
    """Two-sided chi-square confidence interval for the std of a normal sample."""
    n = sample.size
    s2 = float(np.var(sample, ddof=1))
    low = (n - 1) * s2 / stats.chi2.ppf(1 - alpha / 2, n - 1)
    high = (n - 1) * s2 / stats.chi2.ppf(alpha / 2, n - 1)
    return bool(low <= std**2 <= high)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("sigma", "sensitivity"), [(1.0, 1.0), (2.5, 0.4), (0.3, 7)])
def test_gaussian_noise_std_matches_sigma_times_sensitivity(
    seed: int, sigma: float, sensitivity: float
) -> None:
    out = gaussian_mechanism(np.zeros(N), sensitivity, sigma=sigma, rng=seed)
    assert _std_in_chi2_interval(out, sigma * sensitivity)
    assert abs(out.mean()) < 5 * sigma * sensitivity / math.sqrt(N)


def test_gaussian_secure_mode_noise_is_normal_with_the_right_std() -> None:
    out = gaussian_mechanism(np.zeros(N), 2.0, sigma=1.5, secure_mode=True)
    assert _std_in_chi2_interval(out, 3.0)
    assert stats.kstest(out / 3.0, "norm").pvalue > 1e-4


@pytest.mark.parametrize("seed", range(3))
def test_laplace_noise_has_scale_sensitivity_over_epsilon(seed: int) -> None:
    out = laplace_mechanism(np.zeros(N), 2.0, 0.5, rng=seed)
    assert stats.kstest(out, "laplace", args=(0, 4.0)).pvalue > 1e-4
    secure = laplace_mechanism(np.zeros(N), 2.0, 0.5, secure_mode=True)
    assert stats.kstest(secure, "laplace", args=(0, 4.0)).pvalue > 1e-4


def test_same_seed_same_noise_and_scalar_in_scalar_out() -> None:
    a = gaussian_mechanism([1.0, 2.0, 3.0], 1.0, sigma=1.0, rng=7)
    b = gaussian_mechanism([1.0, 2.0, 3.0], 1.0, sigma=1.0, rng=7)
    np.testing.assert_array_equal(a, b)
    value = laplace_mechanism(5.0, 1.0, 1.0, rng=3)
    assert isinstance(value, float)
    assert value == laplace_mechanism(5.0, 1.0, 1.0, rng=np.random.default_rng(3))


def test_secure_mode_refuses_a_seed() -> None:
    with pytest.raises(ConfigError, match="secure mode"):
        gaussian_mechanism(1.0, 1.0, sigma=1.0, rng=1, secure_mode=True)
    with pytest.raises(ConfigError, match="secure mode"):
        laplace_mechanism(1.0, 1.0, 1.0, rng=1, secure_mode=True)


def test_epsilon_delta_calibration_uses_the_analytic_gaussian() -> None:
    assert gaussian_sigma(1.0, 1e-5) == pytest.approx(
        dp_accounting.get_sigma_gaussian(1.0, 1e-5)
    )
    out = gaussian_mechanism(np.zeros(N), 1.0, epsilon=1.0, delta=1e-5, rng=0)
    assert _std_in_chi2_interval(out, gaussian_sigma(1.0, 1e-5))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sigma": 1.0, "epsilon": 1.0, "delta": 1e-5},
        {},
        {"epsilon": 1.0},
        {"sigma": -1.0},
    ],
)
def test_gaussian_rejects_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        gaussian_mechanism(1.0, 1.0, **kwargs)


def test_rng_helper_rejects_negative_seeds_and_bools() -> None:
    with pytest.raises(ConfigError):
        check_rng(-1)
    with pytest.raises(ConfigError):
        check_rng(True)


def test_secure_uniform_is_inside_the_open_unit_interval() -> None:
    u = secure_uniform((100, 3))
    assert u.shape == (100, 3)
    assert np.all((u > 0) & (u < 1))


def test_norm_histogram_bins_are_left_open_right_closed() -> None:
    counts = norm_histogram([0.0, 0.1, 0.1000001, 1.0, 10.0, 10.5], c_max=10, bins=100)
    assert counts[0] == 2  # 0.1 is in (0, 0.1]; 0.0 joins the first bin
    assert counts[1] == 1
    assert counts[9] == 1
    assert counts[99] == 2  # 10.0 and, saturated, 10.5
    assert counts.sum() == 6


@pytest.mark.parametrize("seed", range(10))
def test_dp_norm_picks_the_mode_when_noise_is_small(seed: int) -> None:
    rng = np.random.default_rng(seed)
    norms = np.concatenate([rng.uniform(2.01, 2.1, 500), rng.uniform(0, 10, 300)])
    assert dp_norm(norms, 0.5, c_max=10, bins=100, rng=seed) == pytest.approx(2.1)


def test_dp_norm_is_random_when_noise_dominates() -> None:
    norms = np.full(3, 2.05)
    picks = {dp_norm(norms, 100.0, rng=s) for s in range(20)}
    assert len(picks) > 5


def test_dp_norm_count_noise_has_std_sqrt2_sigma() -> None:
    """Alg. 6 adds N(0, 2 sigma_C^2) to every count.

    Two bins with counts (2, 0): the second wins when N_2 - N_1 > 2, and the
    difference of two N(0, 2 sigma^2) draws is N(0, 4 sigma^2), so with
    sigma_C = 1 the rate is Phi(-1) = 0.159 (std without sqrt 2: Phi(-1.41) =
    0.079). 4000 draws: standard error 0.0058; the tolerance 0.025 is over four
    of them and the mutant misses by 0.08.
    """
    rng = np.random.default_rng(12)
    picks = np.array(
        [dp_norm([0.5, 0.7], 1.0, c_max=2.0, bins=2, rng=rng) for _ in range(4000)]
    )
    assert set(np.unique(picks)) <= {1.0, 2.0}
    assert np.mean(picks == 2.0) == pytest.approx(stats.norm.sf(1.0), abs=0.025)


def test_noise_generator_is_fresh_unless_seeded_and_then_follows_its_words() -> None:
    """The DP noise is not derivable from the experiment's seed: without a
    ``noise_seed`` every call draws fresh OS entropy; with one the stream is
    ``default_rng([noise_seed, *words])``, so each (client, round) has its own.
    """
    fresh = [noise_generator(None).integers(2**63) for _ in range(2)]
    assert fresh[0] != fresh[1]
    assert noise_generator(None, 5).integers(2**63) != noise_generator(
        None, 5
    ).integers(2**63)
    for words in [(7,), (7, 1, 2), (0, 0)]:
        np.testing.assert_array_equal(
            noise_generator(*words).random(4),
            np.random.default_rng(list(words)).random(4),
        )
    assert noise_generator(7, 1, 2).random() != noise_generator(7, 2, 1).random()
    for bad in [(-1,), (7, -1), (7, True), (True,), (7.0,), (7, 1.5)]:
        with pytest.raises(
            ConfigError,
            match=r"^noise_seed and its words must be non-negative ints; got "
            + re.escape(repr(list(bad)))
            + "$",
        ):
            noise_generator(*bad)  # type: ignore[arg-type]
