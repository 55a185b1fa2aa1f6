"""Shamir secret sharing over the prime field ``GF(2**32 - 5)``, vectorised.

A secret is a vector of :data:`SECRET_WORDS` field elements (about 256
bits). :func:`split` gives every holder ``k`` the values at ``x_k`` of
independent random polynomials of degree ``t - 1`` whose constant terms are
the secret's words (Shamir 1979); any ``t`` shares determine the secret by
Lagrange interpolation at 0 (:func:`combine`), fewer reveal nothing about it.

Why not pycryptodome's ``Crypto.Protocol.SecretSharing.Shamir`` (what Flower's
SecAgg+ uses)? It computes in ``GF(2**128)`` in pure Python, one 16-byte
secret at a time. Measured on the development machine: splitting one 16-byte
secret for 99 holders with ``t = 50`` took 85 ms and combining it 85 ms;
a double-masked round at N = 100 needs one split per client and one combine
per online client, i.e. 8.5 s of server time per round. Here the field is
small enough for exact ``uint64`` arithmetic in numpy (products of two
elements stay below ``2**64``), so all holders' shares of one secret, and
all secrets of a round that share the same holders, are computed with a few
array operations: about 0.1-0.3 ms per split and well under a millisecond
per round of combines at that size (:mod:`fedleak.secagg.costs` measures
both side by side). Field arithmetic is this module's only hand-written
cryptography; its tests check it against an independent reference (SymPy's
modular matrix inverse) and the "any ``t`` shares reconstruct, ``t - 1`` do
not determine" property.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ConfigError, ProtocolError

__all__ = [
    "PRIME",
    "SECRET_WORDS",
    "combine",
    "combine_many",
    "lagrange_at_zero",
    "random_elements",
    "split",
]

#: The field's modulus, the largest prime below ``2**32``.
PRIME = 4294967291
#: Words of a secret: 8 elements of ``GF(PRIME)``, about 256 bits.
SECRET_WORDS = 8

_P = np.uint64(PRIME)
_U32_LIMIT = 1 << 32


def random_elements(
    shape: int | tuple[int, ...], rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw uniform field elements.

    Parameters
    ----------
    shape : int or tuple of int
        Shape of the result.
    rng : numpy.random.Generator, optional
        A seeded source for reproducible tests and simulations (then the
        elements are predictable). Without it they come from the operating
        system's CSPRNG, by rejection sampling of 32-bit words.

    Returns
    -------
    numpy.ndarray
        ``uint64`` elements in ``[0, PRIME)``.
    """
    if rng is not None:
        return rng.integers(0, PRIME, size=shape, dtype=np.uint64)
    count = int(np.prod(shape, dtype=np.int64))
    out = np.frombuffer(os.urandom(4 * count), dtype="<u4").astype(np.uint64)
    bad = out >= _P
    while np.any(bad):  # probability 5 / 2**32 per word
        n_bad = int(np.count_nonzero(bad))
        out[bad] = np.frombuffer(os.urandom(4 * n_bad), dtype="<u4")
        bad = out >= _P
    return out.reshape(shape)


def _check_elements(values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise ConfigError(f"{name} must hold integers, got {arr.dtype}.")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= PRIME):
        raise ConfigError(f"{name} must lie in [0, {PRIME}).")
    return arr.astype(np.uint64)


def _check_points(points: np.ndarray | list[int]) -> np.ndarray:
    xs = _check_elements(np.asarray(points), "points")
    if xs.ndim != 1:
        raise ConfigError("points must be one-dimensional.")
    if np.any(xs == 0):
        raise ConfigError("share points must be non-zero (0 holds the secret).")
    if np.unique(xs).size != xs.size:
        raise ConfigError("share points must be distinct.")
    return xs


def split(
    secret: np.ndarray,
    *,
    threshold: int,
    points: np.ndarray | list[int],
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Share a secret so that any ``threshold`` holders can rebuild it.

    Parameters
    ----------
    secret : numpy.ndarray
        Field elements, shape ``(m,)``.
    threshold : int
        ``t``: shares needed, ``1 <= t <= len(points)``.
    points : array-like of int
        The holders' distinct non-zero evaluation points.
    rng : numpy.random.Generator, optional
        Source of the polynomials' coefficients (tests only); default the OS
        CSPRNG.

    Returns
    -------
    numpy.ndarray
        ``uint64`` shares, shape ``(len(points), m)``: row ``k`` holds
        ``f_l(points[k])`` for every word ``l``, with ``f_l(0) =
        secret[l]`` and ``t - 1`` uniform random higher coefficients.

    Raises
    ------
    ConfigError
        If the threshold, points or secret are invalid.
    """
    s = _check_elements(secret, "secret")
    if s.ndim != 1:
        raise ConfigError("secret must be one-dimensional.")
    xs = _check_points(points)
    if isinstance(threshold, bool) or not isinstance(threshold, int | np.integer):
        raise ConfigError(f"threshold must be an integer, got {threshold!r}.")
    if not 1 <= threshold <= xs.size:
        raise ConfigError(
            f"threshold must lie in [1, {xs.size}] for {xs.size} holders, "
            f"got {threshold}."
        )
    coefficients = random_elements((int(threshold) - 1, s.size), rng)
    x = xs[:, None]
    # Horner: f(x) = (...((c_{t-1} x + c_{t-2}) x + ...) x + secret). Every
    # product of two elements is below PRIME**2 + PRIME < 2**64.
    acc = np.zeros((xs.size, s.size), dtype=np.uint64)
    for c in coefficients[::-1]:  # in place: no temporaries per step
        np.add(acc, c, out=acc)
        np.remainder(acc, _P, out=acc)
        np.multiply(acc, x, out=acc)
        np.remainder(acc, _P, out=acc)
    np.add(acc, s, out=acc)
    np.remainder(acc, _P, out=acc)
    return acc


def lagrange_at_zero(points: np.ndarray | list[int]) -> np.ndarray:
    """Return the Lagrange coefficients that interpolate at 0.

    For distinct non-zero points ``x_1..x_t``, ``lambda_k = prod_{j != k}
    x_j / (x_j - x_k) mod PRIME``, so that ``f(0) = sum_k lambda_k f(x_k)``
    for every polynomial of degree below ``t``.

    Parameters
    ----------
    points : array-like of int
        Distinct non-zero field elements.

    Returns
    -------
    numpy.ndarray
        ``uint64`` coefficients, one per point.
    """
    xs = _check_points(points)
    t = xs.size
    numerator = np.ones(t, dtype=np.uint64)
    denominator = np.ones(t, dtype=np.uint64)
    for j in range(t):
        xj = xs[j]
        factor = np.where(np.arange(t) == j, np.uint64(1), xj)
        numerator = (numerator * factor) % _P
        diff = (xj + _P - xs) % _P
        diff[j] = 1
        denominator = (denominator * diff) % _P
    inverse = np.array([pow(int(d), PRIME - 2, PRIME) for d in denominator], np.uint64)
    return (numerator * inverse) % _P


def combine_many(coefficients: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Rebuild several secrets, each from its own shares and coefficients.

    Parameters
    ----------
    coefficients : numpy.ndarray
        ``uint64``, shape ``(s, t)``: the Lagrange coefficients of the points
        each secret's shares come from (:func:`lagrange_at_zero`).
    shares : numpy.ndarray
        ``uint64``, shape ``(s, t, m)``.

    Returns
    -------
    numpy.ndarray
        ``uint64`` secrets, shape ``(s, m)``.

    Raises
    ------
    ProtocolError
        If the shapes disagree or a share is not a field element.
    """
    c = np.asarray(coefficients, dtype=np.uint64)
    y = np.asarray(shares)
    if c.ndim != 2 or y.ndim != 3 or y.shape[:2] != c.shape:
        raise ProtocolError(
            f"shares of shape {y.shape} do not fit coefficients of shape {c.shape}."
        )
    if y.size and int(y.max()) >= PRIME:
        raise ProtocolError("a share is not an element of the field.")
    y = y.astype(np.uint64, copy=False)
    acc = np.zeros((y.shape[0], y.shape[2]), dtype=np.uint64)
    for k in range(c.shape[1]):
        acc = (acc + (c[:, k, None] * y[:, k, :]) % _P) % _P
    return acc


def combine(points: np.ndarray | list[int], shares: np.ndarray) -> np.ndarray:
    """Rebuild one secret from ``t`` shares.

    Parameters
    ----------
    points : array-like of int
        The holders' points, shape ``(t,)``.
    shares : numpy.ndarray
        Their shares, shape ``(t, m)``.

    Returns
    -------
    numpy.ndarray
        The secret's ``m`` words if the shares come from a polynomial of
        degree below ``t``; otherwise unrelated field elements (fewer than
        the threshold determine nothing).
    """
    lam = lagrange_at_zero(points)
    y = np.asarray(shares)
    if y.ndim != 2 or y.shape[0] != lam.size:
        raise ProtocolError(
            f"{lam.size} points need shares of shape ({lam.size}, m), got {y.shape}."
        )
    out: np.ndarray = combine_many(lam[None, :], y[None, :, :])[0]
    return out
