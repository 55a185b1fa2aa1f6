"""Where the noise of fedleak's DP mechanisms comes from.

Two sources, one switch:

* seeded (default): a :class:`numpy.random.Generator`, built from an ``int``
  seed, a ``Generator`` or ``None`` (fresh OS entropy) by :func:`check_rng`;
  same seed, same numbers, so experiments are reproducible;
* ``secure_mode=True``: every draw is built from ``os.urandom`` (the operating
  system's CSPRNG) and passing a seed is refused, as Opacus does ("Passing seed
  is prohibited in secure mode"). A seeded Mersenne-Twister/PCG stream is
  predictable from its seed; OS randomness is not.

numpy and torch ship no CSPRNG-backed normal sampler, so the secure draws are
written here: 53-bit uniforms from ``os.urandom`` and the Box-Muller transform
(normal) or the inverse CDF (Laplace). Like every floating-point sampler they
do not defend against the floating-point attack of Mironov (CCS 2012); use
them to remove seed predictability, not as a certified implementation.
"""

from __future__ import annotations

import os

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError

__all__ = [
    "RngLike",
    "check_rng",
    "noise_generator",
    "noise_normal",
    "noise_laplace",
    "secure_uniform",
]

RngLike = np.random.Generator | int | None
"""What every stochastic entry point of fedleak accepts as ``rng``/``seed``."""

_TWO_POW_53 = float(2**53)


def check_rng(rng: RngLike) -> np.random.Generator:
    """Turn ``rng`` into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    rng : numpy.random.Generator, int or None
        A generator (returned as is), a non-negative seed, or ``None`` for
        fresh OS entropy.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    ConfigError
        If ``rng`` is a negative int or of another type.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, bool) or not isinstance(rng, int | np.integer) or rng < 0:
        raise ConfigError(
            f"rng/seed must be a numpy Generator, a non-negative int or None; "
            f"got {rng!r}."
        )
    return np.random.default_rng(int(rng))


def noise_generator(noise_seed: int | None, *words: int) -> np.random.Generator:
    """Return the generator one party's DP noise is drawn from.

    The experiment's seed fixes data, sampling and model initialisation; the
    noise must not follow from it, or anyone who knows the seed can subtract
    the noise. Without ``noise_seed`` the generator is seeded from fresh OS
    entropy (128 bits from ``os.urandom`` through
    :class:`numpy.random.SeedSequence`), so no two calls, runs or clients
    share a stream and nothing in the experiment file recomputes it. With a
    ``noise_seed`` (reproducible and **not private**) it is derived from
    ``(noise_seed, *words)``, e.g. the client and the round, so a resumed
    run adds the noise of the uninterrupted one.

    Parameters
    ----------
    noise_seed : int or None
        ``[privacy] noise_seed`` (>= 0), or None for OS entropy.
    *words : int
        Non-negative integers naming the draw (ignored without a seed).

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    ConfigError
        If ``noise_seed`` or a word is negative or not an int.
    """
    if noise_seed is None:
        return np.random.default_rng()
    entropy = [noise_seed, *words]
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 0 for w in entropy):
        raise ConfigError(
            f"noise_seed and its words must be non-negative ints; got {entropy!r}"
        )
    return np.random.default_rng(entropy)


def _refuse_seed_in_secure_mode(rng: RngLike, secure_mode: bool) -> None:
    if secure_mode and rng is not None:
        raise ConfigError(
            "Passing seed is prohibited in secure mode: secure_mode=True draws "
            "noise from the OS CSPRNG; pass rng=None (or secure_mode=False for "
            "reproducible experiments)."
        )


def secure_uniform(size: int | tuple[int, ...]) -> NDArray[np.float64]:
    """Draw uniforms in the open interval ``(0, 1)`` from ``os.urandom``.

    Parameters
    ----------
    size : int or tuple of int
        Output shape.

    Returns
    -------
    numpy.ndarray
        float64 values ``(k + 0.5) / 2**53`` for uniform 53-bit integers ``k``.
    """
    shape = (size,) if isinstance(size, int) else tuple(size)
    count = int(np.prod(shape, dtype=np.int64))
    words = np.frombuffer(os.urandom(8 * count), dtype=np.uint64) >> np.uint64(11)
    return ((words.astype(np.float64) + 0.5) / _TWO_POW_53).reshape(shape)


def noise_normal(
    scale: float,
    size: int | tuple[int, ...],
    rng: RngLike = None,
    *,
    secure_mode: bool = False,
) -> NDArray[np.float64]:
    """Draw i.i.d. ``N(0, scale**2)`` noise, seeded or from the OS CSPRNG.

    Parameters
    ----------
    scale : float
        Standard deviation, >= 0.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator, int or None
        Seed or generator; must be ``None`` when ``secure_mode`` is set.
    secure_mode : bool
        Use ``os.urandom`` and the Box-Muller transform instead of ``rng``.

    Returns
    -------
    numpy.ndarray
    """
    _refuse_seed_in_secure_mode(rng, secure_mode)
    if not secure_mode:
        return check_rng(rng).normal(0.0, scale, size=size)
    u1 = secure_uniform(size)
    u2 = secure_uniform(size)
    return scale * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def noise_laplace(
    scale: float,
    size: int | tuple[int, ...],
    rng: RngLike = None,
    *,
    secure_mode: bool = False,
) -> NDArray[np.float64]:
    """Draw i.i.d. Laplace(0, ``scale``) noise, seeded or from the OS CSPRNG.

    Parameters
    ----------
    scale : float
        Laplace scale ``b`` (std ``sqrt(2) * b``), >= 0.
    size : int or tuple of int
        Output shape.
    rng : numpy.random.Generator, int or None
        Seed or generator; must be ``None`` when ``secure_mode`` is set.
    secure_mode : bool
        Use ``os.urandom`` and the inverse CDF instead of ``rng``.

    Returns
    -------
    numpy.ndarray
    """
    _refuse_seed_in_secure_mode(rng, secure_mode)
    if not secure_mode:
        return check_rng(rng).laplace(0.0, scale, size=size)
    centred = secure_uniform(size) - 0.5
    return -scale * np.sign(centred) * np.log1p(-2.0 * np.abs(centred))
