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

from fedleak.errors import ConfigError, DataError
from fedleak.privacy import accounting as acc
from fedleak.privacy import identifiability as ident
from fedleak.privacy import ldp
from fedleak.privacy import mechanisms as mech

REFUSED: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]] = [
    # accounting
    (
        acc.sgm_epsilon,
        (-0.01, 1.0, 1, 1e-5),
        {},
        r"^q must be in \[0, 1\]; got -0\.01\.$",
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
        r"^steps must be an integer >= 0; got -1\.$",
    ),
    (
        acc.sgm_epsilon,
        (0.1, 1.0, 1.5, 1e-5),
        {},
        r"^steps must be an integer >= 0; got 1\.5\.$",
    ),
    (
        acc.sgm_epsilon,
        (0.1, 1.0, True, 1e-5),
        {},
        r"^steps must be an integer >= 0; got True\.$",
    ),
    (
        acc.sgm_epsilon,
        (0.1, 1.0, 1, 0.0),
        {},
        r"^delta must be in \(0, 1\); got 0\.0\.$",
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
    (
        acc.kmeans_log_moment,
        (1.5, 4.0),
        {},
        r"^iterations must be an integer >= 0; got 1\.5\.$",
    ),
    (
        acc.sgm_noise_multiplier,
        (1.0, 1e-5, 0.1, 0),
        {},
        r"^steps must be an integer >= 1; got 0\.$",
    ),
    (
        acc.sgm_noise_multiplier,
        (1.0, 1e-5, 0.0, 10),
        {},
        r"^q must be in \(0, 1\]; got 0\.0\.$",
    ),
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
        r"^sensitivity must be a finite number > 0; got 0\.0\.$",
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
        r"^sigma must be a finite number > 0; got 0\.0\.$",
    ),
    (
        ident.classic_gaussian_epsilon,
        (1.0, 0.01, -1.0),
        {},
        r"^sensitivity must be a finite number >= 0; got -1\.0\.$",
    ),
    (
        ident.gaussian_rdp,
        (1.0, 1.0),
        {},
        r"^order must be a finite number > 1; got 1\.0\.$",
    ),
    (
        ident.gaussian_rdp,
        (2.0, 0.0),
        {},
        r"^sigma must be a finite number > 0; got 0\.0\.$",
    ),
    (
        ident.gaussian_rdp,
        (2.0, 1.0, -0.5),
        {},
        r"^sensitivity must be a finite number >= 0; got -0\.5\.$",
    ),
    (
        ident.advantage_from_noise,
        (1.0, 0.0),
        {},
        r"^sigma must be a finite number > 0; got 0\.0\.$",
    ),
    (
        ident.advantage_from_noise,
        (-1.0, 1.0),
        {},
        r"^sensitivity must be a finite number >= 0; got -1\.0\.$",
    ),
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
        r"^noise_multiplier must be a finite number > 0; got 0\.0\.$",
    ),
    (
        ident.composed_gaussian_advantage,
        (1.0, 0),
        {},
        r"^steps must be an integer >= 1; got 0\.$",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (0.0, 1),
        {},
        r"^rho_alpha must be in \(0, 1\); got 0\.0\.$",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (1.0, 1),
        {},
        r"^rho_alpha must be in \(0, 1\); got 1\.0\.$",
    ),
    (
        ident.noise_multiplier_for_composed_advantage,
        (0.5, 0),
        {},
        r"^steps must be an integer >= 1; got 0\.$",
    ),
    (
        ident.posterior_tail_epsilon,
        (1.0, 0, 0.01),
        {},
        r"^steps must be an integer >= 1; got 0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.5, 0.01),
        {"steps": 3},
        r"^rho_beta must be in \(0\.5, 1\); got 0\.5\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 0},
        r"^steps must be an integer >= 1; got 0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 3, "sampling_rate": 0.0},
        r"^sampling_rate must be in \(0, 1\]; got 0\.0\.$",
    ),
    (
        ident.plan_dp_sgd,
        (0.9, 0.01),
        {"steps": 3, "sampling_rate": 1.01},
        r"^sampling_rate must be in \(0, 1\]; got 1\.01\.$",
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
        r"^delta must be in \(0, 1\); got 0\.0\.$",
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


# ------------------------------------------------ Theorem 5, events, the ledger


def test_dpgm_epsilon_honours_custom_orders_splits_and_kmeans_dpnorm() -> None:
    lam = np.array([2.0, 4.0, 8.0])
    splits = [[0.3, 0.7]]
    common: dict[str, Any] = dict(q=0.02, sgd_steps=50, sigma_g=3.0)
    sgd = acc.shared_batch_log_moment(0.02, (2.0, 3.0), lam, splits)
    kmeans = acc.kmeans_log_moment(5, 6.0, 2.0, lam)  # DPNorm inside k-means too
    expected = acc.epsilon_from_log_moments(50 * sgd + kmeans, 1e-5, lam)[0]
    got = acc.dpgm_epsilon(
        delta=1e-5,
        sigma_c=2.0,
        kmeans_iterations=5,
        sigma_k=6.0,
        lambdas=lam,
        splits=splits,
        kmeans_dpnorm=True,
        **common,
    )
    assert got == pytest.approx(expected, rel=1e-12)
    moment = acc.dpgm_log_moment(
        sigma_c=2.0,
        kmeans_iterations=5,
        sigma_k=6.0,
        lambdas=lam,
        splits=splits,
        **common,
    )
    np.testing.assert_allclose(
        moment, 50 * sgd + acc.kmeans_log_moment(5, 6.0, None, lam), rtol=1e-12
    )
    # fixed clipping: the gradient's sampled Gaussian alone, at the custom orders
    fixed = acc.dpgm_log_moment(
        sigma_c=None, kmeans_iterations=0, sigma_k=None, lambdas=lam, **common
    )
    np.testing.assert_allclose(fixed, 50 * acc.sgm_log_moment(0.02, 3.0, lam))
    with pytest.raises(
        ConfigError, match=r"^sigma_k is needed when kmeans_iterations > 0\.$"
    ):
        acc.dpgm_log_moment(sigma_c=None, kmeans_iterations=1, sigma_k=None, **common)
    with pytest.raises(
        ConfigError, match=r"^sgd_steps must be an integer >= 0; got -1\.$"
    ):
        acc.dpgm_epsilon(
            q=0.02,
            sgd_steps=-1,
            sigma_g=3.0,
            sigma_c=None,
            kmeans_iterations=0,
            sigma_k=None,
            delta=1e-5,
        )


def test_shared_batch_splits_are_validated() -> None:
    lam = np.array([1.0, 2.0])
    for bad in ([[0.5, 0.6]], [[1.0, 0.0]], [[-0.5, 1.5]], [[0.2, 0.3, 0.5]]):
        with pytest.raises(
            ConfigError,
            match=r"^splits must have rows of 2 positive weights summing to 1",
        ):
            acc.shared_batch_log_moment(0.1, (1.0, 2.0), lam, bad)
    with pytest.raises(ConfigError, match=r"^pass explicit splits for 3 mechanisms"):
        acc.shared_batch_log_moment(0.1, (1.0, 2.0, 3.0), lam)
    with pytest.raises(
        ConfigError,
        match=r"^noise_multipliers must be a finite number > 0; got 0\.0\.$",
    ):
        acc.shared_batch_log_moment(0.1, (1.0, 0.0), lam)
    three = acc.shared_batch_log_moment(0.1, (1.0, 2.0, 3.0), lam, [[0.2, 0.3, 0.5]])
    expected = sum(
        w * acc.sgm_log_moment(0.1, s, lam / w)
        for w, s in zip((0.2, 0.3, 0.5), (1.0, 2.0, 3.0), strict=True)
    )
    np.testing.assert_allclose(three, expected)


def test_events_and_ledger_use_the_accountants_orders() -> None:
    lam = (1.5, 3.0, 7.0)
    ledger = acc.MomentsAccountant(lambdas=lam)
    ledger.compose(acc.GaussianEvent(4.0), 3)
    ledger.compose(acc.SampledGaussianEvent(0.1, 2.0), 2)
    ledger.compose(acc.SharedBatchEvent(0.1, (2.0, 3.0)))
    grid = np.asarray(lam)
    expected = (
        3 * acc.gaussian_log_moment(4.0, grid)
        + 2 * acc.sgm_log_moment(0.1, 2.0, grid)
        + acc.shared_batch_log_moment(0.1, (2.0, 3.0), grid)
    )
    np.testing.assert_allclose(ledger.log_moments(), expected)
    assert ledger.get_epsilon(1e-5) == pytest.approx(
        acc.epsilon_from_log_moments(expected, 1e-5, grid)[0]
    )
    with pytest.raises(ConfigError, match=r"^count must be an integer >= 0; got -1\.$"):
        ledger.compose(acc.GaussianEvent(1.0), -1)
    with pytest.raises(
        ConfigError, match=r"^noise_multiplier must be a finite number > 0"
    ):
        ledger.compose(acc.GaussianEvent(0.0))
    assert len(ledger.ledger) == 3  # refused events are not recorded


# ------------------------------------------------------------------- DPNorm


def test_dp_norm_domain_defaults_and_seeding() -> None:
    from fedleak.privacy.dpnorm import dp_norm, norm_histogram

    norms = [0.33, 0.34, 0.36, 7.0]
    # sigma_C = 0 is allowed (no noise): the mode on the default grid (10 / 100)
    assert dp_norm(norms, 0.0) == pytest.approx(0.4)
    np.testing.assert_array_equal(
        norm_histogram([0.05, 0.1, 0.11, 99.0], 1.0, 10)[[0, 1, 9]], [2, 1, 1]
    )
    assert dp_norm([9.99], 0.0, bins=1) == 10.0
    for bad, message in (
        (dict(sigma_c=-1.0), r"^sigma_c must be a finite number >= 0; got -1\.0\.$"),
        (dict(sigma_c=math.inf), r"^sigma_c must be a finite number >= 0"),
        (
            dict(sigma_c=1.0, c_max=0.0),
            r"^c_max must be a finite number > 0; got 0\.0\.$",
        ),
        (dict(sigma_c=1.0, c_max=math.inf), r"^c_max must be a finite number > 0"),
        (dict(sigma_c=1.0, bins=0), r"^bins must be an integer >= 1; got 0\.$"),
        (
            dict(sigma_c=1.0, bins=2.5),
            r"^bins must be an integer >= 1; got 2\.5\.$",
        ),
        (
            dict(sigma_c=1.0, bins=True),
            r"^bins must be an integer >= 1; got True\.$",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            dp_norm(norms, **bad)
    assert dp_norm(norms, 1.0, c_max=0.5, bins=1) == 0.5
    # the seed fixes the noise; secure mode draws it from the OS and refuses one
    picks = [dp_norm(norms, 50.0, rng=s) for s in range(6)]
    assert picks == [dp_norm(norms, 50.0, rng=s) for s in range(6)]
    assert len(set(picks)) > 1
    assert 0 < dp_norm(norms, 1.0, secure_mode=True) <= 10.0
    with pytest.raises(ConfigError, match="Passing seed is prohibited in secure mode"):
        dp_norm(norms, 1.0, rng=1, secure_mode=True)


# -------------------------------------------------------------- randomness


def test_randomness_helpers_domains() -> None:
    from fedleak.privacy.randomness import (
        check_rng,
        noise_laplace,
        noise_normal,
        secure_uniform,
    )

    assert secure_uniform(5).shape == (5,)
    assert secure_uniform((2, 3)).shape == (2, 3)
    assert noise_normal(1.0, 4, 0).shape == (4,)
    assert noise_laplace(1.0, (2, 2), 0).shape == (2, 2)
    # the default is the seeded path: the same seed gives the same numbers
    np.testing.assert_array_equal(noise_normal(1.0, 3, 9), noise_normal(1.0, 3, 9))
    np.testing.assert_array_equal(noise_laplace(1.0, 3, 9), noise_laplace(1.0, 3, 9))
    message = (
        r"^Passing seed is prohibited in secure mode: secure_mode=True draws noise "
        r"from the OS CSPRNG; pass rng=None \(or secure_mode=False for reproducible "
        r"experiments\)\.$"
    )
    with pytest.raises(ConfigError, match=message):
        noise_normal(1.0, 3, 0, secure_mode=True)
    with pytest.raises(ConfigError, match=message):
        noise_laplace(1.0, 3, 0, secure_mode=True)
    with pytest.raises(
        ConfigError,
        match=r"^rng/seed must be a numpy Generator, a non-negative int or None; got -1\.$",
    ):
        check_rng(-1)
    # secure Laplace noise: 20,000 draws of scale 2 have mean |x| = 2 (SE 0.7%)
    draws = noise_laplace(2.0, 20_000, secure_mode=True)
    assert np.mean(np.abs(draws)) == pytest.approx(2.0, rel=0.04)
    assert abs(np.mean(draws)) < 0.1  # SE of the mean 0.02


# ----------------------------------------------------------------- local DP


def test_local_dp_domains_and_messages() -> None:
    from fedleak.privacy import ldp

    with pytest.raises(
        ConfigError, match=r"^epsilon must be a finite number > 0; got 0\.0\.$"
    ):
        ldp.randomized_response_probability(0.0)
    with pytest.raises(
        ConfigError, match=r"^epsilon must be a finite number > 0; got inf\.$"
    ):
        ldp.randomized_response_probability(math.inf)
    for p in (0.0, 1.0):
        with pytest.raises(ConfigError, match=rf"^p must be in \(0, 1\); got {p}\.$"):
            ldp.randomized_response_epsilon(p)
    assert ldp.randomized_response_record_epsilon(0.5, 1) == 0.5
    with pytest.raises(
        ConfigError, match=r"^num_features must be an integer >= 1; got 0\.$"
    ):
        ldp.randomized_response_record_epsilon(0.5, 0)
    with pytest.raises(
        DataError,
        match=r"^randomized_response expects binary features \(0/1 values\); binarise "
        r"the data first or use laplace_pixelization for images",
    ):
        ldp.randomized_response(np.array([0, 2]), 1.0, np.random.default_rng(0))
    # the defaults: one-pixel cells, one neighbour, values in [0, 1]
    assert ldp.pixelization_scale(2.0) == pytest.approx(0.5)
    assert ldp.pixelization_scale(
        2.0, cell_size=2, neighborhood=3, value_range=4.0
    ) == (pytest.approx(3 * 4.0 / (4 * 2.0)))
    for bad, message in (
        (dict(cell_size=0), r"^cell_size must be an integer >= 1; got 0\.$"),
        (dict(neighborhood=0), r"^neighborhood must be an integer >= 1; got 0\.$"),
        (
            dict(value_range=0.0),
            r"^value_range must be a finite number > 0; got 0\.0\.$",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            ldp.pixelization_scale(1.0, **bad)
    images = np.full((2000, 4, 4), 0.5)
    noisy = ldp.laplace_pixelization(
        images,
        4.0,
        np.random.default_rng(0),
        cell_size=2,
        neighborhood=2,
        value_range=2.0,
        clip=False,
    )
    # every 2x2 cell shares one Laplace(2 * 2 / (4 * 4)) = Laplace(0.25) draw
    assert (noisy[:, :2, :2] == noisy[:, :1, :1]).all()
    cells = noisy[:, ::2, ::2].ravel() - 0.5
    assert np.mean(np.abs(cells)) == pytest.approx(0.25, rel=0.05)  # 8,000 draws
    assert noisy.min() < 0  # not clipped
    clipped = ldp.laplace_pixelization(
        images, 0.5, np.random.default_rng(0), value_range=2.0
    )
    assert clipped.min() >= 0.0 and clipped.max() <= 2.0 and clipped.max() > 1.0
    with pytest.raises(
        DataError,
        match=r"^images must have shape \(n, H, W\) or \(n, C, H, W\), got \(4, 4\)$",
    ):
        ldp.laplace_pixelization(np.zeros((4, 4)), 1.0, np.random.default_rng(0))
    np.testing.assert_allclose(
        ldp.estimate_true_frequency([0.5, 0.75], math.log(3)), [0.5, 1.0]
    )


# ---------------------------------------------------------- syntactic privacy


def test_syntactic_domains_and_messages() -> None:
    from fedleak.privacy import syntactic as syn

    with pytest.raises(DataError, match=r"^a table needs at least one column$"):
        syn.Table({})
    with pytest.raises(DataError, match=r"^every row must have 2 values \(age, zip\)$"):
        syn.Table.from_rows([(1, 2), (3,)], ["age", "zip"])
    table = syn.Table.from_rows([(30, "a"), (30, "b"), (40, "a")], ["age", "disease"])
    assert table.column("age").dtype == object
    with pytest.raises(ConfigError, match=r"^give at least one quasi-identifier$"):
        syn.equivalence_classes(table, [])
    empty = syn.Table({"age": np.array([]), "disease": np.array([])})
    with pytest.raises(DataError, match=r"^the table is empty$"):
        syn.equivalence_classes(empty, ["age"])
    classes = syn.equivalence_classes(table, ["age"])
    assert [c.tolist() for c in classes] == [[0, 1], [2]]
    assert classes[0].dtype == np.int64
    with pytest.raises(DataError, match=r"^sensitive values not in `order`: \['b'\]$"):
        syn.t_closeness(table, ["age"], "disease", order=["a"])
    # earth mover's distance on an ordered domain, normalised by (m - 1)
    assert syn.earth_movers_distance([1, 0, 0], [0, 0, 1]) == 1.0
    assert syn.earth_movers_distance([1, 0], [0, 1]) == 1.0
    assert syn.earth_movers_distance([1, 1], [1, 0]) == pytest.approx(0.5)
    assert syn.earth_movers_distance([3], [5]) == 0.0
    assert syn.earth_movers_distance([1, 0, 0], [0, 0, 1], ordered=False) == 1.0
    for p, q in (([1, 2], [1]), ([[1]], [[1]]), ([], [])):
        with pytest.raises(DataError, match=r"^histograms must be 1-d of equal length"):
            syn.earth_movers_distance(p, q)
    for p, q in (
        ([-1, 2], [1, 1]),
        ([1, 1], [-1, 2]),
        ([0, 0], [1, 1]),
        ([1, 1], [0, 0]),
    ):
        with pytest.raises(
            DataError, match=r"^histograms must be non-negative with positive mass$"
        ):
            syn.earth_movers_distance(p, q)
    assert syn.earth_movers_distance([0, 1], [1, 1]) == pytest.approx(0.5)


# ------------------------------------------------ noise drawn from the seed, by hand


def test_seeded_noise_is_added_not_subtracted() -> None:
    """With a seed, the released value is the true one plus the generator's next
    draw (so a run can be replayed): checked against a replayed generator."""
    from fedleak.privacy.dpnorm import dp_norm, norm_histogram
    from fedleak.privacy.ldp import laplace_pixelization

    out = mech.gaussian_mechanism(1.5, 2.0, sigma=0.7, rng=np.random.default_rng(3))
    assert isinstance(out, float)
    assert out == 1.5 + np.random.default_rng(3).normal(0.0, 0.7 * 2.0, size=())
    out = mech.laplace_mechanism(1.5, 2.0, 0.5, rng=np.random.default_rng(3))
    assert isinstance(out, float)
    assert out == pytest.approx(
        1.5 + np.random.default_rng(3).laplace(0.0, 4.0, size=())
    )
    vector = mech.gaussian_mechanism(np.array([1, 2]), 1.0, sigma=1.0, rng=0)
    assert vector.dtype == np.float64 and vector.shape == (2,)
    norms = [0.1, 0.2, 0.2, 0.35, 0.9]
    counts = norm_histogram(norms, 1.0, 10)
    noisy = counts + np.random.default_rng(8).normal(0.0, math.sqrt(2) * 0.8, 10)
    assert dp_norm(norms, 0.8, c_max=1.0, bins=10, rng=np.random.default_rng(8)) == (
        pytest.approx((int(np.argmax(noisy)) + 1) / 10)
    )
    images = np.arange(32, dtype=np.float64).reshape(2, 4, 4) / 32
    got = laplace_pixelization(
        images, 2.0, np.random.default_rng(5), cell_size=2, clip=False
    )
    replay = np.random.default_rng(5)
    expected = np.empty_like(images)
    for top in (0, 2):
        for left in (0, 2):
            cell = images[:, top : top + 2, left : left + 2]
            mean = cell.mean(axis=(-2, -1), keepdims=True)
            expected[:, top : top + 2, left : left + 2] = mean + replay.laplace(
                0.0, 1.0 / (4 * 2.0), size=mean.shape
            )
    np.testing.assert_allclose(got, expected)
    integers = laplace_pixelization(
        np.ones((3, 2, 2), dtype=np.int64),
        1.0,
        np.random.default_rng(0),
        value_range=1.0,
    )
    assert integers.dtype == np.float64 and not np.all(integers == np.rint(integers))


def test_remaining_wiring_of_accounting_and_dp_sgd() -> None:
    from fedleak.privacy.dpsgd import AdaptiveClipping, FixedClipping, step_event

    with pytest.raises(ConfigError, match=r"^unsupported privacy event 'gaussian'\.$"):
        acc.MomentsAccountant().compose("gaussian")  # type: ignore[arg-type]
    assert step_event(0.1, 1.3, FixedClipping(1.0)) == acc.SampledGaussianEvent(
        0.1, 1.3
    )
    assert step_event(0.1, 1.3, AdaptiveClipping(4.0)) == acc.SharedBatchEvent(
        0.1, (4.0, 1.3)
    )
    # Theorem 5 at custom orders differs from the default grid's value here
    lam = np.array([3.0, 5.0])
    common: dict[str, Any] = dict(
        q=0.02,
        sgd_steps=50,
        sigma_g=3.0,
        sigma_c=2.0,
        kmeans_iterations=5,
        sigma_k=6.0,
        delta=1e-5,
    )
    moments = acc.dpgm_log_moment(
        q=0.02,
        sgd_steps=50,
        sigma_g=3.0,
        sigma_c=2.0,
        kmeans_iterations=5,
        sigma_k=6.0,
        lambdas=lam,
    )
    custom = acc.dpgm_epsilon(lambdas=lam, **common)
    assert custom == pytest.approx(acc.epsilon_from_log_moments(moments, 1e-5, lam)[0])
    assert custom != pytest.approx(acc.dpgm_epsilon(**common))


def test_emd_defaults_to_the_unordered_distance_and_one_bin_is_zero() -> None:
    from fedleak.privacy import syntactic as syn

    p, q = [1, 0, 0], [0, 1, 0]
    assert syn.earth_movers_distance(p, q) == 1.0  # variational (categorical)
    assert syn.earth_movers_distance(p, q, ordered=True) == pytest.approx(0.5)
    assert syn.earth_movers_distance([3], [5], ordered=True) == 0.0
    assert syn.earth_movers_distance([1, 0], [0, 1], ordered=True) == 1.0
    # t-closeness over a domain sorted as strings ('10' < '9'), codes per class
    table = syn.Table.from_rows([(1, 9), (1, 10), (2, 10), (2, 10)], ["zip", "salary"])
    assert syn.t_closeness(table, ["zip"], "salary") == pytest.approx(0.25)
    assert syn.t_closeness(table, ["zip"], "salary", order=[9, 10]) == pytest.approx(
        0.25
    )
    with pytest.raises(
        DataError, match=r"^sensitive values not in `order`: \[10, 9\]$"
    ):
        syn.t_closeness(table, ["zip"], "salary", order=[1])


def test_t_closeness_accepts_mixed_sensitive_values() -> None:
    from fedleak.privacy import syntactic as syn

    table = syn.Table.from_rows([(1, "x"), (1, 3), (2, 3), (2, 3)], ["zip", "v"])
    assert syn.t_closeness(table, ["zip"], "v") == pytest.approx(0.25)


def test_the_ledger_checks_its_own_orders_before_recording() -> None:
    ledger = acc.MomentsAccountant(lambdas=(0.0, 2.0))
    with pytest.raises(ConfigError, match=r"^moment orders lambda must be"):
        ledger.compose(acc.GaussianEvent(1.0))
    assert ledger.ledger == ()  # a read-only view, nothing recorded


def test_ordered_emd_uses_both_histograms_and_t_closeness_a_given_order() -> None:
    from fedleak.privacy import syntactic as syn

    assert syn.earth_movers_distance([0, 0, 1], [1, 0, 0], ordered=True) == 1.0
    assert syn.earth_movers_distance(
        [1, 1, 0], [0, 0, 1], ordered=True
    ) == pytest.approx(0.75)
    table = syn.Table.from_rows([(1, 1), (1, 2), (2, 2), (2, 2)], ["zip", "v"])
    # an order listing a value no record holds: the domain keeps its length
    assert syn.t_closeness(table, ["zip"], "v", order=[1, 2, 3]) == pytest.approx(0.125)


def test_the_package_loads_dp_sgd_lazily() -> None:
    import fedleak.privacy as privacy
    from fedleak.privacy import dpsgd

    for name in (
        "DPSGD",
        "AdaptiveClipping",
        "FixedClipping",
        "dp_sgd_train",
        "DPTrainResult",
    ):
        assert getattr(privacy, name) is getattr(dpsgd, name)
    with pytest.raises(
        AttributeError, match=r"^module 'fedleak\.privacy' has no attribute 'nothing'$"
    ):
        _ = privacy.nothing


def test_posterior_tail_epsilon_is_the_gaussian_chernoff_bound_on_its_grid() -> None:
    """Full batch: k Gaussian steps of multiplier z have log moment
    k lambda (lambda + 1) / (2 z^2); the tail bound minimises
    (beta + ln 1/delta) / lambda over the geometric grid TAIL_LAMBDAS."""
    lam = np.asarray(ident.TAIL_LAMBDAS)
    for z, k, delta in ((3.0, 10, 1e-5), (40.0, 5, 0.01), (0.7, 1, 0.1)):
        expected = np.min(
            (k * lam * (lam + 1) / (2 * z**2) + math.log(1 / delta)) / lam
        )
        assert ident.posterior_tail_epsilon(z, k, delta) == pytest.approx(
            expected, rel=1e-9
        )


def test_tail_calibration_reaches_small_noise_multipliers() -> None:
    """A loose budget (rho_beta = 0.999, one step) needs a multiplier below 1:
    the bisection must search below its first bracket."""
    plan = ident.plan_dp_sgd(0.999, 0.1, steps=1)
    z = plan.noise_multiplier
    assert z < 1
    assert ident.posterior_tail_epsilon(z, 1, 0.1) <= plan.epsilon
    assert ident.posterior_tail_epsilon(z * (1 - 3e-4), 1, 0.1) > plan.epsilon


def test_sgm_calibration_below_one_and_its_messages() -> None:
    sigma = acc.sgm_noise_multiplier(8.0, 1e-5, 0.01, 100, tolerance=1e-4)
    assert sigma < 1
    assert acc.sgm_epsilon(0.01, sigma, 100, 1e-5) <= 8.0
    assert acc.sgm_epsilon(0.01, sigma - 2e-4, 100, 1e-5) > 8.0
    with pytest.raises(ConfigError, match=r"^steps must be an integer >= 1; got -1\.$"):
        acc.sgm_noise_multiplier(1.0, 1e-5, 0.1, -1)
    with pytest.raises(
        ConfigError,
        match=r"^epsilon=0\.01 cannot be met with q=1\.0, steps=10000, delta=1e-05 below "
        r"noise multiplier 10\.0; use fewer steps or a smaller q\.$",
    ):
        acc.sgm_noise_multiplier(0.01, 1e-5, 1.0, 10_000, max_noise_multiplier=10.0)


def test_sampled_gaussian_moments_are_computed_not_just_cached() -> None:
    """The log moments are cached per (q, sigma, orders); a cleared cache must
    give the closed form again (q = 1 is the plain Gaussian mechanism)."""
    acc._sgm_log_moment_cached.cache_clear()
    lam = np.array([1.0, 2.0, 5.0])
    np.testing.assert_allclose(acc.sgm_log_moment(1.0, 2.0, lam), lam * (lam + 1) / 8.0)
    acc._sgm_log_moment_cached.cache_clear()
    np.testing.assert_allclose(
        acc.sgm_log_moment(0.5, 1.5, lam),
        [lam_i * _sgm_rdp_by_hand(0.5, 1.5, int(lam_i) + 1) for lam_i in lam],
        rtol=1e-9,
    )
    zero = acc.sgm_log_moment(0.0, 1.0, [1.0, 2.0])
    assert zero.shape == (2,) and not zero.any()


def _sgm_rdp_by_hand(q: float, sigma: float, alpha: int) -> float:
    k = np.arange(alpha + 1)
    terms = [
        math.comb(alpha, int(i))
        * (1 - q) ** (alpha - i)
        * q**i
        * math.exp((i * i - i) / (2 * sigma**2))
        for i in k
    ]
    return math.log(sum(terms)) / (alpha - 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: acc.epsilon_from_log_moments([1.0], 0.0, [1.0]),
            r"^delta must be in \(0, 1\); got 0\.0\.$",
        ),
        (lambda: acc.sgm_log_moment(1.5, 1.0), r"^q must be in \[0, 1\]; got 1\.5\.$"),
        (
            lambda: ident.expected_advantage_gaussian(-1.0, 0.1),
            r"^epsilon must be a finite number >= 0; got -1\.0\.$",
        ),
        (
            lambda: ident.posterior_belief_bound(-1.0),
            r"^epsilon must be a finite number >= 0; got -1\.0\.$",
        ),
        (
            lambda: ident.posterior_tail_epsilon(1.0, 1, 0.0),
            r"^delta must be in \(0, 1\); got 0\.0\.$",
        ),
        (
            lambda: ident.plan_dp_sgd(0.9, 0.01, steps=True),
            r"^steps must be an integer >= 1; got True\.$",
        ),
        (
            lambda: ldp.pixelization_scale(0.0),
            r"^epsilon must be a finite number > 0; got 0\.0\.$",
        ),
        (
            lambda: ldp.randomized_response_record_epsilon(0.0, 2),
            r"^epsilon must be a finite number > 0; got 0\.0\.$",
        ),
    ],
)
def test_more_refusals_name_the_parameter(call: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()


def test_zero_epsilon_bounds_are_the_no_privacy_loss_values() -> None:
    assert ident.expected_advantage_gaussian(0.0, 0.1) == 0.0
    assert ident.posterior_belief_bound(0.0) == 0.5


def test_the_sampled_tail_bound_uses_its_own_order_grid() -> None:
    """q < 1: the sampled Gaussian's moments on TAIL_LAMBDAS_SUBSAMPLED."""
    lam = np.asarray(ident.TAIL_LAMBDAS_SUBSAMPLED)
    moments = 3 * acc.sgm_log_moment(0.5, 2.0, lam)
    expected, _ = acc.epsilon_from_log_moments(moments, 1e-5, lam)
    got = ident.posterior_tail_epsilon(2.0, 3, 1e-5, sampling_rate=0.5)
    assert got == pytest.approx(expected, rel=1e-12)


def test_tail_calibration_is_relative_to_small_multipliers() -> None:
    """z near 0.24: the bisection stops within 1e-4 z of the root, so 0.03%
    less noise already exceeds the budget."""
    plan = ident.plan_dp_sgd(0.999999, 0.5, steps=1)
    z = plan.noise_multiplier
    assert 0.2 < z < 0.3
    assert ident.posterior_tail_epsilon(z, 1, 0.5) <= plan.epsilon
    assert ident.posterior_tail_epsilon(z * (1 - 3e-4), 1, 0.5) > plan.epsilon
