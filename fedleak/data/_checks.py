"""Argument checks shared by the modules of :mod:`fedleak.data`."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError


def check_int(value: object, name: str, minimum: int) -> int:
    """Return ``value`` as an int, or raise ConfigError if not an int >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def check_fraction(value: float, name: str) -> float:
    """Return ``value`` as a float, or raise ConfigError if not in [0, 1]."""
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ConfigError(f"{name} must lie in [0, 1], got {value}.")
    return float(value)
