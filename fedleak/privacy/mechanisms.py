"""The Gaussian and Laplace mechanisms (seed 001 Sec. 3.4; seed 004 Ch. 3).

Both add calibrated noise to the true value of a query and return the noisy
value. The Gaussian mechanism adds ``N(0, (sigma * sensitivity)**2)`` to every
coordinate, where ``sensitivity`` is the query's global L2-sensitivity and
``sigma`` its noise multiplier (seed 001 Sec. 3.4, "Gaussian Mechanism"); pass
``(epsilon, delta)`` instead and ``sigma`` is the smallest one meeting them,
from the analytic Gaussian mechanism of Balle and Wang (ICML 2018) as
implemented in Google's ``dp-accounting``. The Laplace mechanism adds
``Laplace(0, sensitivity / epsilon)`` for an L1-``sensitivity`` and gives pure
``epsilon``-DP (Dwork et al. 2006).

Noise is seeded (``rng``) or, with ``secure_mode=True``, drawn from the OS
CSPRNG with any seed refused (see :mod:`fedleak.privacy.randomness`).

Examples
--------
>>> from fedleak.privacy.mechanisms import gaussian_mechanism
>>> noisy = gaussian_mechanism([10.0, 20.0], sensitivity=1.0, sigma=2.0, rng=0)
>>> noisy.shape
(2,)
"""

from __future__ import annotations

from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ConfigError
from ..validation import check_delta, check_epsilon, check_positive
from .randomness import RngLike, noise_laplace, noise_normal

__all__ = [
    "gaussian_mechanism",
    "gaussian_sigma",
    "laplace_mechanism",
]


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """Return the smallest Gaussian noise multiplier giving ``(epsilon, delta)``-DP.

    Uses the analytic Gaussian mechanism (Balle and Wang 2018) through
    ``dp_accounting.get_sigma_gaussian``; it is tighter than the classic
    ``sqrt(2 ln(1.25/delta)) / epsilon`` and valid for any ``epsilon > 0``.

    Parameters
    ----------
    epsilon : float
        Target epsilon, > 0.
    delta : float
        Target delta, in ``(0, 1)``.

    Returns
    -------
    float
        Noise standard deviation for a query of L2-sensitivity 1.

    Raises
    ------
    ConfigError
        If ``epsilon <= 0`` or ``delta`` is outside ``(0, 1)``.
    """
    import dp_accounting

    eps = check_epsilon("epsilon", epsilon)
    return float(dp_accounting.get_sigma_gaussian(eps, check_delta("delta", delta)))


@overload
def gaussian_mechanism(
    value: float,
    sensitivity: float,
    *,
    sigma: float | None = ...,
    epsilon: float | None = ...,
    delta: float | None = ...,
    rng: RngLike = ...,
    secure_mode: bool = ...,
) -> float: ...


@overload
def gaussian_mechanism(
    value: ArrayLike,
    sensitivity: float,
    *,
    sigma: float | None = ...,
    epsilon: float | None = ...,
    delta: float | None = ...,
    rng: RngLike = ...,
    secure_mode: bool = ...,
) -> NDArray[np.float64]: ...


def gaussian_mechanism(
    value: ArrayLike,
    sensitivity: float,
    *,
    sigma: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rng: RngLike = None,
    secure_mode: bool = False,
) -> float | NDArray[np.float64]:
    """Release ``value`` with Gaussian noise (seed 001 Sec. 3.4, Lemma 1).

    Give either the noise multiplier ``sigma`` or a target ``(epsilon,
    delta)``, not both.

    Parameters
    ----------
    value : float or array_like
        The true query answer (a scalar or any array).
    sensitivity : float
        Global L2-sensitivity of the query, >= 0.
    sigma : float, optional
        Noise multiplier: the noise std is ``sigma * sensitivity``.
    epsilon, delta : float, optional
        Target privacy; ``sigma`` is then :func:`gaussian_sigma` of them.
    rng : numpy.random.Generator, int or None
        Seed or generator of the noise; must be ``None`` in secure mode.
    secure_mode : bool
        Draw the noise from ``os.urandom``; refuses a seed.

    Returns
    -------
    float or numpy.ndarray
        A float for a Python/NumPy scalar ``value``, else a float64 array of
        the same shape.

    Raises
    ------
    ConfigError
        If both or neither of ``sigma`` and ``(epsilon, delta)`` are given, a
        parameter is out of range, or a seed is passed in secure mode.
    """
    sensitivity = check_positive("sensitivity", sensitivity, allow_zero=True)
    if sigma is not None and (epsilon is not None or delta is not None):
        raise ConfigError("give either sigma or (epsilon, delta), not both.")
    if sigma is None:
        if epsilon is None or delta is None:
            raise ConfigError(
                "the Gaussian mechanism needs sigma (a noise multiplier) or both "
                "epsilon and delta."
            )
        sigma = gaussian_sigma(epsilon, delta)
    sigma = check_positive("sigma", sigma, allow_zero=True)
    true = np.asarray(value, dtype=np.float64)
    noisy = true + noise_normal(
        sigma * sensitivity, true.shape, rng, secure_mode=secure_mode
    )
    return float(noisy) if noisy.ndim == 0 else noisy


@overload
def laplace_mechanism(
    value: float,
    sensitivity: float,
    epsilon: float,
    *,
    rng: RngLike = ...,
    secure_mode: bool = ...,
) -> float: ...


@overload
def laplace_mechanism(
    value: ArrayLike,
    sensitivity: float,
    epsilon: float,
    *,
    rng: RngLike = ...,
    secure_mode: bool = ...,
) -> NDArray[np.float64]: ...


def laplace_mechanism(
    value: ArrayLike,
    sensitivity: float,
    epsilon: float,
    *,
    rng: RngLike = None,
    secure_mode: bool = False,
) -> float | NDArray[np.float64]:
    """Release ``value`` with Laplace noise of scale ``sensitivity / epsilon``.

    Parameters
    ----------
    value : float or array_like
        The true query answer.
    sensitivity : float
        Global L1-sensitivity of the query, >= 0.
    epsilon : float
        Privacy parameter, > 0 (pure epsilon-DP).
    rng : numpy.random.Generator, int or None
        Seed or generator of the noise; must be ``None`` in secure mode.
    secure_mode : bool
        Draw the noise from ``os.urandom``; refuses a seed.

    Returns
    -------
    float or numpy.ndarray
        A float for a scalar ``value``, else a float64 array of its shape.

    Raises
    ------
    ConfigError
        If a parameter is out of range or a seed is passed in secure mode.
    """
    sensitivity = check_positive("sensitivity", sensitivity, allow_zero=True)
    epsilon = check_epsilon("epsilon", epsilon)
    true = np.asarray(value, dtype=np.float64)
    noisy = true + noise_laplace(
        sensitivity / epsilon, true.shape, rng, secure_mode=secure_mode
    )
    return float(noisy) if noisy.ndim == 0 else noisy
