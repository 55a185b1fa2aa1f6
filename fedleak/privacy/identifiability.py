"""Identifiability scores for choosing and auditing epsilon (seed 002).

Seed 002 (Bernau et al., "Quantifying identifiability to choose and audit
epsilon in differentially private deep learning", VLDB 2021) turns a DP
guarantee ``(epsilon, delta)`` into two scores about the strongest DP
adversary, the differential-identifiability adversary ``A_DI`` who knows both
neighbouring datasets ``D`` and ``D'`` and must tell which one was used:

``rho_beta``
    The bound on ``A_DI``'s Bayesian posterior belief in the true dataset
    (Theorem 1): ``rho_beta = 1 / (1 + exp(-epsilon))``, inverted by Eq. (10),
    ``epsilon = ln(rho_beta / (1 - rho_beta))``.
``rho_alpha``
    The expected membership advantage of ``A_DI`` against the Gaussian
    mechanism (Theorem 2): ``rho_alpha = Phi(Delta / (2 sigma)) -
    Phi(-Delta / (2 sigma))`` (Eq. 14), with ``sigma`` from the classic
    calibration of Eq. (1), ``sigma = sqrt(2 ln(1.25/delta)) Delta / epsilon``,
    so ``rho_alpha = 2 Phi(epsilon / (2 sqrt(2 ln(1.25/delta)))) - 1``,
    inverted by Eq. (15).

The extracted seed text lost its formulas; they are reconstructed here from
the definitions around them and the published paper, and each function names
the equation it implements. Section 4.4 carries both scores through RDP
composition: a ``k``-fold Gaussian mechanism with noise multiplier ``z`` is
one Gaussian mechanism with multiplier ``z / sqrt(k)``, so ``rho_alpha =
2 Phi(sqrt(k) / (2 z)) - 1`` (:func:`composed_gaussian_advantage`).
:func:`plan_dp_sgd` is the data scientist's entry point: pick ``rho_beta``,
get epsilon and the DP-SGD noise multiplier from the RDP accountant of
:mod:`fedleak.privacy.accounting`.

The reconstruction reproduces the seed's Table 3 (``rho_beta`` 0.75 / 0.9 /
0.99 give epsilon 1.1 / 2.2 / 4.6 and, at ``delta = 0.01``, ``rho_alpha``
0.14 / 0.28 / 0.54). One subtlety matters in practice: Theorem 1 (ii) holds
with probability ``1 - delta`` because its proof converts RDP to DP with
Mironov's rule, a tail bound on the privacy loss; the tighter conversion of
modern accountants bounds a divergence instead and lets beliefs exceed
``rho_beta`` more often than ``delta``. :func:`posterior_tail_epsilon` and
:func:`plan_dp_sgd` therefore calibrate with the tail bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

from ..errors import ConfigError
from ..validation import (
    Interval,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
    check_real,
)

__all__ = [
    "DPSGDPlan",
    "advantage_from_noise",
    "classic_gaussian_epsilon",
    "classic_gaussian_sigma",
    "composed_gaussian_advantage",
    "epsilon_for_expected_advantage",
    "epsilon_for_posterior_bound",
    "expected_advantage_gaussian",
    "gaussian_rdp",
    "generic_advantage_bound",
    "noise_multiplier_for_composed_advantage",
    "plan_dp_sgd",
    "posterior_belief_bound",
    "posterior_tail_epsilon",
    "tight_advantage_bound",
]


def _calibration_constant(delta: float) -> float:
    """Return ``sqrt(2 ln(1.25 / delta))``, the factor of Eq. (1)."""
    return math.sqrt(2.0 * math.log(1.25 / check_delta("delta", delta)))


def posterior_belief_bound(epsilon: float) -> float:
    """Bound ``rho_beta`` on the DI adversary's posterior belief (Theorem 1).

    With uniform priors, an ``(epsilon, delta)``-DP mechanism (any composition
    of mechanisms whose total is ``epsilon``) keeps ``A_DI``'s posterior belief
    in the true dataset at ``rho_beta = 1 / (1 + exp(-epsilon))``, surely for
    ``delta = 0`` and with probability ``1 - delta`` otherwise.

    Parameters
    ----------
    epsilon : float
        Total privacy loss, ``>= 0``.

    Returns
    -------
    float
        ``rho_beta`` in ``[0.5, 1)``.
    """
    return float(expit(check_epsilon("epsilon", epsilon, allow_zero=True)))


def epsilon_for_posterior_bound(rho_beta: float) -> float:
    """Return the epsilon that caps the posterior belief at ``rho_beta`` (Eq. 10).

    ``epsilon = ln(rho_beta / (1 - rho_beta))``, the inverse of
    :func:`posterior_belief_bound` (seed 002 Table 3: ``rho_beta = 0.9`` gives
    ``epsilon = 2.2``).

    Parameters
    ----------
    rho_beta : float
        Tolerated posterior belief, in ``[0.5, 1)``.

    Returns
    -------
    float
        Total epsilon to spend.
    """
    value = check_real("rho_beta", rho_beta, Interval(0.5, 1, closed="left"))
    return float(logit(value))


def classic_gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float = 1.0
) -> float:
    """Return the classic Gaussian-mechanism noise scale (seed 002 Eq. 1).

    ``sigma = sqrt(2 ln(1.25 / delta)) * Delta / epsilon`` (Dwork and Roth,
    Theorem A.1). The paper's ``rho_alpha`` (Theorem 2) is stated for this
    calibration; :func:`fedleak.privacy.mechanisms.gaussian_sigma` gives the
    tighter analytic calibration.

    Parameters
    ----------
    epsilon : float
        Privacy loss, ``> 0``.
    delta : float
        In ``(0, 1)``.
    sensitivity : float, default=1.0
        L2 sensitivity ``Delta``, ``> 0``.

    Returns
    -------
    float
        Standard deviation ``sigma``.
    """
    eps = check_epsilon("epsilon", epsilon)
    delta_sensitivity = check_positive("sensitivity", sensitivity)
    return _calibration_constant(delta) * delta_sensitivity / eps


def classic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float) -> float:
    """Return the epsilon of a Gaussian mechanism by the classic rule (Eq. 2).

    ``epsilon = sqrt(2 ln(1.25 / delta)) * Delta / sigma``, Eq. (1) solved for
    epsilon; the first way of Section 5.3 to compute an empirical epsilon uses
    it with the observed local sensitivity as ``Delta``.

    Parameters
    ----------
    sigma : float
        Noise standard deviation, ``> 0``.
    delta : float
        In ``(0, 1)``.
    sensitivity : float
        L2 sensitivity ``Delta``, ``>= 0``.

    Returns
    -------
    float
    """
    noise = check_positive("sigma", sigma)
    delta_sensitivity = check_positive("sensitivity", sensitivity, allow_zero=True)
    return _calibration_constant(delta) * delta_sensitivity / noise


def gaussian_rdp(order: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Return the Renyi-DP of the Gaussian mechanism at ``order`` (seed 002 Eq. 3).

    ``epsilon_RDP(alpha) = alpha * Delta^2 / (2 sigma^2)`` (Mironov 2017); it
    adds up over compositions.

    Parameters
    ----------
    order : float
        Renyi order ``alpha > 1``.
    sigma : float
        Noise standard deviation, ``> 0``.
    sensitivity : float, default=1.0
        L2 sensitivity.

    Returns
    -------
    float
    """
    alpha = check_real("order", order, Interval(1, None, closed="neither"))
    noise = check_positive("sigma", sigma)
    delta_sensitivity = check_positive("sensitivity", sensitivity, allow_zero=True)
    return alpha * delta_sensitivity**2 / (2.0 * noise**2)


def advantage_from_noise(sensitivity: float, sigma: float) -> float:
    """Return the Bayes adversary's advantage on two Gaussians (seed 002 Eq. 14).

    Two isotropic Gaussians with standard deviation ``sigma`` whose means are
    ``Delta`` apart (Mahalanobis distance ``Delta / sigma``) are split by the
    hyperplane half-way between them, so ``rho_alpha = Phi(Delta / (2 sigma))
    - Phi(-Delta / (2 sigma))``.

    Parameters
    ----------
    sensitivity : float
        Distance ``Delta`` between the two noiseless outputs, ``>= 0``.
    sigma : float
        Noise standard deviation, ``> 0``.

    Returns
    -------
    float
        Advantage in ``[0, 1)``.
    """
    noise = check_positive("sigma", sigma)
    half = check_positive("sensitivity", sensitivity, allow_zero=True) / (2.0 * noise)
    return float(norm.cdf(half) - norm.cdf(-half))


def expected_advantage_gaussian(epsilon: float, delta: float) -> float:
    """Return the expected membership advantage ``rho_alpha`` (Theorem 2).

    Eq. (14) with the noise of Eq. (1):
    ``rho_alpha = 2 Phi(epsilon / (2 sqrt(2 ln(1.25 / delta)))) - 1``; the
    sensitivity cancels (seed 002 Table 3: ``epsilon = 2.2, delta = 0.01``
    gives 0.28).

    Parameters
    ----------
    epsilon : float
        Privacy loss, ``>= 0``.
    delta : float
        In ``(0, 1)``.

    Returns
    -------
    float
        ``rho_alpha`` in ``[0, 1)``.
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    return float(2.0 * norm.cdf(eps / (2.0 * _calibration_constant(delta))) - 1.0)


def epsilon_for_expected_advantage(rho_alpha: float, delta: float) -> float:
    """Return the epsilon whose Gaussian mechanism has advantage ``rho_alpha`` (Eq. 15).

    ``epsilon = 2 sqrt(2 ln(1.25 / delta)) Phi^{-1}((rho_alpha + 1) / 2)``,
    the inverse of :func:`expected_advantage_gaussian`; Section 5.3 uses it to
    turn an empirical advantage into an empirical epsilon.

    Parameters
    ----------
    rho_alpha : float
        Advantage in ``[0, 1)``.
    delta : float
        In ``(0, 1)``.

    Returns
    -------
    float
    """
    value = check_probability("rho_alpha", rho_alpha, closed="left")
    return float(2.0 * _calibration_constant(delta) * norm.ppf((value + 1.0) / 2.0))


def generic_advantage_bound(epsilon: float, delta: float = 0.0) -> float:
    """Mechanism-independent bound on ``A_DI``'s advantage (Proposition 2).

    Writing the advantage as ``int A(r) (g_1(r) - g_0(r)) dr`` (Eqs. 11-13)
    and bounding the densities with the DP inequality gives ``Adv <=
    (e^epsilon - 1) Pr[A = 1 | b = 0] + delta <= e^epsilon - 1 + delta``, the
    membership-advantage bound of Yeom et al. extended by ``delta``; it is
    loose unless the noise is infinite (Section 4.2), so it is capped at 1.
    :func:`tight_advantage_bound` gives the exact hypothesis-testing bound.

    Parameters
    ----------
    epsilon : float
        Privacy loss, ``>= 0``.
    delta : float, default=0.0
        In ``[0, 1)``.

    Returns
    -------
    float
        ``min(1, e^epsilon - 1 + delta)``.
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    slack = check_delta("delta", delta, allow_zero=True)
    return float(min(1.0, math.expm1(eps) + slack))


def tight_advantage_bound(epsilon: float, delta: float = 0.0) -> float:
    """Return the tightest advantage any ``(epsilon, delta)``-DP mechanism allows.

    From ``TPR <= e^epsilon FPR + delta`` and ``1 - FPR <= e^epsilon (1 -
    TPR) + delta`` (the hypothesis-testing view of DP, Kairouz et al. 2015):
    ``TPR - FPR <= (e^epsilon - 1 + 2 delta) / (e^epsilon + 1)``. Not in seed
    002; given next to :func:`generic_advantage_bound` as the reference any
    empirical advantage must respect.

    Parameters
    ----------
    epsilon : float
        Privacy loss, ``>= 0``.
    delta : float, default=0.0
        In ``[0, 1)``.

    Returns
    -------
    float
    """
    eps = check_epsilon("epsilon", epsilon, allow_zero=True)
    slack = check_delta("delta", delta, allow_zero=True)
    return float((math.expm1(eps) + 2.0 * slack) / (math.exp(eps) + 1.0))


def composed_gaussian_advantage(noise_multiplier: float, steps: int) -> float:
    """``rho_alpha`` of ``steps`` full-batch Gaussian steps (seed 002 Section 4.4).

    Each step adds ``N(0, (z Delta)^2 I)`` to an output whose two candidates
    are ``Delta`` apart; ``k`` independent steps are one Gaussian mechanism
    with Mahalanobis distance ``sqrt(k) / z`` between the candidates (the RDP
    ``k alpha / (2 z^2)`` of Eq. 3 summed), so ``rho_alpha = 2 Phi(sqrt(k) /
    (2 z)) - 1`` whatever each step's sensitivity, as long as the noise is
    scaled to it. This is the advantage the DI adversary reaches with local
    sensitivity.

    Parameters
    ----------
    noise_multiplier : float
        ``z = sigma / Delta`` of every step, ``> 0``.
    steps : int
        Number of composed steps ``k >= 1``.

    Returns
    -------
    float
    """
    z = check_positive("noise_multiplier", noise_multiplier)
    return advantage_from_noise(math.sqrt(check_int("steps", steps, low=1)), z)


def noise_multiplier_for_composed_advantage(rho_alpha: float, steps: int) -> float:
    """Inverse of :func:`composed_gaussian_advantage`: the ``z`` giving ``rho_alpha``.

    ``z = sqrt(k) / (2 Phi^{-1}((rho_alpha + 1) / 2))``.

    Parameters
    ----------
    rho_alpha : float
        Advantage in ``(0, 1)``.
    steps : int
        Number of composed steps ``k >= 1``.

    Returns
    -------
    float
    """
    value = check_probability("rho_alpha", rho_alpha, closed="neither")
    k = check_int("steps", steps, low=1)
    return float(math.sqrt(k) / (2.0 * norm.ppf((value + 1.0) / 2.0)))


#: Moment orders ``lambda = alpha - 1`` for the tail bound of full-batch
#: runs: geometric from 0.01 to 4096 (the Gaussian's RDP is closed-form at any
#: order, and the optimum moves to large orders for large noise).
TAIL_LAMBDAS: tuple[float, ...] = tuple(
    float(v) for v in np.geomspace(0.01, 4096.0, 161)
)

#: Integer orders for subsampled runs, where dp-accounting's fractional-order
#: series is slow and may not converge.
TAIL_LAMBDAS_SUBSAMPLED: tuple[float, ...] = (
    *(float(v) for v in range(1, 65)),
    80.0,
    96.0,
    128.0,
    192.0,
    256.0,
    384.0,
    512.0,
)


def posterior_tail_epsilon(
    noise_multiplier: float,
    steps: int,
    delta: float,
    *,
    sampling_rate: float = 1.0,
) -> float:
    """Return the epsilon whose belief bound holds w.p. ``1 - delta`` (Theorem 1 ii).

    Theorem 1 (ii) bounds the posterior belief by ``1 / (1 + exp(-epsilon))``
    except with probability ``delta`` through Eqs. (5)-(9): the RDP curve of
    the composition converted with Mironov's rule ``epsilon = eps_RDP(alpha)
    + ln(1/delta) / (alpha - 1)`` (seed 002 Section 2.1), which is a Chernoff
    bound on the privacy loss, ``Pr[L > epsilon] <= delta``. That is the
    moments-accountant tail bound
    :func:`fedleak.privacy.accounting.epsilon_from_log_moments` applied to
    ``steps`` times :func:`~fedleak.privacy.accounting.sgm_log_moment`.

    The tighter conversion of ``sgm_epsilon`` bounds the hockey-stick
    divergence, not this tail, so at the same epsilon it allows noise for
    which beliefs above ``rho_beta`` occur more often than ``delta``
    (``rho_beta = 0.52``, ``delta = 0.01``, 30 full-batch steps: 14 %).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / Delta`` of every step, ``> 0``.
    steps : int
        Number of steps, ``>= 1``.
    delta : float
        In ``(0, 1)``.
    sampling_rate : float, default=1.0
        Poisson sampling rate ``q`` in ``(0, 1]``.

    Returns
    -------
    float
    """
    from .accounting import epsilon_from_log_moments, sgm_log_moment

    steps = check_int("steps", steps, low=1)
    lambdas = np.asarray(
        TAIL_LAMBDAS if sampling_rate == 1.0 else TAIL_LAMBDAS_SUBSAMPLED
    )
    moments = steps * sgm_log_moment(sampling_rate, noise_multiplier, lambdas)
    epsilon, _ = epsilon_from_log_moments(moments, check_delta("delta", delta), lambdas)
    return epsilon


def _tail_noise_multiplier(
    epsilon: float, delta: float, steps: int, sampling_rate: float
) -> float:
    """Smallest ``z`` with ``posterior_tail_epsilon(z) <= epsilon`` (bisection)."""
    low, high = 0.0, 1.0
    while (
        posterior_tail_epsilon(high, steps, delta, sampling_rate=sampling_rate)
        > epsilon
    ):
        low, high = high, 2.0 * high
        if high > 1e5:
            raise ConfigError(
                f"epsilon={epsilon} needs a noise multiplier above 1e5 for "
                f"steps={steps}, delta={delta}; choose a larger rho_beta or fewer "
                "steps."
            )
    while high - low > 1e-4 * high:
        middle = 0.5 * (low + high)
        if (
            posterior_tail_epsilon(middle, steps, delta, sampling_rate=sampling_rate)
            > epsilon
        ):
            low = middle
        else:
            high = middle
    return high


@dataclass(frozen=True)
class DPSGDPlan:
    """Privacy parameters of a DP-SGD run chosen from a posterior-belief bound.

    Attributes
    ----------
    rho_beta : float
        The tolerated posterior belief.
    epsilon : float
        ``epsilon_for_posterior_bound(rho_beta)`` (Eq. 10).
    delta : float
        The chosen delta (seed 002 suggests ``delta < 1/n``).
    sampling_rate : float
        Poisson sampling rate ``q`` of each step (1 = full batch, as in the
        paper's experiments).
    steps : int
        Number of DP-SGD steps.
    noise_multiplier : float
        ``sigma / Delta`` per step such that beliefs stay below ``rho_beta``
        with probability ``1 - delta`` (:func:`posterior_tail_epsilon`); the
        run is then also ``(epsilon, delta)``-DP.
    noise_multiplier_dp : float
        The smaller multiplier :func:`fedleak.privacy.accounting.sgm_noise_multiplier`
        gives for ``(epsilon, delta)``-DP with the tight RDP conversion (which
        does not bound the posterior tail; see :func:`posterior_tail_epsilon`).
    rho_alpha : float
        Theorem 2's expected advantage for ``(epsilon, delta)``.
    rho_alpha_run : float or None
        The expected advantage of the planned run itself,
        :func:`composed_gaussian_advantage` at ``noise_multiplier`` (exact for
        ``sampling_rate = 1``; ``None`` for subsampled runs, which have no
        closed form).
    """

    rho_beta: float
    epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    noise_multiplier: float
    noise_multiplier_dp: float
    rho_alpha: float
    rho_alpha_run: float | None


def plan_dp_sgd(
    rho_beta: float,
    delta: float,
    *,
    steps: int,
    sampling_rate: float = 1.0,
) -> DPSGDPlan:
    """Choose epsilon and the DP-SGD noise multiplier from ``rho_beta`` (Section 5.1).

    ``rho_beta -> epsilon`` by Eq. (10), then ``epsilon -> noise multiplier``
    under RDP composition (Section 4.4): the multiplier whose composed RDP
    curve keeps the posterior belief below ``rho_beta`` with probability
    ``1 - delta`` (Theorem 1 ii, :func:`posterior_tail_epsilon`), next to the
    plain ``(epsilon, delta)`` multiplier of
    :func:`fedleak.privacy.accounting.sgm_noise_multiplier`.

    Parameters
    ----------
    rho_beta : float
        Tolerated posterior belief, in ``(0.5, 1)``.
    delta : float
        In ``(0, 1)``.
    steps : int
        Number of DP-SGD steps, ``>= 1``.
    sampling_rate : float, default=1.0
        Sampling rate ``q`` in ``(0, 1]``.

    Returns
    -------
    DPSGDPlan
    """
    from .accounting import sgm_noise_multiplier

    # rho_beta = 0.5 means epsilon = 0: no noise multiplier reaches it
    epsilon = epsilon_for_posterior_bound(
        check_real("rho_beta", rho_beta, Interval(0.5, 1, closed="neither"))
    )
    steps = check_int("steps", steps, low=1)
    sampling_rate = check_probability("sampling_rate", sampling_rate, closed="right")
    delta = check_delta("delta", delta)
    multiplier = _tail_noise_multiplier(epsilon, delta, steps, sampling_rate)
    run_advantage = (
        composed_gaussian_advantage(multiplier, steps) if sampling_rate == 1.0 else None
    )
    return DPSGDPlan(
        rho_beta=float(rho_beta),
        epsilon=epsilon,
        delta=delta,
        sampling_rate=float(sampling_rate),
        steps=int(steps),
        noise_multiplier=multiplier,
        noise_multiplier_dp=float(
            sgm_noise_multiplier(epsilon, delta, sampling_rate, steps)
        ),
        rho_alpha=expected_advantage_gaussian(epsilon, delta),
        rho_alpha_run=run_advantage,
    )
