"""Image properties that are independent of the class label.

Property inference attacks ask whether a client's data has some property that
the learning task does not care about. The seed thesis (Ch. 7.2.1) uses LFW's
face attributes; for MNIST-like data fedleak adds synthetic stand-ins
(:data:`PROPERTY_NAMES`) to a chosen subset of images:

``watermark``
    a checkerboard square in the bottom-right corner, visible on dark and
    bright images alike;
``inverted``
    the photographic negative ``1 - x``;
``blurred``
    a Gaussian blur over the image plane.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import ndimage

from ..errors import ConfigError
from ..validation import check_int, check_option, check_positive, check_probability

__all__ = [
    "PROPERTY_NAMES",
    "add_property",
    "apply_property",
    "choose_property_subset",
]

PROPERTY_NAMES: tuple[str, ...] = ("watermark", "inverted", "blurred")
"""The property kinds :func:`apply_property` knows."""


def _check_images(x: np.ndarray) -> None:
    if x.ndim != 4:
        raise ConfigError(f"images must have shape (n, C, H, W), got shape {x.shape}.")
    if x.dtype.kind != "f":
        raise ConfigError(
            f"images must be floating point with values in [0, 1], got dtype "
            f"{x.dtype}; convert them first (e.g. x.astype(np.float32) / 255)."
        )


def _watermark_side(height: int, width: int, patch_fraction: float) -> int:
    """Return the side of the watermark square, in pixels."""
    side = max(2, round(patch_fraction * min(height, width)))
    return min(side, height, width)


def _to_unit_range(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Return ``values`` clipped to [0, 1], as ``dtype``."""
    clipped: np.ndarray = np.clip(values, 0.0, 1.0)
    return clipped.astype(dtype, copy=False)


def apply_property(
    x: np.ndarray,
    kind: str,
    *,
    strength: float = 1.0,
    patch_fraction: float = 0.25,
) -> np.ndarray:
    """Give every image of ``x`` a label-independent property.

    Parameters
    ----------
    x : numpy.ndarray
        Images of shape ``(n, C, H, W)``, floating point with values in
        ``[0, 1]``. Never modified.
    kind : str
        One of :data:`PROPERTY_NAMES`.
    strength : float, optional
        For ``watermark`` and ``inverted``: the blend weight in ``[0, 1]`` of
        the altered image (1.0, the default, replaces it fully). For
        ``blurred``: the Gaussian sigma in pixels, >= 0.
    patch_fraction : float, optional
        For ``watermark``: the side of the square patch as a fraction of
        ``min(H, W)``, in ``(0, 1]``; the side is
        ``max(2, round(patch_fraction * min(H, W)))`` pixels (default 0.25).

    Returns
    -------
    numpy.ndarray
        A new array of the same shape and dtype with values in ``[0, 1]``.

    Raises
    ------
    ConfigError
        If ``kind`` is unknown, ``x`` is not a float array of rank 4, or
        ``strength`` or ``patch_fraction`` is out of range.
    """
    check_option("kind", kind, PROPERTY_NAMES)
    x = np.asarray(x)
    _check_images(x)
    if kind == "blurred":
        check_positive("strength (the blur's sigma)", strength, allow_zero=True)
        out = ndimage.gaussian_filter(x, sigma=(0.0, 0.0, strength, strength))
        return _to_unit_range(out, x.dtype)
    s = check_probability("strength (a blend weight)", strength)
    if kind == "inverted":
        return _to_unit_range((1.0 - s) * x + s * (1.0 - x), x.dtype)
    check_probability("patch_fraction", patch_fraction, closed="right")
    height, width = x.shape[2], x.shape[3]
    side = _watermark_side(height, width, patch_fraction)
    rows, cols = np.indices((side, side))
    pattern = ((rows + cols) % 2 == 0).astype(x.dtype)
    out = x.copy()
    corner = (
        slice(None),
        slice(None),
        slice(height - side, None),
        slice(width - side, None),
    )
    out[corner] = (1.0 - s) * out[corner] + s * pattern
    return _to_unit_range(out, x.dtype)


def choose_property_subset(
    num_records: int, fraction: float, seed: int | np.random.Generator
) -> np.ndarray:
    """Choose a random subset of records to carry a property.

    Parameters
    ----------
    num_records : int
        Number of records.
    fraction : float
        Fraction of records to choose, in ``[0, 1]``.
    seed : int or numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        Boolean mask of shape ``(num_records,)`` with exactly
        ``round(fraction * num_records)`` True entries.

    Raises
    ------
    ConfigError
        If ``num_records < 0`` or ``fraction`` is outside ``[0, 1]``.
    """
    n = check_int("num_records", num_records, low=0)
    f = check_probability("fraction", fraction)
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=bool)
    mask[rng.permutation(n)[: round(f * n)]] = True
    return mask


def add_property(
    x: np.ndarray,
    fraction: float,
    kind: str = "watermark",
    *,
    seed: int | np.random.Generator,
    strength: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Give a random subset of images a property.

    Parameters
    ----------
    x : numpy.ndarray
        Images of shape ``(n, C, H, W)``, floating point in ``[0, 1]``. Never
        modified.
    fraction : float
        Fraction of images to alter, in ``[0, 1]``.
    kind : str, optional
        One of :data:`PROPERTY_NAMES` (default ``"watermark"``).
    seed : int or numpy.random.Generator
        Source of randomness for the choice of images.
    strength : float, optional
        Passed to :func:`apply_property`.

    Returns
    -------
    x_new : numpy.ndarray
        A copy of ``x`` in which the chosen images have the property.
    has_property : numpy.ndarray
        Boolean mask of shape ``(n,)``: which images were altered.

    Raises
    ------
    ConfigError
        If an argument is invalid (see :func:`apply_property` and
        :func:`choose_property_subset`).
    """
    check_option("kind", kind, PROPERTY_NAMES)
    x = np.asarray(x)
    _check_images(x)
    mask = choose_property_subset(x.shape[0], fraction, seed)
    x_new = x.copy()
    x_new[mask] = apply_property(x[mask], kind, strength=strength)
    return x_new, mask
