"""Local DP randomisers: randomised response and Laplace pixelisation (seed 004 Ch. 4.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError, DataError
from fedleak.privacy.ldp import (
    estimate_true_frequency,
    laplace_pixelization,
    pixelization_scale,
    randomized_response,
    randomized_response_epsilon,
    randomized_response_probability,
    randomized_response_record_epsilon,
)


def test_two_fair_coins_give_ln3() -> None:
    assert randomized_response_probability(math.log(3)) == pytest.approx(0.5)
    assert randomized_response_epsilon(0.5) == pytest.approx(math.log(3))


@given(st.floats(min_value=1e-3, max_value=20.0))
@settings(max_examples=50, deadline=None)
def test_probability_and_epsilon_are_inverse(eps: float) -> None:
    p = randomized_response_probability(eps)
    assert 0.0 < p < 1.0
    # likelihood ratio of reporting the true bit is e^eps
    assert ((1 + p) / 2) / ((1 - p) / 2) == pytest.approx(math.exp(eps), rel=1e-6)
    if p < 1 - 1e-9:
        assert randomized_response_epsilon(p) == pytest.approx(eps, rel=1e-5)


def test_empirical_flip_rate_matches_epsilon() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, size=200_000)
    out = randomized_response(bits, 1.0, rng)
    p = randomized_response_probability(1.0)
    flip_rate = float(np.mean(out != bits))
    assert flip_rate == pytest.approx((1 - p) / 2, abs=0.005)
    assert out.dtype == bits.dtype and out.shape == bits.shape


def test_frequency_estimate_is_unbiased() -> None:
    rng = np.random.default_rng(1)
    bits = (rng.random(300_000) < 0.3).astype(np.int8)
    out = randomized_response(bits, 0.5, rng)
    assert float(estimate_true_frequency(out.mean(), 0.5)) == pytest.approx(
        0.3, abs=0.01
    )


def test_randomized_response_is_seeded_and_rejects_non_binary() -> None:
    bits = np.array([[0, 1, 1], [1, 0, 0]], dtype=bool)
    a = randomized_response(bits, 0.3, np.random.default_rng(5))
    b = randomized_response(bits, 0.3, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(DataError):
        randomized_response(np.array([0, 2]), 1.0, np.random.default_rng(0))
    with pytest.raises(ConfigError):
        randomized_response(bits, 0.0, np.random.default_rng(0))


def test_record_epsilon_composes() -> None:
    assert randomized_response_record_epsilon(8.0, 600) == pytest.approx(4800.0)


def test_pixelization_scale_and_cells() -> None:
    assert pixelization_scale(
        2.0, cell_size=2, neighborhood=4, value_range=255
    ) == pytest.approx(4 * 255 / (4 * 2.0))
    images = np.random.default_rng(0).random((3, 1, 8, 8))
    out = laplace_pixelization(images, 1e6, np.random.default_rng(0), cell_size=4)
    # with negligible noise each 4x4 cell holds its mean
    expected = images[..., :4, :4].mean(axis=(-2, -1))
    np.testing.assert_allclose(out[..., 0, 0], expected, atol=1e-4)
    assert np.ptp(out[..., :4, :4], axis=(-2, -1)).max() == 0.0
    assert out.min() >= 0.0 and out.max() <= 1.0


def test_pixelization_noise_grows_as_epsilon_falls() -> None:
    images = np.full((200, 8, 8), 0.5)
    errors = [
        float(
            np.abs(
                laplace_pixelization(images, eps, np.random.default_rng(0), clip=False)
                - 0.5
            ).mean()
        )
        for eps in (10.0, 1.0, 0.1)
    ]
    assert errors[0] < errors[1] < errors[2]
    assert errors[1] == pytest.approx(1.0, rel=0.1)  # mean |Laplace(1)| = 1
    with pytest.raises(DataError):
        laplace_pixelization(np.zeros((4, 4)), 1.0, np.random.default_rng(0))
