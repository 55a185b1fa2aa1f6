"""The servers' update rules (seed 000 Alg. 1 line 6, Alg. 2 line 8) on plain arrays."""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.errors import ConfigError
from fedleak.federated import average_models, sgd_step


def test_sgd_step_matches_a_hand_computation() -> None:
    theta = {
        "w": np.array([1.0, -2.0, 0.5], dtype=np.float32),
        "b": np.array([3.0], dtype=np.float32),
    }
    g1 = {"w": np.array([1.0, 2.0, 4.0]), "b": np.array([2.0])}
    g2 = {"w": np.array([3.0, -2.0, 0.0])}  # no "b": counts as zero
    new = sgd_step(theta, [g1, g2], 0.25)
    # w: theta - 0.25 * (g1 + g2) = [1 - 1, -2 - 0, 0.5 - 1]
    np.testing.assert_array_equal(new["w"], np.array([0.0, -2.0, -0.5], np.float32))
    np.testing.assert_array_equal(new["b"], np.array([2.5], np.float32))
    assert new["w"].dtype == np.float32 and list(new) == ["w", "b"]
    mean = sgd_step(theta, [g1, g2], 0.25, reduction="mean")  # lr / K, K = 2
    np.testing.assert_array_equal(mean["w"], np.array([0.5, -2.0, 0.0], np.float32))
    np.testing.assert_array_equal(mean["b"], np.array([2.75], np.float32))


def test_sgd_step_accumulates_in_float64_and_casts_back() -> None:
    # 1 + 1e-8 is 1 in float32: a float32 sum would lose the two small
    # gradients, the float64 sum keeps them until the final cast.
    theta = {"w": np.array([1.0], dtype=np.float32)}
    grads = [{"w": np.array([-(2**-25)], np.float32)} for _ in range(4)]
    new = sgd_step(theta, grads, 1.0)
    assert new["w"][0] == np.float32(1.0 + 4 * 2**-25)
    rng = np.random.default_rng(0)
    theta = {"w": rng.normal(size=(5, 7)).astype(np.float32)}
    grads = [{"w": rng.normal(size=(5, 7)).astype(np.float32)} for _ in range(3)]
    expected = (
        theta["w"].astype(np.float64)
        - 0.3 * sum(g["w"].astype(np.float64) for g in grads)
    ).astype(np.float32)
    np.testing.assert_array_equal(sgd_step(theta, grads, 0.3)["w"], expected)


def test_arrays_without_gradient_are_returned_unchanged() -> None:
    theta = {"w": np.ones(2, np.float32), "frozen": np.arange(3)}
    new = sgd_step(theta, [{"w": np.ones(2)}], 0.5)
    assert new["frozen"] is theta["frozen"]
    np.testing.assert_array_equal(new["w"], [0.5, 0.5])


def test_noise_weight_decay_and_momentum_in_the_documented_order() -> None:
    theta = {"w": np.array([2.0, -1.0], dtype=np.float32)}
    grads = [{"w": np.array([0.5, 0.5])}, {"w": np.array([0.5, 1.5])}]
    buffer = {"w": np.array([1.0, -1.0])}
    new = sgd_step(
        theta,
        grads,
        0.1,
        noise_std=0.5,
        noise_rng=np.random.default_rng(7),
        weight_decay=0.01,
        momentum=0.9,
        momentum_buffer=buffer,
    )
    noise = np.random.default_rng(7).normal(0.0, 0.5, 2)
    step = np.array([1.0, 2.0]) + noise + 0.01 * np.array([2.0, -1.0])
    momentum = 0.9 * np.array([1.0, -1.0]) + step
    np.testing.assert_array_equal(buffer["w"], momentum)
    expected = (np.array([2.0, -1.0]) - 0.1 * momentum).astype(np.float32)
    np.testing.assert_array_equal(new["w"], expected)


def test_zero_noise_still_draws_from_the_generator() -> None:
    theta = {"w": np.zeros(3, np.float32)}
    rng = np.random.default_rng(1)
    new = sgd_step(theta, [{"w": np.ones(3)}], 1.0, noise_std=0.0, noise_rng=rng)
    np.testing.assert_array_equal(new["w"], [-1.0, -1.0, -1.0])
    fresh = np.random.default_rng(1)
    fresh.normal(0.0, 0.0, 3)
    assert rng.random() == fresh.random()


def test_sgd_step_rejects_what_it_cannot_do() -> None:
    theta = {"w": np.zeros(2, np.float32)}
    with pytest.raises(ConfigError, match="lacks"):
        sgd_step(theta, [{"v": np.ones(2)}], 0.1)
    with pytest.raises(ConfigError, match="noise_rng"):
        sgd_step(theta, [{"w": np.ones(2)}], 0.1, noise_std=1.0)
    with pytest.raises(ConfigError, match="momentum buffer"):
        sgd_step(theta, [{"w": np.ones(2)}], 0.1, momentum=0.9)
    with pytest.raises(ConfigError, match="learning_rate"):
        sgd_step(theta, [{"w": np.ones(2)}], float("nan"))
    with pytest.raises(ConfigError, match="reduction"):
        sgd_step(theta, [{"w": np.ones(2)}], 0.1, reduction="max")  # type: ignore[arg-type]


def test_average_models_is_the_nk_weighted_mean() -> None:
    reference = {
        "w": np.zeros(2, dtype=np.float32),
        "count": np.zeros(1, dtype=np.int64),
    }
    models = [
        ({"w": np.array([1.0, 4.0]), "count": np.array([1])}, 3.0),
        ({"w": np.array([5.0, 0.0]), "count": np.array([4])}, 1.0),
    ]
    new = average_models(reference, models)
    # (3 * [1, 4] + 1 * [5, 0]) / 4 = [2, 3]; (3 * 1 + 4) / 4 = 1.75 -> 2
    np.testing.assert_array_equal(new["w"], np.array([2.0, 3.0], np.float32))
    np.testing.assert_array_equal(new["count"], [2])
    assert new["w"].dtype == np.float32 and new["count"].dtype == np.int64
    with pytest.raises(ConfigError, match="at least one"):
        average_models(reference, [])
