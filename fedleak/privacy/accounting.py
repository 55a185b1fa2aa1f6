"""Moments (RDP) accounting: the sampled Gaussian, Theorem 4's split, Theorem 5.

Vocabulary. For a mechanism ``A`` the seed (001 Sec. 3.4; 000 Sec. 5.2) uses
the log moment of the privacy loss ``beta_A(lambda) = max log E[exp(lambda *
loss)]``. It is Renyi DP in other clothes: ``beta_A(lambda) = lambda *
rdp_A(lambda + 1)``, where ``rdp_A(alpha)`` is the order-``alpha`` RDP of ``A``
(Mironov 2017). fedleak takes the RDP curve of the sampled Gaussian mechanism
from Google's ``dp-accounting`` (including fractional orders, which Theorem 4
needs) instead of integrating ``E1``/``E2`` by hand.

What is here
------------
* :func:`sgm_epsilon` / :func:`sgm_noise_multiplier`: epsilon of ``steps``
  Poisson-sampled Gaussian steps, straight from ``dp-accounting``'s
  ``RdpAccountant``, and its inverse by bisection (never overshooting).
* :func:`gaussian_log_moment`, :func:`sgm_log_moment`: ``beta(lambda)`` of one
  Gaussian / sampled Gaussian step.
* :func:`shared_batch_log_moment`: Theorem 4 (general moments accountant) for
  mechanisms that share one sampled batch (DPNorm + noisy gradient in Alg. 5):
  ``min_j sum_i j_i * beta_i(lambda / j_i)`` over a grid of splits ``j``.
* :func:`kmeans_log_moment`, :func:`dpgm_log_moment`, :func:`dpgm_epsilon`:
  Eq. 5.2, Eq. 5.5 and Theorem 5, the epsilon of DPGM (k-means then SGD).
* :class:`MomentsAccountant`: a thin stateful ledger of frozen events.

A note on the seed's Lemma 1. The seed states ``beta_G(lambda) = (lambda**2 +
lambda) / (4 sigma**2)`` for the Gaussian mechanism with noise multiplier
``sigma``; its own proof (the privacy loss is normal with mean ``1/(2
sigma**2)`` and std ``1/sigma``) gives ``(lambda**2 + lambda) / (2
sigma**2)``, which is also the standard RDP of the Gaussian mechanism. fedleak
uses the latter, the safe one: every epsilon here is at least the seed's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ConfigError
from ..validation import check_delta, check_int, check_positive, check_probability

__all__ = [
    "DEFAULT_LAMBDAS",
    "DEFAULT_SPLITS",
    "GaussianEvent",
    "MomentsAccountant",
    "SampledGaussianEvent",
    "SharedBatchEvent",
    "dpgm_epsilon",
    "dpgm_log_moment",
    "epsilon_from_log_moments",
    "gaussian_log_moment",
    "kmeans_log_moment",
    "sgm_epsilon",
    "sgm_log_moment",
    "sgm_noise_multiplier",
    "shared_batch_log_moment",
]

DEFAULT_LAMBDAS: tuple[int, ...] = tuple(range(1, 33))
"""Integer moments ``lambda <= 32``, the seed's grid (000 Sec. 5.3.1)."""

DEFAULT_SPLITS: tuple[float, ...] = (
    0.05,
    0.1,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    0.95,
)
"""Hölder weights ``j_1`` tried for two mechanisms (``j_2 = 1 - j_1``); the
seed reports that 10 values suffice (000 Sec. 5.2)."""


# ----------------------------------------------------------------- validation
def _lambdas(lambdas: ArrayLike | None) -> NDArray[np.float64]:
    grid = np.asarray(DEFAULT_LAMBDAS if lambdas is None else lambdas, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or np.any(~(grid > 0)):
        raise ConfigError(
            "moment orders lambda must be a non-empty 1-d sequence of numbers > 0; "
            f"got {lambdas!r}."
        )
    return grid


# ------------------------------------------------------ sampled Gaussian (RDP)
def _sgm_rdp(q: float, noise_multiplier: float, orders: NDArray[np.float64]) -> Any:
    """Order-``alpha`` RDP of one Poisson-sampled Gaussian step (dp-accounting).

    ``dp-accounting``'s public accountant returns only epsilon; Theorem 4 needs
    the RDP curve at arbitrary (fractional) orders, so this calls the
    function its ``RdpAccountant`` composes with. A test pins it against the
    public accountant.
    """
    from dp_accounting.rdp import rdp_privacy_accountant

    return rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(
        q, noise_multiplier, [float(o) for o in orders]
    )


def sgm_epsilon(
    q: float,
    noise_multiplier: float,
    steps: int,
    delta: float,
    orders: Sequence[float] | None = None,
) -> float:
    """Epsilon of ``steps`` Poisson-sampled Gaussian steps (DP-SGD).

    Composes ``PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))``
    ``steps`` times in ``dp_accounting``'s ``RdpAccountant`` and converts to
    ``(epsilon, delta)`` with its (tight) RDP conversion.

    Parameters
    ----------
    q : float
        Sampling probability of a record per step, in ``[0, 1]``.
    noise_multiplier : float
        Noise std divided by the L2-sensitivity (clipping norm), > 0.
    steps : int
        Number of steps, >= 0.
    delta : float
        Target delta, in ``(0, 1)``.
    orders : Sequence of float, optional
        RDP orders (> 1); dp-accounting's default grid when omitted.

    Returns
    -------
    float
        Epsilon (0 for ``steps == 0`` or ``q == 0``).

    Raises
    ------
    ConfigError
        If a parameter is out of range.
    """
    import dp_accounting

    q = check_probability("q", q)
    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    steps = check_int("steps", steps, low=0)
    delta = check_delta("delta", delta)
    if steps == 0 or q == 0.0:
        return 0.0
    accountant = dp_accounting.rdp.RdpAccountant(
        None if orders is None else [float(o) for o in orders]
    )
    event = dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(noise_multiplier)
    )
    return float(accountant.compose(event, steps).get_epsilon(delta))


def sgm_noise_multiplier(
    epsilon: float,
    delta: float,
    q: float,
    steps: int,
    *,
    tolerance: float = 1e-4,
    max_noise_multiplier: float = 1e4,
) -> float:
    """Smallest noise multiplier whose :func:`sgm_epsilon` is <= ``epsilon``.

    Bisection on ``noise_multiplier``; returns the upper end of the final
    bracket, so the budget is never overshot (as Opacus'
    ``get_noise_multiplier``).

    Parameters
    ----------
    epsilon : float
        Target epsilon, > 0.
    delta : float
        Target delta, in ``(0, 1)``.
    q : float
        Sampling probability, in ``(0, 1]``.
    steps : int
        Number of steps, >= 1.
    tolerance : float
        Width of the final bracket.
    max_noise_multiplier : float
        Give up above this noise multiplier.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If a parameter is out of range or the budget needs more noise than
        ``max_noise_multiplier``.
    """
    target = check_positive("epsilon", epsilon)
    check_int("steps", steps, low=1)
    check_probability("q", q, closed="right")
    low, high = 0.0, 1.0
    while sgm_epsilon(q, high, steps, delta) > target:
        low, high = high, 2.0 * high
        if high > max_noise_multiplier:
            raise ConfigError(
                f"epsilon={epsilon} cannot be met with q={q}, steps={steps}, "
                f"delta={delta} below noise multiplier {max_noise_multiplier}; "
                "use fewer steps or a smaller q."
            )
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        if sgm_epsilon(q, middle, steps, delta) > target:
            low = middle
        else:
            high = middle
    return high


def sgm_log_moment(
    q: float, noise_multiplier: float, lambdas: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Log moment ``beta(lambda)`` of one Poisson-sampled Gaussian step.

    ``beta(lambda) = lambda * rdp(lambda + 1)``: the seed's
    ``log max(E1, E2)`` (000 Sec. 5.2) with ``mu_1 = (1 - q) g(x) + q g(x - 1)``;
    valid for fractional ``lambda`` too.

    Parameters
    ----------
    q : float
        Sampling probability, in ``[0, 1]``.
    noise_multiplier : float
        Noise std over L2-sensitivity, > 0.
    lambdas : array_like, optional
        Moment orders (> 0); :data:`DEFAULT_LAMBDAS` when omitted.

    Returns
    -------
    numpy.ndarray
        ``beta`` at every ``lambda``.
    """
    q = check_probability("q", q)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    grid = _lambdas(lambdas)
    if q == 0.0:
        return np.zeros_like(grid)
    return np.array(_sgm_log_moment_cached(q, sigma, tuple(grid.tolist())))


@functools.lru_cache(maxsize=4096)
def _sgm_log_moment_cached(
    q: float, sigma: float, lambdas: tuple[float, ...]
) -> tuple[float, ...]:
    grid = np.asarray(lambdas)
    rdp = np.asarray(_sgm_rdp(q, sigma, grid + 1.0), dtype=float)
    return tuple((grid * rdp).tolist())


def gaussian_log_moment(
    noise_multiplier: float, lambdas: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Log moment of one (unsampled) Gaussian mechanism (seed Lemma 1).

    ``beta(lambda) = lambda * (lambda + 1) / (2 * sigma**2)``; see the module
    note on the seed's constant.

    Parameters
    ----------
    noise_multiplier : float
        Noise std over L2-sensitivity, > 0.
    lambdas : array_like, optional
        Moment orders; :data:`DEFAULT_LAMBDAS` when omitted.

    Returns
    -------
    numpy.ndarray
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    grid = _lambdas(lambdas)
    return grid * (grid + 1.0) / (2.0 * sigma**2)


def shared_batch_log_moment(
    q: float,
    noise_multipliers: Sequence[float],
    lambdas: ArrayLike | None = None,
    splits: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Theorem 4: log moment of sampled Gaussians that share one batch.

    Mechanisms that select the same Poisson batch are not independent, so
    their moments cannot simply be added (Theorem 2). By Hölder's inequality
    (000 Theorem 4, Eq. 5.5) ``beta(lambda) <= sum_i j_i * beta_i(lambda /
    j_i)`` for any weights ``j_i > 0`` summing to 1; this returns the minimum
    over ``splits``.

    Parameters
    ----------
    q : float
        Sampling probability of the shared batch.
    noise_multipliers : Sequence of float
        One noise multiplier per mechanism (e.g. ``(sigma_C, sigma_G)`` for
        DPNorm and the noisy gradient of Alg. 5).
    lambdas : array_like, optional
        Moment orders; :data:`DEFAULT_LAMBDAS` when omitted.
    splits : array_like, optional
        Candidate weight vectors, shape ``(n, len(noise_multipliers))``, rows
        positive and summing to 1. For two mechanisms the default is
        ``(j, 1 - j)`` for ``j`` in :data:`DEFAULT_SPLITS`; for one, ``(1,)``.

    Returns
    -------
    numpy.ndarray
        The smallest bound at every ``lambda``.

    Raises
    ------
    ConfigError
        If the splits are malformed or no default exists for the count.
    """
    sigmas = [check_positive("noise_multipliers", s) for s in noise_multipliers]
    grid = _lambdas(lambdas)
    if splits is None:
        if len(sigmas) == 1:
            weights = np.ones((1, 1))
        elif len(sigmas) == 2:
            j = np.asarray(DEFAULT_SPLITS)
            weights = np.column_stack([j, 1.0 - j])
        else:
            raise ConfigError(
                f"pass explicit splits for {len(sigmas)} mechanisms sharing a batch."
            )
    else:
        weights = np.atleast_2d(np.asarray(splits, dtype=float))
    if (
        weights.shape[1] != len(sigmas)
        or np.any(~(weights > 0))
        or not np.allclose(weights.sum(axis=1), 1.0)
    ):
        raise ConfigError(
            f"splits must have rows of {len(sigmas)} positive weights summing to 1; "
            f"got shape {weights.shape}."
        )
    totals = np.zeros((weights.shape[0], grid.size))
    for column, sigma in enumerate(sigmas):
        for row, weight in enumerate(weights[:, column]):
            totals[row] += weight * sgm_log_moment(q, sigma, grid / weight)
    result: NDArray[np.float64] = totals.min(axis=0)
    return result


def kmeans_log_moment(
    iterations: int,
    sigma_k: float,
    sigma_c: float | None = None,
    lambdas: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Eq. 5.2: log moment of private (kernel) k-means, Alg. 4.

    Each of the ``iterations`` Lloyd steps releases noisy cluster sizes and
    noisy feature sums, two Gaussian mechanisms of noise multiplier
    ``sigma_k``; DPNorm (noise multiplier ``sigma_c``) adds one more per
    iteration when the clipping bound is chosen privately. With the RBF kernel
    and ``C_b = 1`` (Theorem 3) pass ``sigma_c=None``.

    Parameters
    ----------
    iterations : int
        ``T_K``, >= 0.
    sigma_k : float
        Noise multiplier of counts and sums.
    sigma_c : float, optional
        Noise multiplier of DPNorm, if DPNorm picks ``C_b``.
    lambdas : array_like, optional
        Moment orders; :data:`DEFAULT_LAMBDAS` when omitted.

    Returns
    -------
    numpy.ndarray
    """
    iterations = check_int("iterations", iterations, low=0)
    moment = 2.0 * gaussian_log_moment(sigma_k, lambdas)
    if sigma_c is not None:
        moment = moment + gaussian_log_moment(sigma_c, lambdas)
    return iterations * moment


def dpgm_log_moment(
    *,
    q: float,
    sgd_steps: int,
    sigma_g: float,
    sigma_c: float | None,
    kmeans_iterations: int,
    sigma_k: float | None,
    kmeans_dpnorm: bool = False,
    lambdas: ArrayLike | None = None,
    splits: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Total log moment of DPGM, ``beta_K(lambda) + beta_S(lambda)``.

    ``beta_S`` (Eq. 5.5) is ``sgd_steps`` times Theorem 4's bound for DPNorm
    (``sigma_c``) and the noisy gradient (``sigma_g``) sharing each batch, or
    ``sgd_steps`` plain sampled Gaussians when ``sigma_c`` is ``None`` (fixed
    clipping). ``q = L / |X|`` for any number of clusters (000 Sec. 5.2).

    Parameters
    ----------
    q : float
        Per-step sampling probability ``L / |X|``.
    sgd_steps : int
        ``T_S``.
    sigma_g : float
        Gradient noise multiplier (noise ``sqrt(2) sigma_G C_b`` on
        sensitivity ``sqrt(2) C_b``).
    sigma_c : float or None
        DPNorm noise multiplier, or ``None`` for fixed clipping.
    kmeans_iterations : int
        ``T_K`` (0 to skip clustering, k = 1).
    sigma_k : float or None
        k-means noise multiplier (ignored when ``kmeans_iterations == 0``).
    kmeans_dpnorm : bool
        Whether k-means also called DPNorm (not needed for RBF features).
    lambdas, splits : array_like, optional
        Moment orders and Hölder splits.

    Returns
    -------
    numpy.ndarray
    """
    grid = _lambdas(lambdas)
    sgd_steps = check_int("sgd_steps", sgd_steps, low=0)
    if sigma_c is None:
        per_step = sgm_log_moment(q, sigma_g, grid)
    else:
        per_step = shared_batch_log_moment(q, (sigma_c, sigma_g), grid, splits)
    total = sgd_steps * per_step
    if kmeans_iterations:
        if sigma_k is None:
            raise ConfigError("sigma_k is needed when kmeans_iterations > 0.")
        total = total + kmeans_log_moment(
            kmeans_iterations,
            sigma_k,
            sigma_c if kmeans_dpnorm else None,
            grid,
        )
    return total


def epsilon_from_log_moments(
    log_moments: ArrayLike, delta: float, lambdas: ArrayLike | None = None
) -> tuple[float, float]:
    """Tail bound of the moments accountant (seed Theorem 2 / Theorem 5).

    ``epsilon = min_lambda (beta(lambda) - log delta) / lambda``.

    Parameters
    ----------
    log_moments : array_like
        ``beta`` at each ``lambda``.
    delta : float
        Target delta, in ``(0, 1)``.
    lambdas : array_like, optional
        The orders of ``log_moments``; :data:`DEFAULT_LAMBDAS` when omitted.

    Returns
    -------
    tuple of float
        ``(epsilon, best lambda)``.
    """
    grid = _lambdas(lambdas)
    beta = np.asarray(log_moments, dtype=float)
    if beta.shape != grid.shape:
        raise ConfigError(
            f"log_moments has shape {beta.shape} but lambdas {grid.shape}; "
            "they must match."
        )
    candidates = (beta - math.log(check_delta("delta", delta))) / grid
    best = int(np.nanargmin(candidates))
    return float(candidates[best]), float(grid[best])


def dpgm_epsilon(
    *,
    q: float,
    sgd_steps: int,
    sigma_g: float,
    sigma_c: float | None,
    kmeans_iterations: int,
    sigma_k: float | None,
    delta: float,
    kmeans_dpnorm: bool = False,
    lambdas: ArrayLike | None = None,
    splits: ArrayLike | None = None,
) -> float:
    """Theorem 5: the epsilon of DPGM for a given delta.

    ``epsilon = min_lambda (beta_K(lambda) + beta_S(lambda) - log delta) /
    lambda`` over integer ``lambda <= 32`` by default. The seed's convention is
    ``delta = 1 / |X|``.

    Parameters
    ----------
    q, sgd_steps, sigma_g, sigma_c, kmeans_iterations, sigma_k, kmeans_dpnorm
        As in :func:`dpgm_log_moment`.
    delta : float
        Target delta.
    lambdas, splits : array_like, optional
        Moment orders and Hölder splits.

    Returns
    -------
    float
    """
    grid = _lambdas(lambdas)
    moments = dpgm_log_moment(
        q=q,
        sgd_steps=sgd_steps,
        sigma_g=sigma_g,
        sigma_c=sigma_c,
        kmeans_iterations=kmeans_iterations,
        sigma_k=sigma_k,
        kmeans_dpnorm=kmeans_dpnorm,
        lambdas=grid,
        splits=splits,
    )
    return epsilon_from_log_moments(moments, delta, grid)[0]


# ------------------------------------------------------------ stateful ledger
@dataclass(frozen=True, slots=True)
class GaussianEvent:
    """One Gaussian mechanism on the whole dataset (noise multiplier ``sigma``)."""

    noise_multiplier: float

    def log_moment(self, lambdas: NDArray[np.float64]) -> NDArray[np.float64]:
        """Return ``beta`` at ``lambdas`` (seed Lemma 1)."""
        return gaussian_log_moment(self.noise_multiplier, lambdas)


@dataclass(frozen=True, slots=True)
class SampledGaussianEvent:
    """One Gaussian mechanism on a Poisson sample of rate ``q``."""

    q: float
    noise_multiplier: float

    def log_moment(self, lambdas: NDArray[np.float64]) -> NDArray[np.float64]:
        """Return ``beta`` at ``lambdas`` (dp-accounting's RDP)."""
        return sgm_log_moment(self.q, self.noise_multiplier, lambdas)


@dataclass(frozen=True, slots=True)
class SharedBatchEvent:
    """Several Gaussian mechanisms on one shared Poisson batch (Theorem 4)."""

    q: float
    noise_multipliers: tuple[float, ...]

    def log_moment(self, lambdas: NDArray[np.float64]) -> NDArray[np.float64]:
        """Return Theorem 4's bound at ``lambdas``."""
        return shared_batch_log_moment(self.q, self.noise_multipliers, lambdas)


Event = GaussianEvent | SampledGaussianEvent | SharedBatchEvent


@dataclass
class MomentsAccountant:
    """Adds up log moments of independent (adaptively composed) events.

    A thin ledger over the pure functions above: ``compose`` validates the
    event first (so a bad event never enters the ledger), then records it;
    ``get_epsilon`` sums the moments (Theorem 2) and applies the tail bound.

    Parameters
    ----------
    lambdas : Sequence of float
        Moment orders; the seed's integer ``lambda <= 32`` by default.

    Attributes
    ----------
    ledger : tuple of (event, count)
        What was composed so far, oldest first; read-only (a fresh tuple),
        so the only way in is :meth:`compose`, which validates.

    Examples
    --------
    >>> acc = MomentsAccountant()
    >>> eps = acc.compose(SampledGaussianEvent(0.01, 1.1), 1000).get_epsilon(1e-5)
    >>> acc.ledger
    ((SampledGaussianEvent(q=0.01, noise_multiplier=1.1), 1000),)
    """

    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS
    _events: list[tuple[Event, int]] = field(
        default_factory=list, init=False, repr=False
    )

    @property
    def ledger(self) -> tuple[tuple[Event, int], ...]:
        """Return the composed ``(event, count)`` pairs, oldest first."""
        return tuple(self._events)

    def compose(self, event: Event, count: int = 1) -> Self:
        """Record ``count`` independent repetitions of ``event``.

        Parameters
        ----------
        event : GaussianEvent, SampledGaussianEvent or SharedBatchEvent
            The mechanism.
        count : int
            Repetitions, >= 0.

        Returns
        -------
        MomentsAccountant
            ``self``, to chain calls.

        Raises
        ------
        ConfigError
            If the event's parameters are invalid (nothing is recorded).
        """
        if not isinstance(event, Event):
            raise ConfigError(f"unsupported privacy event {event!r}.")
        count = check_int("count", count, low=0)
        event.log_moment(_lambdas(self.lambdas))
        self._events.append((event, count))
        return self

    def log_moments(self) -> NDArray[np.float64]:
        """Return the total log moment at every order."""
        grid = _lambdas(self.lambdas)
        total = np.zeros_like(grid)
        for event, count in self._events:
            total = total + count * event.log_moment(grid)
        return total

    def get_epsilon(self, delta: float) -> float:
        """Return the epsilon spent so far for ``delta``."""
        if not self._events:
            return 0.0
        return epsilon_from_log_moments(self.log_moments(), delta, self.lambdas)[0]
