"""Synthetic shopping carts: seed 004's "Skewed Purchases" data (Ch. 4.3.2).

Binary features (products bought or not) whose class structure is a set of
indicator products per class; the test distribution is skewed by a higher
background purchase rate. The features are binary, so randomised response
applies directly (the LDP setting of seed 004 Ch. 4.3.3).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

__all__ = ["skewed_purchases"]


def skewed_purchases(
    n: int,
    *,
    num_classes: int = 10,
    num_features: int = 600,
    indicator_fraction: float = 0.1,
    p_indicator: float = 0.8,
    p_noise: float = 0.2,
    structure_seed: int = 0,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw synthetic shopping carts (seed 004 Ch. 4.3.2, "Skewed Purchases").

    Each class has its own ``indicator_fraction`` of the ``num_features``
    positions (products bought together), fixed by ``structure_seed``; a
    record of class ``c`` has each indicator bit set with probability
    ``p_indicator`` and every other ("noise") bit with ``p_noise``. The seed
    uses ``0.8 / 0.2`` for training data and ``0.8 / 0.5`` for test data
    (the skew); pass ``p_noise=0.5`` for the latter.

    Returns
    -------
    x : numpy.ndarray
        Float32 0/1 features ``(n, num_features)``.
    y : numpy.ndarray
        Int64 labels ``(n,)``, uniform over classes.

    Raises
    ------
    ConfigError
        If a size or the indicator fraction is out of range.
    """
    if n < 0 or num_classes < 2 or num_features < 1 or not 0 < indicator_fraction <= 1:
        raise ConfigError(
            f"need n >= 0, num_classes >= 2, num_features >= 1, 0 < indicator_fraction "
            f"<= 1; got {n}, {num_classes}, {num_features}, {indicator_fraction}"
        )
    structure = np.random.default_rng(structure_seed)
    k = max(1, round(indicator_fraction * num_features))
    indicators = np.zeros((num_classes, num_features), dtype=bool)
    for c in range(num_classes):
        indicators[c, structure.choice(num_features, k, replace=False)] = True
    y = rng.integers(0, num_classes, n)
    p = np.where(indicators[y], p_indicator, p_noise)
    return (rng.random(p.shape) < p).astype(np.float32), y.astype(np.int64)
