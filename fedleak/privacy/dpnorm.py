"""DPNorm: a private clipping bound, the noisy mode of a norm histogram (Alg. 6).

Seed 000 Sec. 5.1.3 (seed 001 Alg. 3). The range ``(0, C_max]`` is cut into
``w`` equal bins with upper ends ``C_j = j * C_max / w``; ``t_j`` counts the
records whose L2-norm falls in ``(C_{j-1}, C_j]``; every count gets
``N(0, 2 sigma_C**2)`` noise and the upper end of the bin with the largest
noisy count is released as the clipping bound ``C_b``. One record moves at
most two counts by one, so the histogram's L2-sensitivity is ``sqrt(2)`` and
the release is a Gaussian mechanism of noise multiplier ``sigma_C`` whatever
the norms.

One deliberate difference from Alg. 6: norms above ``C_max`` (and exact
zeros) are counted in the last (first) bin instead of nowhere, so every record
is in exactly one bin (same sensitivity) and a batch whose gradients all
exceed ``C_max`` is clipped at ``C_max`` rather than at a random bound.

No library offers this selection rule, hence this small function.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ..validation import check_int, check_positive
from .randomness import RngLike, noise_normal

__all__ = ["dp_norm", "norm_histogram"]


def norm_histogram(norms: ArrayLike, c_max: float, bins: int) -> np.ndarray:
    """Count norms per bin ``(C_{j-1}, C_j]``, ``j = 1..bins`` (Alg. 6, line 2).

    Parameters
    ----------
    norms : array_like
        Non-negative L2-norms, one per record.
    c_max : float
        Largest candidate bound ``C_max``, > 0.
    bins : int
        Number of bins ``w``, >= 1.

    Returns
    -------
    numpy.ndarray
        ``bins`` integer counts; norms above ``c_max`` count in the last bin,
        zeros in the first.
    """
    values = np.asarray(norms, dtype=np.float64).ravel()
    index = np.clip(np.ceil(values * bins / c_max), 1, bins).astype(np.int64)
    return np.bincount(index - 1, minlength=bins)


def dp_norm(
    norms: ArrayLike,
    sigma_c: float,
    *,
    c_max: float = 10.0,
    bins: int = 100,
    rng: RngLike = None,
    secure_mode: bool = False,
) -> float:
    """Pick a clipping bound privately: the noisy mode of the norm histogram.

    Parameters
    ----------
    norms : array_like
        L2-norms of the records (feature vectors or per-sample gradients).
    sigma_c : float
        Noise multiplier ``sigma_C``; the counts get std ``sqrt(2) sigma_C``.
    c_max : float
        ``C_max`` (seed default 10).
    bins : int
        ``w`` (seed default 100).
    rng : numpy.random.Generator, int or None
        Seed or generator of the noise.
    secure_mode : bool
        Draw the noise from the OS CSPRNG (refuses a seed).

    Returns
    -------
    float
        ``C_b = j * c_max / bins`` for the winning bin ``j >= 1``.

    Raises
    ------
    ConfigError
        If ``sigma_c < 0``, ``c_max <= 0`` or ``bins < 1``.
    """
    check_positive("sigma_c", sigma_c, allow_zero=True)
    check_positive("c_max", c_max)
    check_int("bins", bins, low=1)
    counts = norm_histogram(norms, c_max, bins).astype(np.float64)
    noisy = counts + noise_normal(
        math.sqrt(2.0) * sigma_c, bins, rng, secure_mode=secure_mode
    )
    return float((int(np.argmax(noisy)) + 1) * c_max / bins)
