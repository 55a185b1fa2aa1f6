"""Local differential privacy for training data: randomised response and pixelisation.

Seed 004 Ch. 3.2.3 and 4.1 ("Local Differential Privacy"): each record is
perturbed by a local randomiser before it leaves its owner; a record with many
features composes one randomiser per feature, so the per-record epsilon is the
sum of the per-feature epsilons (Definition 7, an epsilon-local algorithm).

Randomised response (Warner; seed 004 Ch. 3.2.3)
    With probability ``p`` report the true bit, otherwise report a fair coin.
    A bit is reported truthfully with probability ``(1 + p) / 2`` and flipped
    with probability ``(1 - p) / 2``, so the mechanism is epsilon-LDP with

    ``epsilon = ln((1 + p) / (1 - p))``  and, inversely,
    ``p = (e^epsilon - 1) / (e^epsilon + 1) = tanh(epsilon / 2)``.

    The seed's two fair coins (``p = 1/2``) give ``epsilon = ln 3``.
    :func:`randomized_response_probability` maps epsilon to ``p`` and
    :func:`randomized_response_epsilon` maps ``p`` back;
    :func:`estimate_true_frequency` debiases an observed frequency of ones
    (seed 004: ``p_yes = 2 y - 1/2`` for ``p = 1/2``).
Laplace pixelisation (Fan, "Image pixelization with differential privacy";
seed 004 Ch. 4.1)
    The image is cut into ``b x b`` cells, each cell is replaced by its mean,
    and Laplace noise of scale ``m * R / (b^2 epsilon)`` is added to each cell
    mean, where ``R`` is the pixel range and ``m`` the number of pixels in
    which two neighbouring images may differ. ``b = 1`` adds Laplace noise to
    every pixel.

Both are hand-written: they are a few lines of numpy, and neither opacus nor
dp-accounting offers local randomisers for training data.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DataError
from ..validation import check_epsilon, check_int, check_positive, check_probability

__all__ = [
    "estimate_true_frequency",
    "laplace_pixelization",
    "pixelization_scale",
    "randomized_response",
    "randomized_response_epsilon",
    "randomized_response_probability",
    "randomized_response_record_epsilon",
]


def randomized_response_probability(epsilon: float) -> float:
    """Return the truthful-answer probability ``p`` of epsilon-LDP randomised response.

    The first coin keeps the true bit with probability ``p``; otherwise a fair
    coin is reported. ``p = (e^epsilon - 1) / (e^epsilon + 1) = tanh(epsilon/2)``
    makes the likelihood ratio ``((1 + p)/2) / ((1 - p)/2)`` equal ``e^epsilon``
    (seed 004 Ch. 3.2.3; ``epsilon = ln 3`` gives the seed's ``p = 1/2``).

    Parameters
    ----------
    epsilon : float
        Privacy parameter per reported bit, ``> 0``.

    Returns
    -------
    float
        ``p`` in ``(0, 1)``.
    """
    return math.tanh(check_epsilon("epsilon", epsilon) / 2.0)


def randomized_response_epsilon(p: float) -> float:
    """Return the epsilon of randomised response with truthful probability ``p``.

    Inverse of :func:`randomized_response_probability`:
    ``epsilon = ln((1 + p) / (1 - p))``. ``p = 1`` (no randomisation) is
    infinitely private-less and rejected.
    """
    prob = check_probability("p", p, closed="neither")
    return math.log((1.0 + prob) / (1.0 - prob))


def randomized_response_record_epsilon(epsilon: float, num_features: int) -> float:
    """Return the per-record epsilon of randomising ``num_features`` bits.

    Sequential composition of local randomisers (seed 004 Definition 7): the
    record-level guarantee is the sum ``num_features * epsilon`` (Table 4.2:
    600 bits at ``epsilon_i = 8`` give 4,800).
    """
    features = check_int("num_features", num_features, low=1)
    return check_epsilon("epsilon", epsilon) * features


def randomized_response(
    bits: np.ndarray, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """Randomise every bit of ``bits`` with epsilon-LDP randomised response.

    Each entry is kept with probability ``p`` (:func:`randomized_response_probability`)
    and otherwise replaced by a fair coin, independently.

    Parameters
    ----------
    bits : numpy.ndarray
        Array of 0/1 values (bool or integer or float), any shape.
    epsilon : float
        Privacy parameter per bit.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        Randomised bits, same shape and dtype as ``bits``.
    """
    arr = np.asarray(bits)
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise DataError(
            "randomized_response expects binary features (0/1 values); binarise "
            "the data first or use laplace_pixelization for images"
        )
    p = randomized_response_probability(epsilon)
    keep = rng.random(arr.shape) < p
    coin = rng.random(arr.shape) < 0.5
    out = np.where(keep, arr.astype(bool), coin)
    return out.astype(arr.dtype)


def estimate_true_frequency(
    observed_frequency: float | np.ndarray, epsilon: float
) -> np.ndarray:
    """Debias the observed frequency of ones after randomised response.

    ``E[y] = p * f + (1 - p) / 2`` for a true frequency ``f``, hence
    ``f = (y - (1 - p) / 2) / p`` (seed 004 Ch. 3.2.3 gives ``2 y - 1/2`` for
    ``p = 1/2``). The estimate is unbiased and may fall outside ``[0, 1]``.
    """
    p = randomized_response_probability(epsilon)
    y = np.asarray(observed_frequency, dtype=np.float64)
    return (y - (1.0 - p) / 2.0) / p


def pixelization_scale(
    epsilon: float,
    *,
    cell_size: int = 1,
    neighborhood: int = 1,
    value_range: float = 1.0,
) -> float:
    """Return the Laplace scale ``m * R / (b^2 epsilon)`` of Fan's pixelisation.

    Parameters
    ----------
    epsilon : float
        Privacy parameter per image.
    cell_size : int, default=1
        ``b``, the side of a pixelisation cell.
    neighborhood : int, default=1
        ``m``, the number of pixels two neighbouring images may differ in.
    value_range : float, default=1.0
        ``R``, the range of a pixel value (1 for images in ``[0, 1]``, 255 for
        bytes).
    """
    b = check_int("cell_size", cell_size, low=1)
    m = check_int("neighborhood", neighborhood, low=1)
    r = check_positive("value_range", value_range)
    return m * r / (b**2 * check_epsilon("epsilon", epsilon))


def laplace_pixelization(
    images: np.ndarray,
    epsilon: float,
    rng: np.random.Generator,
    *,
    cell_size: int = 1,
    neighborhood: int = 1,
    value_range: float = 1.0,
    clip: bool = True,
) -> np.ndarray:
    """Return epsilon-LDP pixelised copies of ``images`` (Fan; seed 004 Ch. 4.1).

    Each image is cut into ``cell_size x cell_size`` cells (the last row and
    column of cells may be smaller), every pixel of a cell is set to the cell
    mean plus one Laplace draw of scale :func:`pixelization_scale`, and the
    result is clipped to ``[0, value_range]`` (post-processing, so still
    epsilon-LDP).

    Parameters
    ----------
    images : numpy.ndarray
        Images of shape ``(n, H, W)`` or ``(n, C, H, W)``.
    epsilon : float
        Privacy parameter per image.
    rng : numpy.random.Generator
        Source of the Laplace noise.
    cell_size, neighborhood, value_range : int, int, float
        ``b``, ``m`` and ``R`` of :func:`pixelization_scale`.
    clip : bool, default=True
        Clip the output to ``[0, value_range]``.

    Returns
    -------
    numpy.ndarray
        Float array of the same shape as ``images``.
    """
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim not in (3, 4):
        raise DataError(
            f"images must have shape (n, H, W) or (n, C, H, W), got {arr.shape}"
        )
    scale = pixelization_scale(
        epsilon, cell_size=cell_size, neighborhood=neighborhood, value_range=value_range
    )
    height, width = arr.shape[-2:]
    out = np.empty_like(arr)
    for top in range(0, height, cell_size):
        for left in range(0, width, cell_size):
            cell = arr[..., top : top + cell_size, left : left + cell_size]
            mean = cell.mean(axis=(-2, -1), keepdims=True)
            noisy = mean + rng.laplace(0.0, scale, size=mean.shape)
            out[..., top : top + cell_size, left : left + cell_size] = noisy
    if clip:
        np.clip(out, 0.0, value_range, out=out)
    return out
