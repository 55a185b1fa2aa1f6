from __future__ import annotations

import numpy as np
import pytest

from fedleak.data import (
    PROPERTY_NAMES,
    add_property,
    apply_property,
    choose_property_subset,
)
from fedleak.errors import ConfigError


def images(
    n: int = 6, c: int = 1, h: int = 28, w: int = 28, dtype: type = np.float32
) -> np.ndarray:
    return np.random.default_rng(0).random((n, c, h, w)).astype(dtype)


def high_frequency_energy(x: np.ndarray) -> float:
    dh = np.diff(x, axis=2)
    dw = np.diff(x, axis=3)
    return float((dh**2).sum() + (dw**2).sum())


@pytest.mark.parametrize("kind", PROPERTY_NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_new_array_input_untouched_range_kept(kind: str, dtype: type) -> None:
    x = images(dtype=dtype)
    before = x.copy()
    out = apply_property(x, kind)
    assert out is not x
    assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(x, before)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert not np.array_equal(out, x)


@pytest.mark.parametrize("kind", PROPERTY_NAMES)
def test_read_only_input(kind: str) -> None:
    x = images()
    x.flags.writeable = False
    out = apply_property(x, kind)
    assert out.flags.writeable


def test_watermark_changes_only_corner_patch() -> None:
    x = images(h=28, w=20)
    out = apply_property(x, "watermark")
    side = round(0.25 * 20)  # 5
    changed = np.any(out != x, axis=(0, 1))
    assert changed[28 - side :, 20 - side :].sum() > 0
    outside = changed.copy()
    outside[28 - side :, 20 - side :] = False
    assert not outside.any()
    patch = out[:, :, 28 - side :, 20 - side :]
    rows, cols = np.indices((side, side))
    expected = ((rows + cols) % 2 == 0).astype(np.float32)
    np.testing.assert_array_equal(patch, np.broadcast_to(expected, patch.shape))


@pytest.mark.parametrize("background", [0.0, 1.0])
def test_watermark_visible_on_dark_and_bright(background: float) -> None:
    x = np.full((2, 3, 8, 8), background, dtype=np.float32)
    out = apply_property(x, "watermark")
    patch = out[:, :, 6:, 6:]  # side = max(2, round(0.25 * 8)) = 2
    assert (patch == 0.0).any() and (patch == 1.0).any()
    assert np.abs(out - x).sum() == pytest.approx(2 * 3 * 2)  # half of 2x2 flips


def test_watermark_strength_and_patch_fraction() -> None:
    x = np.full((1, 1, 10, 10), 0.5, dtype=np.float64)
    out = apply_property(x, "watermark", strength=0.5, patch_fraction=0.5)
    assert set(np.unique(out[0, 0, 5:, 5:])) == {0.25, 0.75}
    np.testing.assert_array_equal(out[0, 0, :5], x[0, 0, :5])
    tiny = apply_property(x, "watermark", patch_fraction=0.01)
    assert np.count_nonzero(tiny != x) == 4  # side is at least 2
    np.testing.assert_array_equal(apply_property(x, "watermark", strength=0.0), x)


def test_inverted() -> None:
    x = images()
    once = apply_property(x, "inverted")
    np.testing.assert_allclose(once, 1.0 - x, atol=0)
    twice = apply_property(once, "inverted")
    np.testing.assert_allclose(twice, x, atol=1e-7)
    np.testing.assert_array_equal(apply_property(x, "inverted", strength=0.0), x)
    half = apply_property(x, "inverted", strength=0.5)
    np.testing.assert_allclose(half, 0.5, atol=1e-6)


def test_blurred_reduces_high_frequency_energy() -> None:
    x = images()
    mild = apply_property(x, "blurred", strength=0.7)
    strong = apply_property(x, "blurred", strength=2.0)
    e0, e1, e2 = map(high_frequency_energy, (x, mild, strong))
    assert e2 < e1 < 0.5 * e0
    np.testing.assert_allclose(mild.mean(), x.mean(), atol=0.01)  # no darkening
    np.testing.assert_array_equal(apply_property(x, "blurred", strength=0.0), x)


def test_blur_stays_within_each_image_and_channel() -> None:
    x = np.zeros((2, 2, 9, 9), dtype=np.float32)
    x[1, 0] = images(n=1, h=9, w=9)[0, 0]
    out = apply_property(x, "blurred", strength=1.5)
    assert not out[0].any()
    assert not out[1, 1].any()
    assert out[1, 0].any()


def test_bad_arguments() -> None:
    x = images()
    with pytest.raises(ConfigError) as info:
        apply_property(x, "sepia")
    for name in PROPERTY_NAMES:
        assert name in str(info.value)
    with pytest.raises(ConfigError, match="strength"):
        apply_property(x, "inverted", strength=1.5)
    with pytest.raises(ConfigError, match="sigma"):
        apply_property(x, "blurred", strength=-1.0)
    with pytest.raises(ConfigError, match="patch_fraction"):
        apply_property(x, "watermark", patch_fraction=0.0)
    with pytest.raises(ConfigError, match=r"\(n, C, H, W\)"):
        apply_property(x[0], "inverted")
    with pytest.raises(ConfigError, match="floating"):
        apply_property((x * 255).astype(np.uint8), "inverted")
    with pytest.raises(ConfigError):
        add_property(x, 0.5, "sepia", seed=0)


@pytest.mark.parametrize(("n", "fraction"), [(10, 0.3), (7, 0.5), (100, 0.0), (3, 1.0)])
def test_subset_size_exact(n: int, fraction: float) -> None:
    mask = choose_property_subset(n, fraction, seed=0)
    assert mask.dtype == bool and mask.shape == (n,)
    assert int(mask.sum()) == round(fraction * n)


def test_subset_determinism() -> None:
    a = choose_property_subset(1000, 0.1, seed=4)
    np.testing.assert_array_equal(a, choose_property_subset(1000, 0.1, seed=4))
    assert not np.array_equal(a, choose_property_subset(1000, 0.1, seed=5))
    with pytest.raises(ConfigError, match="fraction"):
        choose_property_subset(10, 1.1, seed=0)
    with pytest.raises(ConfigError):
        choose_property_subset(-1, 0.5, seed=0)


@pytest.mark.parametrize("kind", PROPERTY_NAMES)
def test_add_property(kind: str) -> None:
    x = images(n=20)
    before = x.copy()
    x_new, mask = add_property(x, 0.25, kind, seed=3)
    np.testing.assert_array_equal(x, before)
    assert int(mask.sum()) == 5
    np.testing.assert_array_equal(x_new[~mask], x[~mask])
    np.testing.assert_array_equal(x_new[mask], apply_property(x[mask], kind))
    again, mask_again = add_property(x, 0.25, kind, seed=3)
    np.testing.assert_array_equal(mask, mask_again)
    np.testing.assert_array_equal(x_new, again)


def test_add_property_read_only_input_and_zero_fraction() -> None:
    x = images(n=4)
    x.flags.writeable = False
    x_new, mask = add_property(x, 0.0, seed=0)
    assert not mask.any()
    np.testing.assert_array_equal(x_new, x)
    x_new[0] = 0.0  # the copy is writeable
