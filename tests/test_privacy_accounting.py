"""Moments accounting: sampled Gaussian, Theorem 4 (Hölder split), Theorem 5."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special, stats

from fedleak.errors import ConfigError
from fedleak.privacy.accounting import (
    DEFAULT_SPLITS,
    GaussianEvent,
    MomentsAccountant,
    SampledGaussianEvent,
    SharedBatchEvent,
    dpgm_epsilon,
    epsilon_from_log_moments,
    gaussian_log_moment,
    kmeans_log_moment,
    sgm_epsilon,
    sgm_log_moment,
    sgm_noise_multiplier,
    shared_batch_log_moment,
)


def _sgm_rdp_integer(q: float, sigma: float, alpha: int) -> float:
    """Order-alpha RDP of one Poisson-sampled Gaussian step, by hand.

    Mironov, Talwar and Zhang 2019 ("Renyi differential privacy of the sampled
    Gaussian mechanism", Sec. 3.3), integer alpha:
    ``A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 sigma^2))``
    and ``rdp = log(A_alpha) / (alpha - 1)``; summed in log space.
    """
    k = np.arange(alpha + 1)
    log_terms = (
        special.gammaln(alpha + 1)
        - special.gammaln(k + 1)
        - special.gammaln(alpha - k + 1)
        + (alpha - k) * math.log1p(-q)
        + k * math.log(q)
        + (k * k - k) / (2 * sigma**2)
    )
    return float(special.logsumexp(log_terms)) / (alpha - 1)


def _sgm_rdp_integral(q: float, sigma: float, alpha: float) -> float:
    """Order-alpha RDP (any alpha > 1) by numerical integration (same paper, Eq. 3):
    ``A_alpha = E_{z ~ N(0, sigma^2)} [((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha]``.
    """

    def integrand(z: float) -> float:
        log_ratio = np.logaddexp(
            math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * sigma**2)
        )
        return math.exp(stats.norm.logpdf(z, scale=sigma) + alpha * log_ratio)

    # the integrand is negligible (< e^-400) outside this interval
    low, high = -30 * sigma, 30 * sigma + 2 * alpha
    value, _ = integrate.quad(
        integrand, low, high, points=[0.0, 0.5], limit=200, epsabs=0, epsrel=1e-11
    )
    return math.log(value) / (alpha - 1)


def _epsilon_by_hand(rdp_total: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """RDP -> (epsilon, delta): Balle et al. 2020 ("Hypothesis testing
    interpretations and Renyi DP", Theorem 21), minimised over the orders:
    ``eps = rdp + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1)``.
    """
    eps = (
        rdp_total
        + np.log1p(-1 / orders)
        - (math.log(delta) + np.log(orders)) / (orders - 1)
    )
    return float(max(0.0, eps.min()))


@pytest.mark.parametrize(
    ("q", "sigma", "steps", "delta"),
    [
        (0.01, 1.1, 10_000, 1e-5),
        (0.0017, 4.0, 11_760, 1 / 60_000),
        (0.2, 0.8, 50, 1e-3),
    ],
)
def test_sgm_epsilon_matches_an_independent_derivation(
    q: float, sigma: float, steps: int, delta: float
) -> None:
    """sgm_epsilon against the sampled Gaussian's RDP summed by hand (integer
    orders 2..64) and the Balle et al. conversion, computed here without
    dp-accounting."""
    orders = np.arange(2, 65)
    rdp = np.array([_sgm_rdp_integer(q, sigma, int(a)) for a in orders])
    expected = _epsilon_by_hand(steps * rdp, orders.astype(float), delta)
    got = sgm_epsilon(q, sigma, steps, delta, orders.tolist())
    assert got == pytest.approx(expected, rel=1e-7)


def test_sgm_epsilon_agrees_with_the_public_accountant_on_its_default_orders() -> None:
    reference = (
        dp_accounting.rdp.RdpAccountant()
        .compose(
            dp_accounting.PoissonSampledDpEvent(
                0.01, dp_accounting.GaussianDpEvent(1.1)
            ),
            10_000,
        )
        .get_epsilon(1e-5)
    )
    assert sgm_epsilon(0.01, 1.1, 10_000, 1e-5) == pytest.approx(reference, abs=1e-6)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.1), (0.2, 2.0)])
def test_sgm_log_moment_matches_numerical_integration(q: float, sigma: float) -> None:
    """beta(lambda) = lambda * rdp(lambda + 1) against quadrature.

    Integer lambda: equal (to 1e-6). Fractional lambda (Theorem 4 evaluates
    beta at lambda / j): dp-accounting's series (Mironov et al. Sec. 3.3)
    lies above the quadrature of D(mu || mu_0) here (by up to 3% at q = 0.01
    and 75% at q = 0.2, lambda = 0.5), so it is asserted on the safe side:
    never below the integral.
    """
    integer = np.array([1.0, 3.0, 6.0])
    exact = [lam * _sgm_rdp_integral(q, sigma, lam + 1) for lam in integer]
    np.testing.assert_allclose(sgm_log_moment(q, sigma, integer), exact, rtol=1e-6)
    fractional = np.array([0.5, 1.7, 6.25])
    exact = [lam * _sgm_rdp_integral(q, sigma, lam + 1) for lam in fractional]
    got = sgm_log_moment(q, sigma, fractional)
    assert np.all(got >= np.asarray(exact) * (1 - 1e-6))
    assert np.all(got <= np.asarray(exact) * 1.8)


def test_sgm_log_moment_matches_the_public_accountant_at_fractional_orders() -> None:
    lambdas = np.array([0.5, 1.7, 3.0, 6.25, 15.0])
    beta = sgm_log_moment(0.01, 1.1, lambdas)
    orders = lambdas + 1.0
    eps, _ = compute_epsilon(orders, 1000 * beta / lambdas, 1e-5)
    assert eps == pytest.approx(
        sgm_epsilon(0.01, 1.1, 1000, 1e-5, orders.tolist()), abs=1e-6
    )


def test_known_value_from_the_project_perf_anchors() -> None:
    assert sgm_epsilon(0.01, 1.1, 10_000, 1e-5) == pytest.approx(5.632011, abs=1e-5)


@settings(max_examples=6, deadline=None)
@given(
    q=st.floats(0.001, 0.3),
    sigma=st.floats(0.7, 5.0),
    steps=st.integers(1, 2_000),
    extra=st.integers(1, 2_000),
)
def test_sgm_epsilon_is_monotone_in_steps_and_q(
    q: float, sigma: float, steps: int, extra: int
) -> None:
    base = sgm_epsilon(q, sigma, steps, 1e-5)
    assert sgm_epsilon(q, sigma, steps + extra, 1e-5) >= base - 1e-9
    assert sgm_epsilon(min(1.0, q * 1.5), sigma, steps, 1e-5) >= base - 1e-9


@pytest.mark.parametrize(("eps", "q", "steps"), [(1.0, 0.01, 1000), (4.0, 0.05, 300)])
def test_noise_multiplier_calibration_never_overshoots(
    eps: float, q: float, steps: int
) -> None:
    sigma = sgm_noise_multiplier(eps, 1e-5, q, steps)
    assert sgm_epsilon(q, sigma, steps, 1e-5) <= eps
    assert sgm_epsilon(q, sigma - 1e-3, steps, 1e-5) > eps * 0.99


def test_zero_steps_cost_nothing_and_bad_input_is_refused() -> None:
    assert sgm_epsilon(0.1, 1.0, 0, 1e-5) == 0.0
    bad: dict[str, Any]
    cases: list[dict[str, Any]] = [
        dict(q=1.5, noise_multiplier=1.0, steps=1, delta=1e-5),
        dict(q=0.1, noise_multiplier=0.0, steps=1, delta=1e-5),
        dict(q=0.1, noise_multiplier=1.0, steps=-1, delta=1e-5),
        dict(q=0.1, noise_multiplier=1.0, steps=1, delta=1.0),
    ]
    for bad in cases:
        with pytest.raises(ConfigError):
            sgm_epsilon(**bad)


@pytest.mark.parametrize(
    ("q", "sigma_c", "sigma_g"), [(0.01, 4.0, 1.0), (0.05, 2.0, 3.0), (1.0, 4.0, 4.0)]
)
def test_holder_split_is_between_independent_and_the_naive_equal_split(
    q: float, sigma_c: float, sigma_g: float
) -> None:
    lambdas = np.arange(1, 33, dtype=float)
    holder = shared_batch_log_moment(q, (sigma_c, sigma_g), lambdas)
    naive = 0.5 * sgm_log_moment(q, sigma_c, 2 * lambdas) + 0.5 * sgm_log_moment(
        q, sigma_g, 2 * lambdas
    )
    independent = sgm_log_moment(q, sigma_c, lambdas) + sgm_log_moment(
        q, sigma_g, lambdas
    )
    assert np.all(holder <= naive + 1e-12)
    # Theorem 4 exactly: min over the splits j of j b_C(lam / j) + (1 - j) b_G(lam / (1 - j))
    by_split = [
        j * sgm_log_moment(q, sigma_c, lambdas / j)
        + (1 - j) * sgm_log_moment(q, sigma_g, lambdas / (1 - j))
        for j in DEFAULT_SPLITS
    ]
    np.testing.assert_allclose(holder, np.min(by_split, axis=0), rtol=1e-12)
    # Sharing the batch costs more than two independent batches would (beta(lam)
    # / lam grows with lam, so every split is above the plain sum): the
    # independent sum is not a valid bound here and must not be returned.
    assert np.all(holder > independent * (1 + 1e-3))


def test_one_mechanism_needs_no_split() -> None:
    lambdas = np.arange(1, 10, dtype=float)
    np.testing.assert_allclose(
        shared_batch_log_moment(0.02, (1.3,), lambdas),
        sgm_log_moment(0.02, 1.3, lambdas),
    )
    with pytest.raises(ConfigError):
        shared_batch_log_moment(0.02, (1.0, 2.0), lambdas, splits=[[0.3, 0.3]])


def test_gaussian_log_moment_and_kmeans_moment_closed_forms() -> None:
    lam = np.array([1.0, 2.0, 5.0])
    np.testing.assert_allclose(gaussian_log_moment(2.0, lam), lam * (lam + 1) / 8.0)
    np.testing.assert_allclose(
        kmeans_log_moment(20, 4.0, 4.0, lam), 20 * lam * (lam + 1) * (2 / 32 + 1 / 32)
    )
    # a sampled Gaussian with q = 1 is the plain Gaussian mechanism
    np.testing.assert_allclose(
        sgm_log_moment(1.0, 2.0, lam), gaussian_log_moment(2.0, lam)
    )


def test_theorem5_on_a_documented_setting_matches_an_independent_derivation() -> None:
    """Theorem 5 with q = 1, where every moment has a closed form.

    Setting: T_K = 20 k-means iterations (sigma_K = 4, RBF so no DPNorm),
    T_S = 100 full-batch SGD steps with DPNorm (sigma_C = 4) and noise
    sigma_G = 8, delta = 1e-5, integer lambda <= 32. Derivation by hand:
    beta_K = 20 * lambda (lambda + 1) / 16; Theorem 4 with weights (j, 1 - j):
    beta_S = 100 * min_j lambda * [(lambda / j + 1) / 32 + (lambda / (1 - j) + 1) / 128];
    epsilon = min_lambda (beta_K + beta_S + ln 1e5) / lambda.
    """
    lam = np.arange(1, 33, dtype=float)
    j = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])[:, None]
    beta_s = 100 * np.min(
        lam * ((lam / j + 1) / (2 * 16) + (lam / (1 - j) + 1) / (2 * 64)), axis=0
    )
    beta_k = 20 * lam * (lam + 1) / 16
    expected = float(np.min((beta_k + beta_s + math.log(1e5)) / lam))
    got = dpgm_epsilon(
        q=1.0,
        sgd_steps=100,
        sigma_g=8.0,
        sigma_c=4.0,
        kmeans_iterations=20,
        sigma_k=4.0,
        delta=1e-5,
    )
    assert got == pytest.approx(expected, rel=1e-9)
    # without DPNorm in SGD the moments just add: closed form again
    beta = 20 * lam * (lam + 1) / 16 + 100 * lam * (lam + 1) / 128
    fixed = float(np.min((beta + math.log(1e5)) / lam))
    assert dpgm_epsilon(
        q=1.0,
        sgd_steps=100,
        sigma_g=8.0,
        sigma_c=None,
        kmeans_iterations=20,
        sigma_k=4.0,
        delta=1e-5,
    ) == pytest.approx(fixed, rel=1e-9)


def test_dpgm_epsilon_grows_with_epochs_and_shrinks_with_noise() -> None:
    common: dict[str, Any] = dict(
        q=0.01, sigma_c=4.0, kmeans_iterations=20, sigma_k=4.0, delta=1e-5
    )
    e1 = dpgm_epsilon(sgd_steps=100, sigma_g=4.0, **common)
    e2 = dpgm_epsilon(sgd_steps=1000, sigma_g=4.0, **common)
    e3 = dpgm_epsilon(sgd_steps=1000, sigma_g=8.0, **common)
    assert e1 < e2
    assert e3 < e2


def test_moments_accountant_adds_moments_and_validates_before_recording() -> None:
    acc = MomentsAccountant()
    acc.compose(SampledGaussianEvent(0.01, 1.1), 100).compose(GaussianEvent(10.0))
    lam = np.asarray(acc.lambdas, dtype=float)
    expected = 100 * sgm_log_moment(0.01, 1.1, lam) + gaussian_log_moment(10.0, lam)
    np.testing.assert_allclose(acc.log_moments(), expected)
    assert acc.get_epsilon(1e-5) == pytest.approx(
        epsilon_from_log_moments(expected, 1e-5)[0]
    )
    with pytest.raises(ConfigError):
        acc.compose(SharedBatchEvent(2.0, (1.0, 1.0)))
    assert len(acc.ledger) == 2
    assert MomentsAccountant().get_epsilon(1e-5) == 0.0
