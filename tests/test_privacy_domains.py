"""Domains of the privacy functions: the boundary values accepted, the first
values outside refused with a message that names the parameter, and the
closed forms at the boundaries (zero sensitivity, zero epsilon, q = 0)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from fedleak.errors import ConfigError
from fedleak.privacy import accounting as acc
from fedleak.privacy import identifiability as ident
from fedleak.privacy import mechanisms as mech

REFUSED: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]] = [
    # accounting
    (
        acc.sgm_epsilon,
        (-0.01, 1.0, 1, 1e-5),
        {},
        r"sampling probability q must be in \[0, 1\]; got q=-0\.01",
    ),
    (acc.sgm_epsilon, (1.01, 1.0, 1, 1e-5), {}, r"q must be in \[0, 1\]"),
    (acc.sgm_epsilon, (math.nan, 1.0, 1, 1e-5), {}, r"q must be in"),
    (
        acc.sgm_epsilon,
        (0.1, 0.0, 1, 1e-5),
        {},
        r"^noise_multiplier must be a finite number > 0; got 0\.0\.$",
    ),
    (
        acc.sgm_epsilon,
        (0.1, math.inf, 1, 1e-5),
        {},
        r"^noise_multiplier must be a finite number > 0",
    ),
    (
        acc.sgm_epsilon,
        (0.1, 1.0, -1, 1e-5),
        {},
        r"^steps must be an int >= 0; got -1\.$",
    ),
    (acc.sgm_epsilon, (0.1, 1.0, 1.5, 1e-5), {}, r"^steps must be an int >= 0"),
    (acc.sgm_epsilon, (0.1, 1.0, True, 1e-5), {}, r"^steps must be an int >= 0"),
    (
        acc.sgm_epsilon,
        (0.1, 1.0, 1, 0.0),
        {},
        r"^delta must be in \(0, 1\); got delta=0\.0\.$",
    ),
    (acc.sgm_epsilon, (0.1, 1.0, 1, 1.0), {}, r"^delta must be in \(0, 1\)"),
    (acc.sgm_log_moment, (0.1, -1.0), {}, r"^noise_multiplier must be"),
    (acc.gaussian_log_moment, (0.0,), {}, r"^noise_multiplier must be"),
    (
        acc.sgm_log_moment,
        (0.1, 1.0, []),
        {},
        r"moment orders lambda must be a non-empty 1-d",
    ),
    (acc.sgm_log_moment, (0.1, 1.0, [[1.0, 2.0]]), {}, r"moment orders lambda"),
    (
        acc.sgm_log_moment,
        (0.1, 1.0, [0.0, 2.0]),
        {},
        r"numbers > 0; got \[0\.0, 2\.0\]",
    ),
    (acc.sgm_log_moment, (0.1, 1.0, [math.nan]), {}, r"moment orders lambda"),
    (
        acc.epsilon_from_log_moments,
        ([1.0, 2.0], 1e-5, [1.0]),
        {},
        r"log_moments has shape \(2,\) but lambdas \(1,\); they must match\.",
    ),
    (acc.kmeans_log_moment, (1.5, 4.0), {}, r"^k-means iterations must be an int >= 0"),
    (
        acc.sgm_noise_multiplier,
        (1.0, 1e-5, 0.1, 0),
        {},
        r"^steps and q must be > 0 to calibrate a noise multiplier\.$",
    ),
    (acc.sgm_noise_multiplier, (1.0, 1e-5, 0.0, 10), {}, r"^steps and q must be > 0"),
    (
        acc.sgm_noise_multiplier,
        (0.0, 1e-5, 0.1, 10),
        {},
        r"^epsilon must be a finite number > 0",
    ),
    (
        acc.sgm_noise_multiplier,
        (0.01, 1e-5, 1.0, 10_000),
        {"max_noise_multiplier": 10.0},
        r"epsilon=0\.01 cannot be met with q=1\.0, steps=10000, delta=1e-05 below noise multiplier 10\.0",
    ),
    # identifiability
    (
        ident.generic_advantage_bound,
        (-1e-9,),
        {},
        r"^epsilon must be a finite number >= 0; got -1e-09\.$",
    ),
    (
        ident.generic_advantage_bound,
        (math.inf,),
        {},
        r"^epsilon must be a finite number >= 0",
    ),
    (
        ident.generic_advantage_bound,
        (1.0, 1.0),
        {},
        r"^delta must be in \[0, 1\); got 1\.0\.$",
    ),
    (ident.generic_advantage_bound, (1.0, -0.1), {}, r"^delta must be in \[0, 1\)"),
    (
        ident.tight_advantage_bound,
        (-1.0,),
        {},
        r"^epsilon must be a finite number >= 0",
    ),
    (
        ident.tight_advantage_bound,
        (1.0, 1.0),
        {},
        r"^delta must be in \[0, 1\); got 1\.0\.$",
    ),
    (ident.tight_advantage_bound, (1.0, -0.1), {}, r"^delta must be in \[0, 1\)"),
    (
        ident.classic_gaussian_sigma,
        (0.0, 0.01),
        {},
        r"^epsilon must be a finite number > 0; got 0\.0\.$",
    ),
    (
        ident.classic_gaussian_sigma,
        (1.0, 0.01, 0.0),
        {},
        r"^sensitivity must be > 0; got 0\.0\.$",
    ),
    (
        ident.classic_gaussian_sigma,
        (1.0, 0.0),
        {},
        r"^delta must be in \(0, 1\); got 0\.0\.$",
    ),
    (ident.classic_gaussian_sigma, (1.0, 1.0), {}, r"^delta must be in \(0, 1\)"),
    (
        ident.classic_gaussian_epsilon,
        (0.0, 0.01, 1.0),
        {},
        r"^need sigma > 0 and sensitivity >= 0; got sigma=0\.0, sensitivity=1\.0\.$",
    ),
    (
        ident.classic_gaussian_epsilon,
        (1.0, 0.01, -1.0),
        {},
        r"^need sigma > 0 and sensitivity >= 0",
    ),
    (
        ident.gaussian_rdp,
        (1.0, 1.0),
        {},
        r"^need order > 1, sigma > 0, sensitivity >= 0; got order=1\.0, sigma=1\.0, sensitivity=1\.0\.$",
    ),
    (ident.gaussian_rdp, (2.0, 0.0), {}, r"^need order > 1"),
    (ident.gaussian_rdp, (2.0, 1.0, -0.5), {}, r"^need order > 1"),
    (
        ident.advantage_from_noise,
        (1.0, 0.0),
        {},
        r"^need sigma > 0 and sensitivity >= 0; got sigma=0\.0, sensitivity=1\.0\.$",
    ),
    (ident.advantage_from_noise, (-1.0, 1.0), {}, r"^need sigma > 0"),
    (ident.epsilon_for_posterior_bound, (1.0,), {}, r"rho_beta must be in"),
    (ident.epsilon_for_posterior_bound, (0.49,), {}, r"rho_beta must be in"),
    (
        ident.epsilon_for_expected_advantage,
        (1.0, 0.01),
        {},
        r"^rho_alpha must be in \[0, 1\); got 1\.0\.$",
    ),
    (ident.epsilon_for_expected_advantage, (-0.1, 0.01), {}, r"^rho_alpha must be in"),
    (
        ident.composed_gaussian_advantage,
        (0.0, 1),
        {},
        r"^need noise_multiplier > 0 and steps >= 1; got noise_multiplier=0\.0, steps=1\.$",
    ),
    (
        ident.composed_gaussian_advantage,
        (1.0, 0),
        {},
        r"^need noise_multiplier > 0 and steps >= 1",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (0.0, 1),
        {},
        r"^need rho_alpha in \(0, 1\) and steps >= 1; got rho_alpha=0\.0, steps=1\.$",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (1.0, 1),
        {},
        r"^need rho_alpha in \(0, 1\)",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (0.5, 0),
        {},
        r"^need rho_alpha in \(0, 1\)",
    ),
    (
        ident.posterior_tail_epsilon,
        (1.0, 0, 0.01),
        {},
        r"^steps must be >= 1; got 0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.5, 0.01),
        {"steps": 3},
        r"^rho_beta must be > 0\.5: rho_beta = 0\.5 means epsilon = 0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 0},
        r"^need steps >= 1 and sampling_rate in \(0, 1\]; got steps=0, sampling_rate=1\.0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 3, "sampling_rate": 0.0},
        r"^need steps >= 1 and sampling_rate",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 3, "sampling_rate": 1.01},
        r"^need steps >= 1 and sampling_rate",
    ),
    (ident.plan_dp_sgd, (0.9, 1.0), {"steps": 3}, r"^delta must be in \(0, 1\)"),
    (
        ident.plan_dp_sgd,
        (0.500001, 1e-9),
        {"steps": 10**4},
        r"needs a noise multiplier above 1e5 for steps=10000, delta=1e-09; choose a larger rho_beta or fewer steps\.",
    ),
    # mechanisms
    (
        mech.gaussian_sigma,
        (0.0, 1e-5),
        {},
        r"^epsilon must be a finite number > 0; got 0\.0\.$",
    ),
    (
        mech.gaussian_sigma,
        (math.inf, 1e-5),
        {},
        r"^epsilon must be a finite number > 0",
    ),
    (
        mech.gaussian_sigma,
        (1.0, 0.0),
        {},
        r"^delta must be in \(0, 1\); got delta=0\.0\.$",
    ),
    (mech.gaussian_sigma, (1.0, 1.0), {}, r"^delta must be in \(0, 1\)"),
    (
        mech.gaussian_mechanism,
        (1.0, -1.0),
        {"sigma": 1.0},
        r"^sensitivity must be a finite number >= 0; got -1\.0\.$",
    ),
    (
        mech.gaussian_mechanism,
        (1.0, 1.0),
        {"sigma": -1.0},
        r"^sigma must be a finite number >= 0; got -1\.0\.$",
    ),
    (
        mech.gaussian_mechanism,
        (1.0, 1.0),
        {"sigma": 1.0, "epsilon": 1.0},
        r"^give either sigma or \(epsilon, delta\), not both\.$",
    ),
    (
        mech.gaussian_mechanism,
        (1.0, 1.0),
        {"sigma": 1.0, "delta": 0.1},
        r"^give either sigma",
    ),
    (
        mech.gaussian_mechanism,
        (1.0, 1.0),
        {"epsilon": 1.0},
        r"^the Gaussian mechanism needs sigma \(a noise multiplier\) or both epsilon and delta\.$",
    ),
    (
        mech.gaussian_mechanism,
        (1.0, 1.0),
        {"delta": 0.1},
        r"^the Gaussian mechanism needs sigma",
    ),
    (
        mech.laplace_mechanism,
        (1.0, -1.0, 1.0),
        {},
        r"^sensitivity must be a finite number >= 0",
    ),
    (
        mech.laplace_mechanism,
        (1.0, 1.0, 0.0),
        {},
        r"^epsilon must be a finite number > 0; got 0\.0\.$",
    ),
]


@pytest.mark.parametrize(("function", "args", "kwargs", "message"), REFUSED)
def test_out_of_domain_input_is_refused_naming_the_parameter(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        function(*args, **kwargs)


def test_accounting_boundaries_are_accepted_with_their_closed_forms() -> None:
    assert acc.sgm_epsilon(0.0, 1.0, 100, 1e-5) == 0.0  # q = 0 samples nobody
    assert acc.sgm_epsilon(0.1, 1.0, 0, 1e-5) == 0.0
    np.testing.assert_array_equal(acc.sgm_log_moment(0.0, 1.0, [1.0, 2.0]), [0.0, 0.0])
    assert acc.sgm_epsilon(1.0, 1.0, 1, 0.5) > 0  # q = 1 is a valid probability
    assert acc.sgm_log_moment(0.1, 1.0, [2.0]).shape == (1,)  # a one-order grid
    # default orders: the seed's integer lambdas 1..32
    np.testing.assert_allclose(
        acc.gaussian_log_moment(2.0), np.arange(1, 33) * np.arange(2, 34) / 8.0
    )
    # the tail bound at explicit orders: min over lambda of (beta + ln 1/delta) / lambda
    beta = np.array([1.0, 3.0, 9.0])
    eps, lam = acc.epsilon_from_log_moments(beta, 0.01, [1.0, 2.0, 3.0])
    expected = (beta + math.log(100)) / np.array([1.0, 2.0, 3.0])
    assert eps == pytest.approx(expected.min()) and lam == 2.0
    # a noise multiplier is calibrated to within its tolerance, never above epsilon
    sigma = acc.sgm_noise_multiplier(2.0, 1e-5, 0.05, 200, tolerance=1e-3)
    assert acc.sgm_epsilon(0.05, sigma, 200, 1e-5) <= 2.0
    assert acc.sgm_epsilon(0.05, sigma - 2e-3, 200, 1e-5) > 2.0


def test_identifiability_boundaries_are_accepted_with_their_closed_forms() -> None:
    assert ident.generic_advantage_bound(0.0) == 0.0
    assert ident.generic_advantage_bound(0.1, 0.05) == pytest.approx(
        math.expm1(0.1) + 0.05
    )
    assert ident.generic_advantage_bound(0.1, 0.0) == pytest.approx(math.expm1(0.1))
    assert ident.tight_advantage_bound(0.0) == 0.0
    assert ident.tight_advantage_bound(1.0, 0.1) == pytest.approx(
        (math.e - 1 + 0.2) / (math.e + 1)
    )
    c = math.sqrt(2 * math.log(1.25 / 0.01))
    assert ident.classic_gaussian_sigma(2.0, 0.01) == pytest.approx(c / 2.0)
    assert ident.classic_gaussian_sigma(2.0, 0.01, 3.0) == pytest.approx(1.5 * c)
    assert ident.classic_gaussian_epsilon(2.0, 0.01, 0.0) == 0.0
    assert ident.classic_gaussian_epsilon(2.0, 0.01, 3.0) == pytest.approx(1.5 * c)
    assert ident.gaussian_rdp(3.0, 2.0) == pytest.approx(3.0 / 8.0)
    assert ident.gaussian_rdp(3.0, 2.0, 3.0) == pytest.approx(27.0 / 8.0)
    assert ident.gaussian_rdp(1.0001, 2.0, 0.0) == 0.0
    assert ident.advantage_from_noise(0.0, 1.0) == 0.0
    assert ident.advantage_from_noise(2.0, 1.0) == pytest.approx(
        norm.cdf(1) - norm.cdf(-1)
    )
    assert ident.epsilon_for_posterior_bound(0.5) == 0.0
    assert ident.epsilon_for_expected_advantage(0.0, 0.01) == 0.0
    assert ident.composed_gaussian_advantage(2.0, 1) == pytest.approx(
        norm.cdf(0.25) - norm.cdf(-0.25)
    )
    z = ident.noise_multiplier_for_composed_advantage(0.5, 4)
    assert z == pytest.approx(2.0 / (2.0 * norm.ppf(0.75)))
    assert ident.posterior_tail_epsilon(3.0, 1, 0.01) > 0
    assert ident.classic_gaussian_sigma(1.0, 0.999) > 0


def test_plan_dp_sgd_records_every_field() -> None:
    plan = ident.plan_dp_sgd(0.8, 0.01, steps=1)
    assert plan.rho_beta == 0.8 and isinstance(plan.rho_beta, float)
    assert plan.epsilon == pytest.approx(math.log(4))
    assert plan.delta == 0.01 and plan.steps == 1 and isinstance(plan.steps, int)
    assert plan.sampling_rate == 1.0 and isinstance(plan.sampling_rate, float)
    z = plan.noise_multiplier
    assert ident.posterior_tail_epsilon(z, 1, 0.01) <= plan.epsilon
    assert ident.posterior_tail_epsilon(z * (1 - 3e-4), 1, 0.01) > plan.epsilon
    assert plan.noise_multiplier_dp == pytest.approx(
        acc.sgm_noise_multiplier(plan.epsilon, 0.01, 1.0, 1)
    )
    assert plan.rho_alpha == pytest.approx(
        ident.expected_advantage_gaussian(plan.epsilon, 0.01)
    )
    assert plan.rho_alpha_run == pytest.approx(ident.composed_gaussian_advantage(z, 1))
    sampled = ident.plan_dp_sgd(0.8, 0.01, steps=2, sampling_rate=0.5)
    assert sampled.rho_alpha_run is None and sampled.sampling_rate == 0.5
    zs = sampled.noise_multiplier
    assert (
        ident.posterior_tail_epsilon(zs, 2, 0.01, sampling_rate=0.5) <= sampled.epsilon
    )
    assert (
        ident.posterior_tail_epsilon(zs * (1 - 3e-4), 2, 0.01, sampling_rate=0.5)
        > sampled.epsilon
    )
    assert sampled.noise_multiplier_dp == pytest.approx(
        acc.sgm_noise_multiplier(sampled.epsilon, 0.01, 0.5, 2)
    )


def test_mechanism_boundaries() -> None:
    assert mech.gaussian_mechanism(3.0, 0.0, sigma=5.0, rng=0) == 3.0
    assert mech.gaussian_mechanism(3.0, 1.0, sigma=0.0, rng=0) == 3.0
    assert mech.laplace_mechanism(3.0, 0.0, 1.0, rng=0) == 3.0
    out = mech.gaussian_mechanism(np.zeros(20_000), 2.0, epsilon=1.0, delta=1e-5, rng=1)
    # std = analytic sigma x sensitivity; 20,000 draws: relative SE 0.5%
    assert np.std(out) == pytest.approx(2.0 * mech.gaussian_sigma(1.0, 1e-5), rel=0.03)
