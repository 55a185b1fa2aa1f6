"""Identifiability scores of seed 002: closed forms, inverses, RDP composition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.stats import norm

from fedleak.errors import ConfigError
from fedleak.privacy.accounting import sgm_epsilon
from fedleak.privacy.identifiability import (
    advantage_from_noise,
    classic_gaussian_epsilon,
    classic_gaussian_sigma,
    composed_gaussian_advantage,
    epsilon_for_expected_advantage,
    epsilon_for_posterior_bound,
    expected_advantage_gaussian,
    gaussian_rdp,
    generic_advantage_bound,
    noise_multiplier_for_composed_advantage,
    plan_dp_sgd,
    posterior_belief_bound,
    posterior_tail_epsilon,
    tight_advantage_bound,
)


def test_posterior_bound_matches_seed_table_3() -> None:
    # Seed 002 Table 3: rho_beta 0.52 / 0.75 / 0.9 / 0.99 -> eps 0.08 / 1.1 / 2.2 / 4.6.
    for rho_beta, eps in [(0.52, 0.08), (0.75, 1.1), (0.9, 2.2), (0.99, 4.6)]:
        assert epsilon_for_posterior_bound(rho_beta) == pytest.approx(eps, abs=0.01)
    # rho_alpha for delta = 0.01 (MNIST) and delta = 0.001 (Purchase, Adult).
    for eps, delta, rho_alpha in [
        (1.1, 0.01, 0.14),
        (2.2, 0.01, 0.28),
        (4.6, 0.01, 0.54),
        (1.1, 0.001, 0.12),
        (2.2, 0.001, 0.23),
        (4.6, 0.001, 0.46),
    ]:
        assert expected_advantage_gaussian(eps, delta) == pytest.approx(
            rho_alpha, abs=0.006
        )


def test_posterior_bound_is_bayes_rule_with_likelihood_ratio_e_eps() -> None:
    # Uniform prior, likelihood ratio e^eps: posterior e^eps / (1 + e^eps).
    for eps in (0.0, 0.3, 1.0, 5.0):
        ratio = math.exp(eps)
        assert posterior_belief_bound(eps) == pytest.approx(ratio / (1 + ratio))


def test_rho_alpha_equals_numeric_overlap_of_two_gaussians() -> None:
    # Advantage of the Bayes classifier = 1 - overlap = TV distance of the two PDFs.
    for eps, delta, sens in [(0.5, 1e-5, 1.0), (2.0, 0.01, 3.0), (4.6, 0.001, 0.2)]:
        sigma = classic_gaussian_sigma(eps, delta, sens)
        tv, _ = integrate.quad(
            lambda x, s=sigma, d=sens: 0.5 * abs(norm.pdf(x, 0, s) - norm.pdf(x, d, s)),
            -12 * sigma,
            sens + 12 * sigma,
            points=[sens / 2],
            limit=200,
        )
        assert expected_advantage_gaussian(eps, delta) == pytest.approx(tv, abs=1e-7)
        assert advantage_from_noise(sens, sigma) == pytest.approx(tv, abs=1e-7)


def test_rho_alpha_equals_monte_carlo_bayes_adversary() -> None:
    rng = np.random.default_rng(0)
    sigma, sens, n = 1.3, 1.0, 200_000
    b = rng.integers(2, size=n)
    r = b * sens + sigma * rng.standard_normal(n)
    guess = (r > sens / 2).astype(int)
    adv = 2 * np.mean(guess == b) - 1
    assert adv == pytest.approx(advantage_from_noise(sens, sigma), abs=0.01)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 8.0), st.sampled_from([1e-5, 1e-3, 0.01, 0.1]))
def test_inverses_round_trip(eps: float, delta: float) -> None:
    assert epsilon_for_posterior_bound(posterior_belief_bound(eps)) == pytest.approx(
        eps, rel=1e-9
    )
    rho_alpha = expected_advantage_gaussian(eps, delta)
    assert epsilon_for_expected_advantage(rho_alpha, delta) == pytest.approx(
        eps, rel=1e-7
    )
    sigma = classic_gaussian_sigma(eps, delta, 2.0)
    assert classic_gaussian_epsilon(sigma, delta, 2.0) == pytest.approx(eps, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.2, 50.0), st.integers(1, 500))
def test_composed_advantage_inverse_round_trips(z: float, steps: int) -> None:
    adv = composed_gaussian_advantage(z, steps)
    if 1e-9 < adv < 1 - 1e-9:
        assert noise_multiplier_for_composed_advantage(adv, steps) == pytest.approx(
            z, rel=1e-6
        )


def test_composition_is_one_gaussian_with_rdp_summed() -> None:
    # k steps at multiplier z = one step at z / sqrt(k) (Section 4.4), also in RDP.
    z, k = 6.0, 36
    assert composed_gaussian_advantage(z, k) == pytest.approx(
        composed_gaussian_advantage(z / 6, 1)
    )
    assert k * gaussian_rdp(8.0, z) == pytest.approx(
        gaussian_rdp(8.0, z / math.sqrt(k))
    )


def test_advantage_bounds_order() -> None:
    for eps in (0.1, 1.0, 3.0):
        for delta in (0.0, 1e-5, 0.01):
            tight = tight_advantage_bound(eps, delta)
            generic = generic_advantage_bound(eps, delta)
            assert tight <= generic + 1e-12
            if delta > 0:
                assert expected_advantage_gaussian(eps, delta) <= tight
    assert generic_advantage_bound(10.0) == 1.0
    assert generic_advantage_bound(0.5) == pytest.approx(math.expm1(0.5))


def test_tail_epsilon_is_a_chernoff_bound_on_the_privacy_loss() -> None:
    # Full batch: the loss of k steps is N(mu^2/2, mu^2) with mu = sqrt(k)/z;
    # the tail epsilon must leave at most delta above it, and be tight-ish.
    for z, k, delta in [(8.0, 30, 0.01), (3.0, 10, 1e-5), (50.0, 100, 1e-3)]:
        eps = posterior_tail_epsilon(z, k, delta)
        mu = math.sqrt(k) / z
        tail = norm.sf((eps - mu**2 / 2) / mu)
        assert tail <= delta
        assert tail >= delta / 50
        # Mironov's conversion is looser than the accountant's.
        assert eps >= sgm_epsilon(1.0, z, k, delta)


def test_plan_dp_sgd_from_rho_beta() -> None:
    plan = plan_dp_sgd(0.9, 0.01, steps=30)
    assert plan.epsilon == pytest.approx(math.log(9))
    assert (
        posterior_tail_epsilon(plan.noise_multiplier, 30, 0.01) <= plan.epsilon + 1e-9
    )
    assert posterior_tail_epsilon(plan.noise_multiplier * 0.99, 30, 0.01) > plan.epsilon
    assert sgm_epsilon(1.0, plan.noise_multiplier_dp, 30, 0.01) <= plan.epsilon + 1e-6
    assert plan.noise_multiplier_dp < plan.noise_multiplier
    assert plan.rho_alpha_run == pytest.approx(
        composed_gaussian_advantage(plan.noise_multiplier, 30)
    )
    assert plan.rho_alpha == pytest.approx(
        expected_advantage_gaussian(plan.epsilon, 0.01)
    )
    sub = plan_dp_sgd(0.75, 1e-5, steps=20, sampling_rate=0.1)
    assert sub.rho_alpha_run is None
    assert sub.noise_multiplier < plan_dp_sgd(0.75, 1e-5, steps=20).noise_multiplier


def test_errors() -> None:
    with pytest.raises(ConfigError, match="rho_beta must be in"):
        epsilon_for_posterior_bound(0.3)
    with pytest.raises(ConfigError, match="delta must be in"):
        expected_advantage_gaussian(1.0, 0.0)
    with pytest.raises(ConfigError, match="rho_alpha must be in"):
        epsilon_for_expected_advantage(1.0, 0.01)
    with pytest.raises(ConfigError, match=r"rho_beta must be in \(0\.5, 1\)"):
        plan_dp_sgd(0.5, 0.01, steps=3)
