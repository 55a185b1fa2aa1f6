"""fedleak.defenses.clip_update: Flower's flat clipping, without Flower in the core."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.supercore.differential_privacy import clip_inputs_inplace, get_norm

from fedleak.defenses import clip_update
from fedleak.errors import ConfigError


def _update(seed: int, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "embedding.weight": scale * rng.normal(size=(30, 8)),
        "fc.weight": scale * rng.normal(size=(2, 8)).astype(np.float32),
        "fc.bias": scale * rng.normal(size=(2,)),
    }


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale", [1e-3, 0.05, 1.0, 40.0])
@pytest.mark.parametrize("clip", [0.1, 1.0, 3.0])
def test_clip_update_is_flowers_clip_inputs_inplace(
    seed: int, scale: float, clip: float
) -> None:
    update = _update(seed, scale)
    flower = [np.array(v, dtype=np.float64) for v in update.values()]
    clip_inputs_inplace(flower, clip)
    ours = clip_update(update, clip)
    assert list(ours) == list(update)
    for mine, theirs in zip(ours.values(), flower, strict=True):
        assert mine.dtype == np.float64
        np.testing.assert_array_equal(mine, theirs)  # bit for bit
    assert get_norm(list(ours.values())) <= clip * (1 + 1e-12)
    if get_norm([np.asarray(v, np.float64) for v in update.values()]) <= clip:
        for name, value in update.items():  # inside the ball: unchanged
            np.testing.assert_array_equal(ours[name], value)


def test_clip_update_leaves_its_input_alone_and_guards_zero() -> None:
    update = _update(0, 10.0)
    before = {k: v.copy() for k, v in update.items()}
    clip_update(update, 1.0)
    for name, value in update.items():
        np.testing.assert_array_equal(value, before[name])
    zero = {"w": np.zeros(4), "b": np.zeros(1, np.float32)}
    with pytest.raises(ZeroDivisionError):  # Flower divides by the norm
        clip_inputs_inplace([v.copy() for v in zero.values()], 1.0)
    out = clip_update(zero, 1.0)
    assert all(not v.any() for v in out.values())


@pytest.mark.parametrize("clip", [0.0, -1.0, float("nan"), float("inf")])
def test_clip_update_rejects_a_bad_bound(clip: float) -> None:
    with pytest.raises(ConfigError, match="clipping_norm"):
        clip_update({"w": np.ones(2)}, clip)
