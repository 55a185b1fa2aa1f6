"""The property classifier's features in the in-process simulation (Ch. 7.1.4)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fedleak.attacks.property.simulation import property_features, simulate_property

from fedleak.defenses import EMBEDDING_KEY
from fedleak.errors import ConfigError


def _updates() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    a = {EMBEDDING_KEY: rng.normal(size=(6, 4)), "fc.weight": rng.normal(size=(2, 3))}
    louder = np.ones((6, 1))
    louder[1] = 5.0  # word 1 moved five times as far
    b = {EMBEDDING_KEY: a[EMBEDDING_KEY] * louder, "fc.weight": a["fc.weight"]}
    return a, b


def test_bag_of_words_is_blind_to_magnitudes_the_embedding_features_are_not():
    """Every row moved in both updates (as under DP noise): the bags are equal."""
    a, b = _updates()
    np.testing.assert_array_equal(
        property_features(a, "bow"), property_features(b, "bow")
    )
    np.testing.assert_array_equal(property_features(a, "bow"), np.ones(6))
    assert not np.array_equal(
        property_features(a, "embedding"), property_features(b, "embedding")
    )
    np.testing.assert_allclose(
        property_features(a, "embedding"), np.abs(a[EMBEDDING_KEY]).max(axis=1)
    )


def test_max_features_pool_every_layer():
    a, _ = _updates()
    pooled = property_features(a, "max")
    assert pooled.shape == (6 + 2,)  # one per word row, one per output unit
    np.testing.assert_allclose(pooled[6:], a["fc.weight"].max(axis=1))


def test_unknown_features_are_refused():
    nothing: Any = None
    with pytest.raises(ConfigError, match="features"):
        simulate_property(
            nothing, np.zeros(0, bool), nothing, rounds=1, seed=0, features="words"
        )
