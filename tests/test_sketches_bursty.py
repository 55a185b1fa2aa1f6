"""synthetic_mobility's bursty stand-in (Fig. 4.8 investigation)."""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.errors import ConfigError
from fedleak.sketches.heatmaps import heat_maps, synthetic_mobility


def test_zero_burstiness_keeps_the_smooth_draws_exactly():
    plain = synthetic_mobility(30, 48, grid=20, seed=3)
    zero = synthetic_mobility(30, 48, grid=20, seed=3, burstiness=0.0)
    for name in ("user", "slot", "cell"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(zero, name))


def _hour_to_hour_change(burstiness: float) -> float:
    maps = heat_maps(
        synthetic_mobility(200, 24 * 7, grid=20, seed=0, burstiness=burstiness)
    )
    top = np.argsort(maps.sum(axis=0))[-20:]
    cells = maps[:, top].astype(np.float64)
    return float(np.median(np.abs(np.diff(cells, axis=0)) / (cells[1:] + 1.0)))


def test_burstiness_adds_hour_to_hour_fluctuation():
    """Fixed seed 0: the median relative hour-to-hour change of the 20 busiest
    cells is 0.20 smooth and 0.39 at burstiness 1 (threshold 1.5x: 0.31)."""
    smooth, bursty = _hour_to_hour_change(0.0), _hour_to_hour_change(1.0)
    assert bursty > 1.5 * smooth


def test_negative_burstiness_is_refused():
    with pytest.raises(ConfigError, match="burstiness"):
        synthetic_mobility(5, 4, grid=10, burstiness=-0.1)
