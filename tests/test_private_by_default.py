"""DP noise and secrets are private by default; a seed makes them reproducible.

Issue of record: a default call of the private median used ``seed=0`` for its
Laplace noise, its ElGamal keys and its encryption randomness, so every
default call released the same noisy counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.errors import ConfigError
from fedleak.sketches import bisect_median, private_median
from fedleak.sketches.median import reference_problem

VALUES = np.array([3, 9, 9, 12, 15, 15, 15, 20, 31, 40])


def _exact_counter(values: np.ndarray):
    def count(a: int, b: int) -> int:
        return int(np.count_nonzero((values >= a) & (values < b)))

    return count


def test_default_private_median_adds_fresh_noise_every_call() -> None:
    parts = [VALUES[:4], VALUES[4:]]
    first = private_median(parts, low=0, high=63, epsilon=0.5)
    second = private_median(parts, low=0, high=63, epsilon=0.5)
    assert first.released != second.released
    assert first.reproducible is False and second.reproducible is False


def test_a_seed_reproduces_the_private_median_and_says_so() -> None:
    parts = [VALUES[:4], VALUES[4:]]
    first = private_median(parts, low=0, high=63, epsilon=0.5, seed=7)
    second = private_median(parts, low=0, high=63, epsilon=0.5, seed=7)
    assert first.released == second.released
    assert first.reproducible is True


def test_secure_mode_refuses_a_seed() -> None:
    with pytest.raises(ConfigError, match="prohibited in secure mode"):
        private_median([VALUES], low=0, high=63, epsilon=1.0, seed=1, secure_mode=True)
    with pytest.raises(ConfigError, match="prohibited in secure mode"):
        bisect_median(
            _exact_counter(VALUES), 10, 1, low=0, high=63, epsilon=1.0, rng=1,
            secure_mode=True,
        )  # fmt: skip


@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("nan"), float("inf")])
def test_bisection_refuses_a_meaningless_epsilon(epsilon: float) -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        bisect_median(_exact_counter(VALUES), 10, 1, low=0, high=63, epsilon=epsilon)


def test_secure_mode_noise_has_the_laplace_scale() -> None:
    # E|Laplace(0, b)| = b and sd(|X|) = b: 400 draws put the mean within
    # 0.05 b (one standard error) of b; the bounds sit 4 standard errors away.
    values = reference_problem(0)
    count = _exact_counter(values)
    exact = bisect_median(count, values.size, 1, low=0, high=1000)
    scale = 10 * 1 / 0.5  # xi * d / epsilon
    first = np.array(
        [
            bisect_median(
                count, values.size, 1, low=0, high=1000, epsilon=0.5,
                secure_mode=True,
            ).released[0]
            for _ in range(400)
        ]
    ) - exact.released[0]  # fmt: skip
    assert 0.8 * scale < np.mean(np.abs(first)) < 1.2 * scale
    assert abs(np.median(first)) < 0.2 * scale
